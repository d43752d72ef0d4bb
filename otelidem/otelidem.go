package otelidem

import (
	"context"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem/core"
)

// ScopeName is the instrumentation scope of the package's meter.
const ScopeName = "github.com/idemkit/idem/otelidem"

// The attribute keys set on spans and metrics.
const (
	AttrOutcome = attribute.Key("idem.outcome")
	AttrStatus  = attribute.Key("idem.status_code")
	AttrScope   = attribute.Key("idem.scope") // only WithIdentifiers
	AttrKey     = attribute.Key("idem.key")   // only WithIdentifiers
	AttrRoute   = attribute.Key("http.route")
	AttrStoreOp = attribute.Key("idem.store.operation")
)

// DefaultStoreBuckets returns idem.store.duration's bucket boundaries, in seconds, as
// promidem's: from half a millisecond to 5s, in a new slice each call.
func DefaultStoreBuckets() []float64 {
	return []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}
}

// DefaultRequestBuckets returns idem.request.duration's bucket boundaries, in seconds, as
// promidem's: from a millisecond to 10s, in a new slice each call.
func DefaultRequestBuckets() []float64 {
	return []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
}

// Hooks is a core.Hooks annotating spans and recording metrics. Create it with New; it
// is safe for concurrent use, by several engines at once.
type Hooks struct {
	requests    metric.Int64Counter
	duration    metric.Float64Histogram
	store       metric.Float64Histogram
	completer   metric.Int64Counter // final outcomes of the requests core.Completer ran
	identifiers bool
	// The attribute sets, built once each and passed as ready slices: building a set,
	// or the variadic slice of an interface call, per event would allocate.
	claim, complete, release []metric.RecordOption
	durations                map[core.Outcome][]metric.RecordOption // read-only after New
	mu                       sync.RWMutex
	requestSets              map[seriesKey][]metric.AddOption // grows to maxSeries
}

// seriesKey names a series of idem.requests. A route is one of the app's patterns, so
// there are few; past maxSeries a set is built per event instead of kept.
type seriesKey struct {
	outcome core.Outcome
	route   string
}

const maxSeries = 1000

var outcomes = []core.Outcome{core.OutcomeClaimed, core.OutcomeResumed, core.OutcomeReplayed, core.OutcomeConflict, core.OutcomeMismatch,
	core.OutcomeCompleted, core.OutcomeRolledBack, core.OutcomeCancelled, core.OutcomeRejected, core.OutcomeStoreError}

func recordSet(kvs ...attribute.KeyValue) []metric.RecordOption {
	return []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(kvs...))}
}

// requestSet returns the attribute set of idem.requests for k.
func (h *Hooks) requestSet(k seriesKey) []metric.AddOption {
	h.mu.RLock()
	set, ok := h.requestSets[k]
	h.mu.RUnlock()
	if ok {
		return set
	}
	kvs := []attribute.KeyValue{AttrOutcome.String(string(k.outcome))}
	if k.route != "" {
		kvs = append(kvs, AttrRoute.String(k.route))
	}
	set = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kvs...))}
	h.mu.Lock()
	if len(h.requestSets) < maxSeries {
		h.requestSets[k] = set
	}
	h.mu.Unlock()
	return set
}

// durationSet returns the attribute set of idem.request.duration for o.
func (h *Hooks) durationSet(o core.Outcome) []metric.RecordOption {
	if set, ok := h.durations[o]; ok {
		return set
	}
	return recordSet(AttrOutcome.String(string(o)))
}

var _ core.Hooks = (*Hooks)(nil)

// Option changes a default of New.
type Option func(*options)

type options struct {
	mp          metric.MeterProvider
	identifiers bool
}

// WithMeterProvider sets where the metrics go. Default: otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option { return func(o *options) { o.mp = mp } }

// WithIdentifiers puts the scope and the key on spans (idem.scope, idem.key). They name
// a caller and an operation: enable it where traces may hold them. Never on metrics.
// Default: off.
func WithIdentifiers() Option { return func(o *options) { o.identifiers = true } }

