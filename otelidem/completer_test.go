package otelidem_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/otelidem"
)

func TestCountsCompletions(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	hooks, err := otelidem.New(otelidem.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
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

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	counts := map[string]int64{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != "idem.completer.runs" {
			continue
		}
		for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
			outcome, _ := dp.Attributes.Value(otelidem.AttrOutcome)
			counts[outcome.AsString()] = dp.Value
		}
	}
	require.Equal(t, map[string]int64{"completed": 1}, counts)
}
