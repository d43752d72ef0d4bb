package promidem_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/promidem"
)

func TestCountsCompletions(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	hooks, err := promidem.New(reg)
	require.NoError(t, err)
	eng, err := core.New(core.Config{Store: memstore.New(), KeepRequest: true, Hooks: hooks})
	require.NoError(t, err)
	fail := true
	mux := http.NewServeMux()
	mux.Handle("POST /pay", eng.Middleware(func(*http.Request) string { return "acct" })(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := core.MustOperation(r.Context()).Phase(r.Context(), "charged", func(context.Context) error { return nil }); err != nil || fail {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})))
	r := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(`{}`))
	r.Header.Set("Idempotency-Key", "k")
	mux.ServeHTTP(httptest.NewRecorder(), r)
	fail = false
	n, err := (&core.Completer{Engine: eng, Handler: mux, Grace: time.Nanosecond}).Pass(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP idem_completer_runs_total Requests core.Completer ran for operations their clients abandoned, by final outcome: completed is one finished without its client.
# TYPE idem_completer_runs_total counter
idem_completer_runs_total{outcome="completed"} 1
`), "idem_completer_runs_total"))
}
