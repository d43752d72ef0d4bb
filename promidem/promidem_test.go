package promidem_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/promidem"
)

// api is an orders API on a ServeMux, whose patterns become the route label.
func api(t *testing.T, hooks core.Hooks) http.Handler {
	t.Helper()
	eng, err := core.New(core.Config{Store: memstore.New(), Hooks: hooks})
	require.NoError(t, err)
	mw := eng.Middleware(func(*http.Request) string { return "acct" })
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders", mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	mux.Handle("PATCH /v1/orders/{id}", mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadGateway) // 5xx: the key is released
	})))
	return mux
}

func send(t *testing.T, h http.Handler, method, path, key, body string) int {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

// histogram returns the histogram of name whose label has value, or nil.
func histogram(t *testing.T, reg *prometheus.Registry, name, label, value string) *dto.Histogram {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetHistogram()
				}
			}
		}
	}
	return nil
}

func TestCountsRequestsByOutcomeAndRoute(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	hooks, err := promidem.New(reg)
	require.NoError(t, err)
	h := api(t, hooks)

	require.Equal(t, 201, send(t, h, "POST", "/v1/orders", "k1", `{"item":"book"}`))
	require.Equal(t, 201, send(t, h, "POST", "/v1/orders", "k1", `{"item":"book"}`))
	require.Equal(t, 422, send(t, h, "POST", "/v1/orders", "k1", `{"item":"pen"}`))
	require.Equal(t, 400, send(t, h, "POST", "/v1/orders", "", `{}`))
	require.Equal(t, 502, send(t, h, "PATCH", "/v1/orders/42", "k2", `{}`))
	require.Equal(t, 502, send(t, h, "PATCH", "/v1/orders/43", "k3", `{}`))

	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP idem_requests_total Keyed requests by what the idempotency engine did: once under the final outcome, and once more under claimed or resumed when the handler ran.
# TYPE idem_requests_total counter
idem_requests_total{outcome="claimed",route="POST /v1/orders"} 1
idem_requests_total{outcome="completed",route="POST /v1/orders"} 1
idem_requests_total{outcome="replayed",route="POST /v1/orders"} 1
idem_requests_total{outcome="mismatch",route="POST /v1/orders"} 1
idem_requests_total{outcome="rejected",route="POST /v1/orders"} 1
idem_requests_total{outcome="claimed",route="PATCH /v1/orders/{id}"} 2
idem_requests_total{outcome="rolled_back",route="PATCH /v1/orders/{id}"} 2
`), "idem_requests_total"), "two order ids, one route")
}

func TestTimesFinalEventsAndTheStore(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	hooks, err := promidem.New(reg)
	require.NoError(t, err)
	h := api(t, hooks)

	require.Equal(t, 201, send(t, h, "POST", "/v1/orders", "k1", `{}`))
	require.Equal(t, 201, send(t, h, "POST", "/v1/orders", "k1", `{}`))
	require.Equal(t, 502, send(t, h, "PATCH", "/v1/orders/42", "k2", `{}`))

	for outcome, n := range map[string]uint64{"completed": 1, "replayed": 1, "rolled_back": 1} {
		hist := histogram(t, reg, "idem_request_seconds", "outcome", outcome)
		require.NotNil(t, hist, outcome)
		assert.Equal(t, n, hist.GetSampleCount(), outcome)
		assert.Positive(t, hist.GetSampleSum(), outcome)
	}
	assert.Nil(t, histogram(t, reg, "idem_request_seconds", "outcome", "claimed"), "the handler's start is not a request's end")
	for op, n := range map[string]uint64{"claim": 3, "complete": 1, "release": 1} {
		hist := histogram(t, reg, "idem_store_seconds", "op", op)
		require.NotNil(t, hist, op)
		assert.Equal(t, n, hist.GetSampleCount(), "%s: once per request that made it", op)
	}
}

func TestOneHooksServesSeveralEngines(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	hooks, err := promidem.New(reg)
	require.NoError(t, err)
	a, b := api(t, hooks), api(t, hooks)
	require.Equal(t, 201, send(t, a, "POST", "/v1/orders", "k", `{}`))
	require.Equal(t, 201, send(t, b, "POST", "/v1/orders", "k", `{}`))
	hist := histogram(t, reg, "idem_request_seconds", "outcome", "completed")
	require.NotNil(t, hist)
	assert.Equal(t, uint64(2), hist.GetSampleCount())
}

func TestRegisteringTwiceReturnsTheRegistrysError(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	_, err := promidem.New(reg)
	require.NoError(t, err)
	_, err = promidem.New(reg)
	var already prometheus.AlreadyRegisteredError
	require.ErrorAs(t, err, &already)

	other := prometheus.NewRegistry()
	for _, name := range []string{"orders", "billing"} { // two engines' metrics, told apart by a label
		_, err = promidem.New(prometheus.WrapRegistererWith(prometheus.Labels{"api": name}, other))
		assert.NoError(t, err, name)
	}

	_, err = promidem.New(nil)
	assert.Error(t, err)
	assert.False(t, errors.As(err, &already))
}

func TestBucketsCanBeSet(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	hooks, err := promidem.New(reg, promidem.WithStoreBuckets([]float64{1}), promidem.WithRequestBuckets([]float64{1, 2}))
	require.NoError(t, err)
	send(t, api(t, hooks), "POST", "/v1/orders", "k", `{}`)
	assert.Len(t, histogram(t, reg, "idem_store_seconds", "op", "claim").GetBucket(), 1)
	assert.Len(t, histogram(t, reg, "idem_request_seconds", "outcome", "completed").GetBucket(), 2)
}

// TestDefaultBucketsAreFreshCopies: changing a returned slice changes no later default.
func TestDefaultBucketsAreFreshCopies(t *testing.T) {
	t.Parallel()
	promidem.DefaultStoreBuckets()[0] = 99
	promidem.DefaultRequestBuckets()[0] = 99
	assert.Equal(t, .0005, promidem.DefaultStoreBuckets()[0])
	assert.Equal(t, .001, promidem.DefaultRequestBuckets()[0])
}
