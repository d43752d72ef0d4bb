package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
)

// orders is a route that creates an order per run and fails with X-Fail: 1.
func orders(n *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer test" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if r.Header.Get("X-Fail") == "1" {
			http.Error(w, "injected", http.StatusInternalServerError)
			return
		}
		id := n.Add(1)
		w.Header().Set("Location", fmt.Sprintf("/v1/orders/%d", id))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, id)
	})
}

// server serves POST /v1/orders through h and GET /v1/orders untouched; instances
// of one deployment share n, the orders table.
func server(t *testing.T, h func(http.Handler) http.Handler, n *atomic.Int64) string {
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders", h(orders(n)))
	mux.HandleFunc("GET /v1/orders", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, `{"orders":%d}`, n.Load()) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func withIdem(store *memstore.Store) func(http.Handler) http.Handler {
	eng, err := core.New(core.Config{Store: store})
	if err != nil {
		panic(err)
	}
	return eng.Middleware(func(r *http.Request) string { return r.Header.Get("Authorization") })
}

func TestCheckPassesAgainstTheLibrary(t *testing.T) {
	store, n := memstore.New(), &atomic.Int64{}
	a, b := server(t, withIdem(store), n), server(t, withIdem(store), n) // two instances, one store
	body := filepath.Join(t.TempDir(), "order.json")
	require.NoError(t, os.WriteFile(body, []byte(`{"item":"book","ref":"{{unique}}"}`), 0o600))
	args := []string{"check", "-url", a + "/v1/orders", "-url", b + "/v1/orders", "-body", "@" + body,
		"-header", "Authorization: Bearer test", "-get", "/v1/orders", "-fail-header", "X-Fail: 1", "-count", "/v1/orders"}
	out, stderr, code := idem(t, args...)
	require.Equal(t, 0, code, out+stderr)
	assert.Contains(t, out, "idem check: POST /v1/orders on "+a+", "+b)
	assert.Contains(t, out, "ok: 8 passed, 0 failed, 0 skipped")

	out, stderr, code = idem(t, append(args, "-json")...)
	require.Equal(t, 0, code, out+stderr)
	var rep struct {
		Passed  bool `json:"passed"`
		Results []struct {
			Name, Outcome string
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.True(t, rep.Passed)
	require.Len(t, rep.Results, 8)
	assert.Equal(t, "missing-key", rep.Results[0].Name)
	assert.Equal(t, "pass", rep.Results[0].Outcome)
}

func TestCheckFailsAgainstARouteWithoutIdempotency(t *testing.T) {
	url := server(t, func(h http.Handler) http.Handler { return h }, &atomic.Int64{})
	out, _, code := idem(t, "check", "-url", url+"/v1/orders", "-body", `{"item":"book"}`, "-header", "Authorization: Bearer test",
		"-count", "/v1/orders", "-count-field", "orders")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "side effects after 20 concurrent requests with one key: want +1, got +20")
	assert.Contains(t, out, "FAIL  missing-key")
	assert.Contains(t, out, "want 400 problem (application/problem+json, type …key-missing); got 201")
	assert.Contains(t, out, "FAILED: 1 passed, 5 failed, 2 skipped")

	out, _, code = idem(t, "check", "-url", url+"/v1/orders", "-json", "-header", "Authorization: Bearer test")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, `"passed": false`)
}

func TestCheckFailsAgainstPerInstanceStores(t *testing.T) {
	n := &atomic.Int64{}
	a, b := server(t, withIdem(memstore.New()), n), server(t, withIdem(memstore.New()), n)
	out, _, code := idem(t, "check", "-url", a+"/v1/orders", "-url", b+"/v1/orders", "-body", `{"item":"book"}`,
		"-header", "Authorization: Bearer test")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "FAIL  replay")
}

func TestCheckFailsWhenTheCounterFails(t *testing.T) {
	url := server(t, withIdem(memstore.New()), &atomic.Int64{})
	out, _, code := idem(t, "check", "-url", url+"/v1/orders", "-header", "Authorization: Bearer test", "-count", "/v1/nothing")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "stopped early: counting side effects with GET /v1/nothing: status 404")
}

func TestCountJSON(t *testing.T) {
	for body, want := range map[string]int{`3`: 3, `[1,2]`: 2, `{"orders":[1,2,3],"next":null}`: 3, `{"orders":4}`: 4} {
		n, err := countJSON([]byte(body), "")
		require.NoError(t, err, body)
		assert.Equal(t, want, n, body)
	}
	n, err := countJSON([]byte(`{"total":7,"items":[1]}`), "total")
	require.NoError(t, err)
	assert.Equal(t, 7, n)
	_, err = countJSON([]byte(`{"a":[],"b":[]}`), "")
	assert.ErrorContains(t, err, "name one with -count-field")
}
