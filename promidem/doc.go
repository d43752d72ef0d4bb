// Package promidem turns idem's engine events (core.Hooks) into Prometheus metrics:
//
//	idem_requests_total{outcome,route}  counter: events by outcome and route
//	idem_request_seconds{outcome}       histogram: a request's time in the middleware, by final outcome
//	idem_store_seconds{op}              histogram: the store's time per request, op = claim, complete or release
//	idem_completer_runs_total{outcome}  counter: requests core.Completer ran for abandoned operations, by final outcome
//
// A request counts once in idem_requests_total under its final outcome (replayed,
// completed, conflict, mismatch, rolled_back, cancelled, rejected, store_error), and once more under
// claimed or resumed when its handler ran, so "handler runs" is the rate of claimed plus
// resumed and "replays" that of replayed. The histograms take final events only. The
// route is core.Event.Route: the ServeMux pattern, or the template ginidem and echoidem
// hand over ("" when the router names none); the path is never a label.
//
//	reg := prometheus.NewRegistry()
//	hooks, err := promidem.New(reg)
//	if err != nil { … }
//	eng, err := core.New(core.Config{Store: store, Hooks: hooks})
//	if err != nil { … }
//	r.Use(ginidem.New(eng, ginidem.Config{Scope: scope}))
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// One Hooks serves any number of engines. To tell engines apart, give each its own Hooks
// registered through prometheus.WrapRegistererWith, all with the same label name
// ({api="orders"}, {api="billing"}); to prefix the names, use
// prometheus.WrapRegistererWithPrefix.
// The package decides nothing: it records what core reports.
package promidem
