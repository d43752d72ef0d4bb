// Package core is idem's framework-agnostic engine: it makes unsafe HTTP requests (POST,
// PATCH) safe to retry with an Idempotency-Key. The side effect runs once; every retry,
// concurrent or late, gets the same answer; duplicates are stopped by the store (the
// database), never by hoping retries don't overlap.
//
// For each keyed request the engine
//
//   - parses the key (bare or RFC 8941 sf-string; malformed or missing → 400), or, for a
//     webhook receiver, takes it from the provider's delivery header or the event's ID
//     in the body (Config.Key: KeyFromHeader, KeyFromJSON),
//   - reads the body once, bounded (over MaxRequestBody → 413), and fingerprints method,
//     path, query and RFC 8785-canonical JSON body,
//   - claims the key in the Store: a free key runs the handler into a held response; a
//     completed one is replayed byte for byte with Idempotent-Replayed: true; one in
//     progress is 409 with Retry-After; one used with another request is 422; a failing
//     store is 503 (fail closed: the handler never runs unprotected),
//   - records a storable response (2xx, 3xx, deterministic 4xx) before the client sees
//     it, and releases the key after a 5xx, a panic (re-raised) or a cancelled request.
//
// Two modes: atomic (the claim, the handler's writes and the completion commit in one
// database transaction carried by the request context) and phased (the claim commits
// alone with a lease and a fencing token; named phases commit recovery points; a retry
// after the lease takes over and resumes).
//
// An application builds one engine (New) and hands it to every route it guards, to Do,
// and to whatever publishes its Policy: with net/http (or chi) the scope naming the
// caller is Engine.Middleware's argument; Gin and Echo users mount ginidem.New(eng, …) or
// echoidem.New(eng, …) on the group of routes that need it.
//
//	eng, err := core.New(core.Config{Store: store}) // a pgxstore, gormstore, redisstore or memstore Store
//	if err != nil { ... }
//	accountOf := func(r *http.Request) string { return r.Header.Get("X-Account-ID") }
//	http.Handle("POST /orders", eng.Middleware(accountOf)(http.HandlerFunc(createOrder)))
//
// Wrap only the routes that need a key (a handled request without one is a 400 unless
// Config.KeyOptional is set); methods outside Config.Methods (POST and PATCH by default)
// pass through untouched. pgxstore and gormstore share the handler's transaction
// (pgxstore.MustTx, gormstore.MustDB). examples/quickstart is a whole program (Gin,
// pgxstore).
//
// An engine is one contract: its Policy describes every route it guards, and what
// changes that contract is in Config: the store, where the key is (Key), whether it is
// required (KeyOptional), the mode. A route with another contract (an optional key, a
// phased route beside atomic ones, a webhook whose key is in the body) gets an engine
// of its own, built with core.New from the same Config with that field changed, usually
// on the same store. An engine is a value with no goroutine and no connection of its
// own, so a second one costs nothing, and each publishes its own, true, Policy.
//
// # Scope
//
// The scope names the caller a key belongs to (account, API key, tenant): keys never
// collide across scopes, and two scopes with one key are two operations. Every entry
// point takes it in its own terms (Engine.Middleware's argument, ginidem.Config.Scope,
// echoidem.Config.Scope, Engine.Do's argument) and calls it only for keyed requests, so
// the middleware must run after authentication. A scope is 1–MaxScopeLength bytes of
// valid UTF-8 without NUL. A scope of "" (the middleware ran before authentication) or
// one no store can hold is the application's bug and fails closed: nothing runs, nothing
// is stored, the client gets a 500 problem of kind ProblemMisconfigured and the logger an
// error naming the route (Do returns ErrEmptyScope or ErrInvalidScope), rather than one
// key space shared by every caller. So does the middleware mounted twice on one route. A
// single-tenant API returns a constant. This is the one statement of the rule; the
// adapters and the docs link here.
//
// Refusals are RFC 9457 problems, one ProblemKind each with a fixed status and title.
// Their type URI is Config.ProblemBase followed by the kind; by default
// (DefaultProblemBase) it links to this repository's docs/problems.md, which says for
// each kind what happened and what the client should do.
//
// Code that is not an HTTP handler (a queue consumer, a job) runs its work once per
// message ID with Engine.Do, on the same stores and protocol; docs/webhooks.md shows a
// webhook receiver and a NATS JetStream consumer.
//
// This package is the application's API: Config, Engine.Middleware, Engine.Do,
// Operation (phases and derived keys), Sweeper, Hooks, Engine.Policy (the contract, to
// publish: core/policy, idemopenapi), the problems and the engine's errors. The errors a
// store reports (storage.ErrInProgress, ErrLeaseLost, ErrTransient…) are core/storage's,
// defined there once; store authors implement that seam and run core/storetest.
//
// # Adapter authors
//
// A framework adapter (ginidem, echoidem, or one of your own) is a short function of an
// engine: it reads the framework's request, calls Engine.Handle with a function that
// runs the rest of the framework's chain into the held writer it is given, and stops the
// chain when Handle reports it handled the request. net/http's Middleware is that
// adapter for http.Handler.
package core
