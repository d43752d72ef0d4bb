package ginidem

import (
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/adapter"
)

// Config configures the Gin middleware.
type Config struct {
	// Scope names the caller a key belongs to (account, API key, tenant), read from the
	// Gin context after authentication (what your auth middleware stored with c.Set).
	// Keys never collide across scopes, so a multi-tenant API must return the caller's
	// identity here; a single-tenant API returns a constant. It runs only for keyed
	// requests, and a scope of "" refuses the request with a 500 problem (the middleware
	// ran before authentication) instead of sharing one key space between callers; so
	// does a scope no store can hold (core.MaxScopeLength: 1–255 bytes of valid UTF-8).
	// Required.
	Scope func(c *gin.Context) string

	// Skipper, when it returns true, lets the request through untouched, before any
	// key is read: skip by route with c.FullPath(). Default: nil (never skips).
	Skipper func(c *gin.Context) bool

	// Config holds the engine's options, each with the default its comment states
	// (see core.Config): Store is required. It is a named field, not an embedded one, so
	// core.Config's methods (Validate, WithDefaults) are not mistaken for the adapter's:
	// they know nothing of Scope or Skipper.
	Config core.Config
}

// New returns Gin middleware for cfg. Mount it on the engine, a group or one route; it
// handles the requests core.Config.Methods lists (POST and PATCH by default) and lets
// every other request through untouched. It panics when cfg is invalid (a programming
// error, such as a nil Store or Scope); ToMiddleware returns the error instead.
func New(cfg Config) gin.HandlerFunc {
	h, err := cfg.ToMiddleware()
	if err != nil {
		panic(err)
	}
	return h
}

// ToMiddleware is New returning an error, wrapping core.ErrInvalidConfig and naming the
// field, instead of panicking.
func (cfg Config) ToMiddleware() (gin.HandlerFunc, error) {
	if cfg.Scope == nil {
		return nil, fmt.Errorf("ginidem: %w: Scope: required (return a constant for a single-tenant API)", core.ErrInvalidConfig)
	}
	eng, err := core.New(cfg.Config)
	if err != nil {
		return nil, fmt.Errorf("ginidem: %w", err)
	}
	scope, skip := cfg.Scope, cfg.Skipper
	return func(c *gin.Context) {
		if skip != nil && skip(c) {
			c.Next()
			return
		}
		if route := c.FullPath(); route != "" {
			c.Request.Pattern = route // as ServeMux does: core.Event.Route and log lines name the route
		}
		switch adapter.Handle(eng, c.Writer, c.Request, func() string { return scope(c) }, func(held http.ResponseWriter, r *http.Request) {
			runHeld(c, held, r)
		}) {
		case adapter.Passed:
			c.Next() // not keyed: the chain runs as usual
		case adapter.Answered:
			c.Abort() // the engine answered (replay or problem): the handlers must not run
		case adapter.Ran: // the chain ran in runHeld, and the engine wrote its outcome
		}
	}, nil
}

// runHeld runs the rest of the chain with c.Writer holding the response in held and
// c.Request set to r, whose context carries the operation and the store's transaction.
func runHeld(c *gin.Context, held http.ResponseWriter, r *http.Request) {
	w := writerPool.Get().(*writer)
	w.ResponseWriter, w.held, w.status = c.Writer, held, http.StatusOK
	req := c.Request
	c.Writer, c.Request = w, r
	defer func() { // on a panic too, so that gin.Recovery answers on the real writer
		c.Writer, c.Request = w.ResponseWriter, req
		*w = writer{}
		writerPool.Put(w)
	}()
	errs := len(c.Errors)
	c.Next()
	if !w.Written() && w.status == http.StatusOK && len(c.Errors) > errs {
		// c.Error with nothing rendered: Gin would send an empty 200, which must not be
		// recorded as the operation's answer.
		w.status = http.StatusInternalServerError
	}
	w.WriteHeaderNow() // a status set with c.Status and no body, as gin itself does
}
