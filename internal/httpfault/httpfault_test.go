package httpfault_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/httpfault"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestEachFault: the server sees a forwarded, delayed or dropped request and not a reset
// one; the client gets the answer of a forwarded or delayed one and no answer otherwise.
func TestEachFault(t *testing.T) {
	t.Parallel()
	var handled atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		handled.Add(1)
		w.Header().Set("X-Key", r.Header.Get("Idempotency-Key"))
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)

	faults := map[string]httpfault.Fault{"f": httpfault.Forward, "r": httpfault.ResetBefore, "d": httpfault.DropAnswer, "w": httpfault.Delay}
	p, err := httpfault.Start(srv.URL, time.Millisecond, func(r *http.Request, seen int) httpfault.Fault {
		if seen > 0 {
			return httpfault.Forward
		}
		return faults[r.Header.Get("Idempotency-Key")]
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })

	// A fresh connection per request, so that net/http never sends one again by itself.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	post := func(key string) (*http.Response, error) {
		req, err := http.NewRequest(http.MethodPost, p.URL()+"/x", strings.NewReader("body-"+key))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", key)
		resp, err := client.Do(req)
		if err == nil {
			t.Cleanup(func() { _ = resp.Body.Close() })
		}
		return resp, err
	}

	for _, key := range []string{"f", "w"} {
		resp, err := post(key)
		require.NoError(t, err, key)
		assert.Equal(t, http.StatusCreated, resp.StatusCode)
		assert.Equal(t, key, resp.Header.Get("X-Key"))
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, "body-"+key, string(body))
	}
	require.EqualValues(t, 2, handled.Load())

	_, err = post("r")
	require.Error(t, err, "a reset request gets no answer")
	assert.EqualValues(t, 2, handled.Load(), "the server never saw the reset request")

	_, err = post("d")
	require.Error(t, err, "a dropped answer never reaches the client")
	assert.EqualValues(t, 3, handled.Load(), "the server handled the request whose answer was dropped")

	resp, err := post("d") // seen once: forwarded now
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, resp.StatusCode)

	for f, want := range map[httpfault.Fault]int64{httpfault.Forward: 2, httpfault.ResetBefore: 1, httpfault.DropAnswer: 1, httpfault.Delay: 1} {
		assert.Equal(t, want, p.Count(f), "%v", f)
	}
	assert.Equal(t, 2, p.Seen("d"))
	assert.Equal(t, 1, p.Seen("r"))
}
