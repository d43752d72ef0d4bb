package promidem

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/core"
)

// DefaultStoreBuckets returns idem_store_seconds' buckets, in seconds: from half a
// millisecond (an indexed claim on a local database) to 5s (the default core.Config.StoreTimeout), in
// a new slice each call.
func DefaultStoreBuckets() []float64 {
	return []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}
}

// DefaultRequestBuckets returns idem_request_seconds' buckets, in seconds: from a
// millisecond (a replay) to 10s, in a new slice each call.
func DefaultRequestBuckets() []float64 {
	return []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
}

// Hooks is a core.Hooks recording metrics, and the prometheus.Collector of those metrics
// (New registers it). It is safe for concurrent use, by several engines at once.
type Hooks struct {
	requests *prometheus.CounterVec
	request  *prometheus.HistogramVec
	store    *prometheus.HistogramVec
	// completer counts the final outcomes of the requests core.Completer ran
	completer *prometheus.CounterVec
	// the store's three series, looked up once
	claim, complete, release prometheus.Observer
}

var _ core.Hooks = (*Hooks)(nil)
var _ prometheus.Collector = (*Hooks)(nil)

// Option changes a default of New.
type Option func(*options)

type options struct{ store, request []float64 }

// WithStoreBuckets sets idem_store_seconds' buckets. Default: DefaultStoreBuckets.
func WithStoreBuckets(buckets []float64) Option { return func(o *options) { o.store = buckets } }

// WithRequestBuckets sets idem_request_seconds' buckets. Default: DefaultRequestBuckets.
func WithRequestBuckets(buckets []float64) Option { return func(o *options) { o.request = buckets } }

// New returns Hooks whose metrics are registered on reg. It returns reg's error when
// they are already registered there (a prometheus.AlreadyRegisteredError: share one Hooks
// between engines instead) and an error for a nil reg.
func New(reg prometheus.Registerer, opts ...Option) (*Hooks, error) {
	if reg == nil {
		return nil, errors.New("promidem: New: the Registerer is nil (pass prometheus.DefaultRegisterer for the global registry)")
	}
	o := options{store: DefaultStoreBuckets(), request: DefaultRequestBuckets()}
	for _, opt := range opts {
		opt(&o)
	}
	h := &Hooks{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_requests_total",
			Help: "Keyed requests by what the idempotency engine did: once under the final outcome, and once more under claimed or resumed when the handler ran.",
		}, []string{"outcome", "route"}),
		request: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idem_request_seconds",
			Help:    "Time a keyed request spent in the idempotency middleware, handler included, by final outcome.",
			Buckets: o.request,
		}, []string{"outcome"}),
		store: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idem_store_seconds",
			Help:    "Time the idempotency store took per request: to claim the key, to complete (record and commit) or to release it.",
			Buckets: o.store,
		}, []string{"op"}),
		completer: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_completer_runs_total",
			Help: "Requests core.Completer ran for operations their clients abandoned, by final outcome: completed is one finished without its client.",
		}, []string{"outcome"}),
	}
	h.claim, h.complete, h.release = h.store.WithLabelValues("claim"), h.store.WithLabelValues("complete"), h.store.WithLabelValues("release")
	if err := reg.Register(h); err != nil {
		return nil, fmt.Errorf("promidem: registering the metrics: %w", err)
	}
	return h, nil
}

// Observe records ev: it counts every event, and times the final ones.
func (h *Hooks) Observe(_ context.Context, ev core.Event) {
	h.requests.WithLabelValues(string(ev.Outcome), ev.Route).Inc()
	if !ev.Outcome.Final() {
		return
	}
	h.request.WithLabelValues(string(ev.Outcome)).Observe(ev.Elapsed.Seconds())
	if ev.Completing {
		h.completer.WithLabelValues(string(ev.Outcome)).Inc()
	}
	if ev.StoreClaim > 0 {
		h.claim.Observe(ev.StoreClaim.Seconds())
	}
	if ev.StoreComplete > 0 {
		h.complete.Observe(ev.StoreComplete.Seconds())
	}
	if ev.StoreRelease > 0 {
		h.release.Observe(ev.StoreRelease.Seconds())
	}
}

// Describe sends the metrics' descriptions to ch (prometheus.Collector).
func (h *Hooks) Describe(ch chan<- *prometheus.Desc) {
	h.requests.Describe(ch)
	h.request.Describe(ch)
	h.store.Describe(ch)
	h.completer.Describe(ch)
}

// Collect sends the metrics to ch (prometheus.Collector).
func (h *Hooks) Collect(ch chan<- prometheus.Metric) {
	h.requests.Collect(ch)
	h.request.Collect(ch)
	h.store.Collect(ch)
	h.completer.Collect(ch)
}
