package echoidem

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
)

// Config configures the Echo middleware. Zero fields take their value from DefaultConfig.
type Config struct {
	// Skipper, when it returns true, lets the request through untouched (a
	// middleware.Skipper fits). Default: never skips.
	Skipper func(c echo.Context) bool

	// Scope names the caller a key belongs to (account, API key, tenant), read from the
	// Echo context after authentication (what your auth middleware stored with c.Set).
	// Keys never collide across scopes, so a multi-tenant API must return the caller's
	// identity here. It runs only for requests that take part. Required with
	// NewWithConfig, unless core.Config.Scope is set instead; New sets one scope for all.
	Scope func(c echo.Context) string

	// Config holds the engine's options: Store (required), Mode, Methods, KeyOptional,
	// Skip, HeaderName, Lease, LeaseWait, LockWait, Retention, MaxRequestBody,
	// MaxResponseBody, ReplayHeaders, Storable, Fingerprint, Problem, RetryAfter, Logger
	// and Hooks, each with the default its comment states.
	core.Config
}

// DefaultConfig is the default configuration: never skip, and core.DefaultConfig. It has
// neither Store nor Scope.
var DefaultConfig = Config{Skipper: func(echo.Context) bool { return false }, Config: core.DefaultConfig()}

// New returns the middleware with DefaultConfig and store, and ONE SCOPE FOR ALL
// CALLERS: a key sent by one client replays its response to any other client sending
// the same key. That suits a single-tenant API only; a multi-tenant API must use
// NewWithConfig with a Scope returning the caller's identity.
func New(store storage.Store) echo.MiddlewareFunc {
	cfg := DefaultConfig
	cfg.Store = store
	cfg.Scope = func(echo.Context) string { return "" }
	return NewWithConfig(cfg)
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
	if cfg.Skipper == nil {
		cfg.Skipper = DefaultConfig.Skipper
	}
	scope := cfg.Scope
	if s := cfg.Config.Scope; scope == nil && s != nil {
		scope = func(c echo.Context) string { return s(c.Request()) }
	}
	// Driven through ServeScoped only; with no scope at all, core reports Scope as required.
	cfg.NoScopeFunc = scope != nil
	eng, err := core.New(cfg.Config)
	if err != nil {
		return nil, fmt.Errorf("echoidem: %w", err)
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if cfg.Skipper(c) || !eng.Applies(c.Request()) {
				return next(c)
			}
			var err error
			eng.ServeScoped(c.Response(), c.Request(), scope(c), func(w http.ResponseWriter, r *http.Request) {
				if buf, ok := w.(*core.Buffer); ok {
					runHeld(c, buf, r, next)
				} else {
					err = next(c) // not keyed (an optional key is absent): Echo handles the error
				}
			})
			return err
		}
	}, nil
}

// runHeld runs next with a fresh echo.Response writing into buf and the request r, whose
// context carries the operation and the store's transaction. A returned error goes
// through c.Error here, so Echo's error page is the response the engine judges.
func runHeld(c echo.Context, buf *core.Buffer, r *http.Request, next echo.HandlerFunc) {
	h := heldPool.Get().(*held)
	h.w.Buffer = buf
	h.resp = *echo.NewResponse(&h.w, c.Echo())
	resp, req := c.Response(), c.Request()
	c.SetResponse(&h.resp)
	c.SetRequest(r)
	defer func() { // on a panic too, so that the recover middleware answers on the real response
		c.SetResponse(resp)
		c.SetRequest(req)
		*h = held{}
		heldPool.Put(h)
	}()
	if err := next(c); err != nil {
		c.Error(err)
	}
}