// New returns Hooks recording through a meter of the configured MeterProvider. It fails
// only when an instrument cannot be created.
func New(opts ...Option) (*Hooks, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.mp == nil {
		o.mp = otel.GetMeterProvider()
	}
	m := o.mp.Meter(ScopeName)
	h := &Hooks{identifiers: o.identifiers, durations: make(map[core.Outcome][]metric.RecordOption), requestSets: make(map[seriesKey][]metric.AddOption)}
	var err error
	if h.requests, err = m.Int64Counter("idem.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Keyed requests by what the idempotency engine did: once under the final outcome, and once more under claimed or resumed when the handler ran.")); err != nil {
		return nil, fmt.Errorf("otelidem: idem.requests: %w", err)
	}
	if h.duration, err = m.Float64Histogram("idem.request.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a keyed request spent in the idempotency middleware, handler included, by final outcome."),
		metric.WithExplicitBucketBoundaries(DefaultRequestBuckets()...)); err != nil {
		return nil, fmt.Errorf("otelidem: idem.request.duration: %w", err)
	}
	if h.store, err = m.Float64Histogram("idem.store.duration", metric.WithUnit("s"),
		metric.WithDescription("Time the idempotency store took per request: to claim the key, to complete (record and commit) or to release it."),
		metric.WithExplicitBucketBoundaries(DefaultStoreBuckets()...)); err != nil {
		return nil, fmt.Errorf("otelidem: idem.store.duration: %w", err)
	}
	if h.completer, err = m.Int64Counter("idem.completer.runs", metric.WithUnit("{request}"),
		metric.WithDescription("Requests core.Completer ran for operations their clients abandoned, by final outcome: completed is one finished without its client.")); err != nil {
		return nil, fmt.Errorf("otelidem: idem.completer.runs: %w", err)
	}
	h.claim, h.complete, h.release = recordSet(AttrStoreOp.String("claim")), recordSet(AttrStoreOp.String("complete")), recordSet(AttrStoreOp.String("release"))
	for _, o := range outcomes {
		h.durations[o] = recordSet(AttrOutcome.String(string(o)))
	}
	return h, nil
}

// Observe annotates the active span of ctx and records the metrics of ev.
func (h *Hooks) Observe(ctx context.Context, ev core.Event) {
	h.annotate(trace.SpanFromContext(ctx), ev)
	h.requests.Add(ctx, 1, h.requestSet(seriesKey{ev.Outcome, ev.Route})...)
	if !ev.Outcome.Final() {
		return
	}
	h.duration.Record(ctx, ev.Elapsed.Seconds(), h.durationSet(ev.Outcome)...)
	if ev.Completing { // rare: a set built per event costs nothing on the request path
		h.completer.Add(ctx, 1, metric.WithAttributes(AttrOutcome.String(string(ev.Outcome))))
	}
	if ev.StoreClaim > 0 {
		h.store.Record(ctx, ev.StoreClaim.Seconds(), h.claim...)
	}
	if ev.StoreComplete > 0 {
		h.store.Record(ctx, ev.StoreComplete.Seconds(), h.complete...)
	}
	if ev.StoreRelease > 0 {
		h.store.Record(ctx, ev.StoreRelease.Seconds(), h.release...)
	}
}

// annotate sets the outcome on span (a final outcome overwrites Claimed) and adds the
// event a trace reader looks for.
func (h *Hooks) annotate(span trace.Span, ev core.Event) {
	if !span.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, AttrOutcome.String(string(ev.Outcome)))
	if ev.Status != 0 {
		attrs = append(attrs, AttrStatus.Int(ev.Status))
	}
	if h.identifiers {
		attrs = append(attrs, AttrScope.String(ev.Scope), AttrKey.String(ev.Key))
	}
	span.SetAttributes(attrs...)
	if name := eventName(ev.Outcome); name != "" {
		span.AddEvent(name)
	}
}

// eventName is the span event of an outcome a trace reader looks for, or "".
func eventName(o core.Outcome) string {
	switch o {
	case core.OutcomeReplayed:
		return "idem.replayed"
	case core.OutcomeConflict:
		return "idem.conflict"
	case core.OutcomeMismatch:
		return "idem.mismatch"
	case core.OutcomeResumed:
		return "idem.resumed"
	case core.OutcomeRolledBack:
		return "idem.rolled_back"
	case core.OutcomeCancelled:
		return "idem.cancelled"
	case core.OutcomeStoreError:
		return "idem.store_error"
	}
	return ""
}
