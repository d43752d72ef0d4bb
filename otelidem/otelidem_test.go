package otelidem_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/otelidem"
)

// tracedStore starts a span around each claim from the request's context, as a pgx
// tracer does around the claim's queries.
type tracedStore struct {
	storage.Store
	tracer trace.Tracer
}

func (s tracedStore) Claim(ctx context.Context, c storage.Claim) (storage.Claimed, error) {
	ctx, span := s.tracer.Start(ctx, "store.claim")
	defer span.End()
	return s.Store.Claim(ctx, c)
}

// app is an orders route behind the engine, under a server span started the way
// otelhttp does, with the spans and metrics kept in memory.
type app struct {
	http.Handler
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
}

func newApp(t *testing.T, opts ...otelidem.Option) *app {
	t.Helper()
	a := &app{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(a.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(a.reader))
	hooks, err := otelidem.New(append([]otelidem.Option{otelidem.WithMeterProvider(mp)}, opts...)...)
	require.NoError(t, err)
	eng, err := core.New(core.Config{Store: tracedStore{memstore.New(), tp.Tracer("pgx")}, Hooks: hooks})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders", eng.Middleware(func(*http.Request) string { return "acct_1" })(
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) })))
	a.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := tp.Tracer("otelhttp").Start(r.Context(), "POST /v1/orders", trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		mux.ServeHTTP(w, r.WithContext(ctx))
	})
	return a
}

func (a *app) send(t *testing.T, key, body string) sdktrace.ReadOnlySpan {
	t.Helper()
	before := len(a.spans.Ended())
	r := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(body))
	r.Header.Set("Idempotency-Key", key)
	a.ServeHTTP(httptest.NewRecorder(), r)
	for _, s := range a.spans.Ended()[before:] {
		if s.SpanKind() == trace.SpanKindServer {
			return s
		}
	}
	t.Fatal("no server span")
	return nil
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func eventNames(s sdktrace.ReadOnlySpan) []string {
	var names []string
	for _, e := range s.Events() {
		names = append(names, e.Name)
	}
	return names
}

func TestAnnotatesTheActiveSpanWithTheFinalOutcome(t *testing.T) {
	t.Parallel()
	a := newApp(t)

	first := a.send(t, "k", `{"item":"book"}`)
	assert.Equal(t, "completed", attrs(first)[otelidem.AttrOutcome].AsString(), "the final outcome overwrites claimed")
	assert.Equal(t, int64(201), attrs(first)[otelidem.AttrStatus].AsInt64())
	assert.Empty(t, eventNames(first), "a first request is not news")

	replay := a.send(t, "k", `{"item":"book"}`)
	assert.Equal(t, "replayed", attrs(replay)[otelidem.AttrOutcome].AsString())
	assert.Equal(t, int64(201), attrs(replay)[otelidem.AttrStatus].AsInt64())
	assert.Equal(t, []string{"idem.replayed"}, eventNames(replay))

	mismatch := a.send(t, "k", `{"item":"pen"}`)
	assert.Equal(t, "mismatch", attrs(mismatch)[otelidem.AttrOutcome].AsString())
	assert.Equal(t, int64(422), attrs(mismatch)[otelidem.AttrStatus].AsInt64())
	assert.Equal(t, []string{"idem.mismatch"}, eventNames(mismatch))

	for _, s := range []sdktrace.ReadOnlySpan{first, replay, mismatch} {
		assert.NotContains(t, attrs(s), otelidem.AttrKey, "identifiers are opt-in")
		assert.NotContains(t, attrs(s), otelidem.AttrScope, "identifiers are opt-in")
	}
}

// TestNeverStartsASpan: beside otelhttp and a pgx tracer, the spans are theirs: one
// server span per request, the store's span under it, and idem's attributes on the
// server span only.
func TestNeverStartsASpan(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	server := a.send(t, "k", `{}`)
	spans := a.spans.Ended()
	require.Len(t, spans, 2)
	store := spans[0]
	assert.Equal(t, "store.claim", store.Name())
	assert.Equal(t, server.SpanContext().SpanID(), store.Parent().SpanID())
	assert.NotContains(t, attrs(store), otelidem.AttrOutcome)
}

