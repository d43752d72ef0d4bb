package echoidem

import (
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/idemkit/idem/core"
)

// Config configures the Echo middleware of one engine. The engine's own options (store,
// mode, methods, limits…) are core.Config's, given once to core.New.
type Config struct {
	// Skipper, when it returns true, lets the request through untouched, before any key
	// is read. Default: nil, which never skips (as middleware.DefaultSkipper).
	Skipper middleware.Skipper

	// Scope names the caller a key belongs to (account, API key, tenant), read from the
	// Echo context after authentication (what your auth middleware stored with c.Set);
	// core's documentation states the scope's rules. Required.
	Scope func(c echo.Context) string
}

// New returns Echo middleware running eng for the requests it keys (core.Config.Methods:
// POST and PATCH by default); every other request goes through untouched. Mount it with
// e.Use, on a group or on one route; every route may share one eng. It panics when eng
// or cfg.Scope is nil (a programming error).
func New(eng *core.Engine, cfg Config) echo.MiddlewareFunc {
	if eng == nil {
		panic("echoidem: New: eng is nil (build it once with core.New)")
	}
	if cfg.Scope == nil {
		panic("echoidem: New: Config.Scope is nil (return a constant for a single-tenant API)")
	}
	scope, skip := cfg.Scope, cfg.Skipper
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if skip != nil && skip(c) {
				return next(c)
			}
			if route := c.Path(); route != "" {
				c.Request().Pattern = route // as ServeMux does: core.Event.Route and log lines name the route
			}
			if !eng.Handle(c.Response(), c.Request(), func() string { return scope(c) }, func(held http.ResponseWriter, r *http.Request) {
				runHeld(c, held, r, next)
			}) {
				return next(c) // not keyed: Echo handles the error as usual
			}
			return nil // the engine has written the response
		}
	}
}

// runHeld runs next with a fresh echo.Response writing into held and the request r, whose
// context carries the operation and the store's transaction. A returned error goes
// through c.Error here, so Echo's error page is the response the engine judges.
func runHeld(c echo.Context, held http.ResponseWriter, r *http.Request, next echo.HandlerFunc) {
	h := &heldResponse{w: heldWriter{held}}
	h.resp = *echo.NewResponse(&h.w, c.Echo())
	resp, req := c.Response(), c.Request()
	c.SetResponse(&h.resp)
	c.SetRequest(r)
	defer func() { // on a panic too, so that the recover middleware answers on the real response
		c.SetResponse(resp)
		c.SetRequest(req)
	}()
	if err := next(c); err != nil {
		c.Error(err)
	}
}
