package core

import (
	"net/http"

	"github.com/idemkit/idem/internal/enginelink"
)

// Middleware returns net/http middleware for the engine (it fits chi and any router
// taking func(http.Handler) http.Handler):
//
//	eng, err := core.New(cfg) // an invalid cfg is an error here, not a panic later
//	if err != nil { ... }
//	mux.Handle("POST /v1/orders", eng.Middleware(accountOf)(createOrder))
//
// One Engine serves any number of routes, each with its own scope function, and its Do
// and Policy too. scope names the caller a key belongs to (account, API key, tenant),
// read from the request after authentication; keys never collide across scopes. It runs
// only for keyed requests, and a scope of "" refuses the request with a 500 problem
// instead of sharing one key space between callers, as does a scope no store can hold
// (see MaxScopeLength). A single-tenant API returns a constant. Mount the middleware once
// per route: a second one on a request the first already handles (a group's and the
// route's own) refuses it with a 500 problem naming the route. Middleware panics when
// scope is nil.
func (e *Engine) Middleware(scope func(r *http.Request) string) func(http.Handler) http.Handler {
	if scope == nil {
		panic("idem: Engine.Middleware: scope is nil (return a constant for a single-tenant API)")
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if e.serve(w, r, func() string { return scope(r) }, next.ServeHTTP) == enginelink.Passed {
				next.ServeHTTP(w, r) // not keyed: the handler runs as it would without idem
			}
		})
	}
}
