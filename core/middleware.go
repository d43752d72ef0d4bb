package core

import "net/http"

// Middleware returns net/http middleware for the engine (it fits chi and any router
// taking func(http.Handler) http.Handler). scope names the caller a key belongs to
// (account, API key, tenant), read from the request after authentication; keys never
// collide across scopes. It runs only for keyed requests, and a scope of "" refuses the
// request with a 500 problem instead of sharing one key space between callers, as does a
// scope no store can hold (see MaxScopeLength). A single-tenant API returns a constant.
// Mount the middleware once per route: a second one on a request the first already
// handles (a group's and the route's own) refuses it with a 500 problem naming the route.
// Middleware panics when scope is nil.
func (e *Engine) Middleware(scope func(r *http.Request) string) func(http.Handler) http.Handler {
	if scope == nil {
		panic("idem: Engine.Middleware: scope is nil (return a constant for a single-tenant API)")
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			e.Handle(w, r, func() string { return scope(r) }, func(held *Buffer, r *http.Request) {
				if held == nil {
					next.ServeHTTP(w, r)
					return
				}
				next.ServeHTTP(held, r)
			})
		})
	}
}

// Middleware returns net/http middleware for cfg and scope (see Engine.Middleware). It
// panics when cfg is invalid or scope is nil (programming errors); New returns the
// config's error instead.
//
//	mux.Handle("POST /v1/orders", core.Middleware(cfg, accountOf)(createOrder))
func Middleware(cfg Config, scope func(r *http.Request) string) func(http.Handler) http.Handler {
	e, err := New(cfg)
	if err != nil {
		panic(err)
	}
	return e.Middleware(scope)
}
