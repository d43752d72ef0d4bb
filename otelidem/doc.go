// Package otelidem turns idem's engine events (core.Hooks) into OpenTelemetry span
// attributes, span events and metrics.
//
// It annotates the request's active span, the one otelhttp, otelgin or otelecho started
// (mount that instrumentation before the idempotency middleware), and never starts a span
// of its own: a pgx tracer's spans already show the store's queries under the request's
// span. On that span it sets
//
//	idem.outcome      the engine's final outcome (completed, replayed, conflict, …)
//	idem.status_code  the status the engine answered (replays and problems included)
//
// and adds an event named for each outcome a trace reader looks for: idem.replayed,
// idem.conflict, idem.mismatch, idem.resumed, idem.rolled_back, idem.cancelled and
// idem.store_error.
// The scope and the key are identifiers of a caller and of an operation: they go on the
// span (idem.scope, idem.key) only with WithIdentifiers. Errors are not copied onto the
// span (a store's error text can quote the key); the engine's log line, with the trace's
// context, has them.
//
// Through a metric.Meter from the MeterProvider it is given (default: the global one,
// otel.GetMeterProvider) it records
//
//	idem.requests          counter {request}: events, by idem.outcome and http.route
//	idem.request.duration  histogram s: a request's time in the middleware, by final idem.outcome
//	idem.store.duration    histogram s: the store's time, by idem.store.operation (claim, complete, release)
//	idem.completer.runs    counter: requests core.Completer ran for abandoned operations, by idem.outcome
//
// with the semantics of promidem's metrics. The package decides nothing: it records what
// core reports.
//
//	hooks, err := otelidem.New()
//	if err != nil { … }
//	eng, err := core.New(core.Config{Store: store, Hooks: hooks})
//	if err != nil { … }
//	r.Use(otelgin.Middleware("orders"), ginidem.New(eng, ginidem.Config{Scope: scope}))
//
// core.JoinHooks runs it beside promidem.
package otelidem