func TestIdentifiersAreOptIn(t *testing.T) {
	t.Parallel()
	a := newApp(t, otelidem.WithIdentifiers())
	s := a.send(t, "order-7", `{}`)
	assert.Equal(t, "acct_1", attrs(s)[otelidem.AttrScope].AsString())
	assert.Equal(t, "order-7", attrs(s)[otelidem.AttrKey].AsString())
}

// TestRecordsTheMetrics: the same series as promidem's, under OpenTelemetry names.
func TestRecordsTheMetrics(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	a.send(t, "k", `{}`)
	a.send(t, "k", `{}`)

	var rm metricdata.ResourceMetrics
	require.NoError(t, a.reader.Collect(context.Background(), &rm))
	require.Len(t, rm.ScopeMetrics, 1)
	assert.Equal(t, otelidem.ScopeName, rm.ScopeMetrics[0].Scope.Name)
	got := map[string]metricdata.Metrics{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		got[m.Name] = m
	}

	requests := got["idem.requests"]
	assert.Equal(t, "{request}", requests.Unit)
	counts := map[string]int64{}
	for _, dp := range requests.Data.(metricdata.Sum[int64]).DataPoints {
		outcome, _ := dp.Attributes.Value(otelidem.AttrOutcome)
		route, _ := dp.Attributes.Value(otelidem.AttrRoute)
		assert.Equal(t, "POST /v1/orders", route.AsString())
		counts[outcome.AsString()] = dp.Value
	}
	assert.Equal(t, map[string]int64{"claimed": 1, "completed": 1, "replayed": 1}, counts)

	duration := got["idem.request.duration"]
	assert.Equal(t, "s", duration.Unit)
	perOutcome := map[string]uint64{}
	for _, dp := range duration.Data.(metricdata.Histogram[float64]).DataPoints {
		outcome, _ := dp.Attributes.Value(otelidem.AttrOutcome)
		perOutcome[outcome.AsString()] = dp.Count
		assert.Positive(t, dp.Sum)
	}
	assert.Equal(t, map[string]uint64{"completed": 1, "replayed": 1}, perOutcome, "final events only")

	store := got["idem.store.duration"]
	assert.Equal(t, "s", store.Unit)
	perOp := map[string]uint64{}
	for _, dp := range store.Data.(metricdata.Histogram[float64]).DataPoints {
		op, _ := dp.Attributes.Value(otelidem.AttrStoreOp)
		perOp[op.AsString()] = dp.Count
	}
	assert.Equal(t, map[string]uint64{"claim": 2, "complete": 1}, perOp)
}

// TestDefaultsToTheGlobalMeterProvider is not parallel: it sets the global provider.
func TestDefaultsToTheGlobalMeterProvider(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	prev := otel.GetMeterProvider()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	t.Cleanup(func() { otel.SetMeterProvider(prev) })

	hooks, err := otelidem.New()
	require.NoError(t, err)
	hooks.Observe(context.Background(), core.Event{Outcome: core.OutcomeRejected, Status: 400})
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	require.Len(t, rm.ScopeMetrics, 1)
	assert.NotEmpty(t, rm.ScopeMetrics[0].Metrics)
}

// TestMetricsWithoutASpan: without a recording span the metrics are still recorded.
func TestMetricsWithoutASpan(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	hooks, err := otelidem.New(otelidem.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	require.NoError(t, err)
	assert.NotPanics(t, func() { hooks.Observe(context.Background(), core.Event{Outcome: core.OutcomeReplayed, Status: 201}) })
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	assert.NotEmpty(t, rm.ScopeMetrics)
}

// TestDefaultBucketsAreFreshCopies: changing a returned slice changes no later default.
func TestDefaultBucketsAreFreshCopies(t *testing.T) {
	t.Parallel()
	otelidem.DefaultStoreBuckets()[0] = 99
	otelidem.DefaultRequestBuckets()[0] = 99
	assert.Equal(t, .0005, otelidem.DefaultStoreBuckets()[0])
	assert.Equal(t, .001, otelidem.DefaultRequestBuckets()[0])
}
