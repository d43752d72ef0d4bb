package echoidem

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/adapter"
	"github.com/idemkit/idem/core/storage"
)

// Config configures the Echo middleware.
type Config struct {
	// Skipper, when it returns true, lets the request through untouched, before any key
	// is read. Default: nil, which never skips (as middleware.DefaultSkipper).
	Skipper middleware.Skipper

	// Scope names the caller a key belongs to (account, API key, tenant), read from the
	// Echo context after authentication (what your auth middleware stored with c.Set).
	// Keys never collide across scopes, so a multi-tenant API must return the caller's
	// identity here; a single-tenant API returns a constant. It runs only for keyed
	// requests, and a scope of "" (a c.Get that was never set) refuses the request with
	// a 500 problem instead of sharing one key space between callers; so does a scope no
	// store can hold (core.MaxScopeLength: 1–255 bytes of valid UTF-8). Required.
	Scope func(c echo.Context) string

	// Config holds the engine's options, each with the default its comment states
	// (see core.Config): Store is required. It is a named field, not an embedded one, so
	// core.Config's methods (Validate, WithDefaults) are not mistaken for the adapter's:
	// they know nothing of Scope or Skipper.
	Config core.Config
}

// New returns the middleware for store with every default, keying each caller's
// requests under scope (see Config.Scope), as middleware.RateLimiter(store) does for its
// store. Both are required: the scope is an argument rather than a default because no
// default is safe (a constant would put every caller in one key space). It panics on a
// nil store or scope; NewWithConfig takes the rest (Skipper, core.Config's options).
func New(store storage.Store, scope func(c echo.Context) string) echo.MiddlewareFunc {
	return NewWithConfig(Config{Scope: scope, Config: core.Config{Store: store}})
}

// NewWithConfig returns the middleware for cfg. It handles the requests
// core.Config.Methods lists (POST and PATCH by default) and lets every other request
// through untouched. It panics when cfg is invalid (a programming error, such as a nil
// Store or Scope); ToMiddleware returns the error instead.
func NewWithConfig(cfg Config) echo.MiddlewareFunc {
	mw, err := cfg.ToMiddleware()
	if err != nil {
		panic(err)
	}
	return mw
}

// ToMiddleware is NewWithConfig returning an error, wrapping core.ErrInvalidConfig and
// naming the field, instead of panicking.
func (cfg Config) ToMiddleware() (echo.MiddlewareFunc, error) {
	if cfg.Scope == nil {
		return nil, fmt.Errorf("echoidem: %w: Scope: required (return a constant for a single-tenant API)", core.ErrInvalidConfig)
	}
	eng, err := core.New(cfg.Config)
	if err != nil {
		return nil, fmt.Errorf("echoidem: %w", err)
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
			res := adapter.Handle(eng, c.Response(), c.Request(), func() string { return scope(c) }, func(held http.ResponseWriter, r *http.Request) {
				runHeld(c, held, r, next)
			})
			if res == adapter.Passed {
				return next(c) // not keyed: Echo handles the error as usual
			}
			return nil // Ran or Answered: the engine has written the response
		}
	}, nil
}

// runHeld runs next with a fresh echo.Response writing into held and the request r, whose
// context carries the operation and the store's transaction. A returned error goes
// through c.Error here, so Echo's error page is the response the engine judges.
func runHeld(c echo.Context, held http.ResponseWriter, r *http.Request, next echo.HandlerFunc) {
	h := heldPool.Get().(*heldResponse)
	h.w.ResponseWriter = held
	h.resp = *echo.NewResponse(&h.w, c.Echo())
	resp, req := c.Response(), c.Request()
	c.SetResponse(&h.resp)
	c.SetRequest(r)
	defer func() { // on a panic too, so that the recover middleware answers on the real response
		c.SetResponse(resp)
		c.SetRequest(req)
		*h = heldResponse{}
		heldPool.Put(h)
	}()
	if err := next(c); err != nil {
		c.Error(err)
	}
}
