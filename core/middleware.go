package core

import "net/http"

// Middleware returns net/http middleware for the engine (it fits chi and any router
// taking func(http.Handler) http.Handler):
//
//	eng, err := core.New(cfg) // an invalid cfg is an error here, not a panic later
//	if err != nil { ... }
//	mux.Handle("POST /v1/orders", eng.Middleware(accountOf)(createOrder))
//
// One Engine serves any number of routes, each with its own scope function, and its Do
// and Policy too. scope names the caller a key belongs to, read from the request after
// authentication (see Scope in the package documentation). Mount the middleware once per
// route: a second one on a request the first already handles refuses it with a 500
// problem naming the route. Middleware panics when scope is nil.
func (e *Engine) Middleware(scope func(r *http.Request) string) func(http.Handler) http.Handler {
	if scope == nil {
		panic("idem: Engine.Middleware: scope is nil (return a constant for a single-tenant API)")
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !e.Handle(w, r, func() string { return scope(r) }, next.ServeHTTP) {
				next.ServeHTTP(w, r) // not keyed: the handler runs as it would without idem
			}
		})
	}
}
