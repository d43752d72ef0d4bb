package otelidem_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/otelidem"
)

// A request and its retry under server spans (started here as otelhttp would): each
// span gets the outcome, the replay gets an event, and idem.requests counts the events.
func ExampleNew() {
	spans := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)).Tracer("otelhttp")
	reader := sdkmetric.NewManualReader()
	hooks, err := otelidem.New(otelidem.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		panic(err)
	}
	eng, err := core.New(core.Config{Store: memstore.New(), Hooks: hooks})
	if err != nil {
		panic(err)
	}
	orders := eng.Middleware(func(*http.Request) string { return "acct_1" })(
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) }))

	for range 2 {
		r := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(`{"item":"book"}`))
		r.Header.Set("Idempotency-Key", "order-1")
		ctx, span := tracer.Start(r.Context(), "POST /v1/orders", trace.WithSpanKind(trace.SpanKindServer))
		orders.ServeHTTP(httptest.NewRecorder(), r.WithContext(ctx))
		span.End()
	}
	for _, s := range spans.Ended() {
		fmt.Print(s.Name(), ":")
		for _, kv := range s.Attributes() {
			fmt.Printf(" %s=%s", kv.Key, kv.Value.Emit())
		}
		for _, e := range s.Events() {
			fmt.Print(" event=", e.Name)
		}
		fmt.Println()
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "idem.requests" {
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				outcome, _ := dp.Attributes.Value(otelidem.AttrOutcome)
				fmt.Printf("idem.requests{idem.outcome=%s} %d\n", outcome.Emit(), dp.Value)
			}
		}
	}
	// Unordered output:
	// POST /v1/orders: idem.outcome=completed idem.status_code=201
	// POST /v1/orders: idem.outcome=replayed idem.status_code=201 event=idem.replayed
	// idem.requests{idem.outcome=claimed} 1
	// idem.requests{idem.outcome=completed} 1
	// idem.requests{idem.outcome=replayed} 1
}
