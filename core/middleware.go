package core

import "net/http"

// Middleware wraps next with the idempotency protocol: the net/http form, which also
// fits chi and any router taking func(http.Handler) http.Handler.
func (e *Engine) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.Serve(w, r, next.ServeHTTP)
	})
}

// Middleware returns net/http middleware for cfg. It panics when cfg is invalid (a
// programming error); use New for the error instead.
func Middleware(cfg Config) func(http.Handler) http.Handler {
	e, err := New(cfg)
	if err != nil {
		panic(err)
	}
	return e.Middleware
}
