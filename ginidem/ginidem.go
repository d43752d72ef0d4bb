package ginidem

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem/core"
)

// Config configures the Gin middleware of one engine. The engine's own options (store,
// mode, methods, limits…) are core.Config's, given once to core.New.
type Config struct {
	// Scope names the caller a key belongs to (account, API key, tenant), read from the
	// Gin context after authentication (what your auth middleware stored with c.Set);
	// core's documentation states the scope's rules. Required.
	Scope func(c *gin.Context) string

	// Skipper, when it returns true, lets the request through untouched, before any
	// key is read: skip by route with c.FullPath(). Default: nil (never skips).
	Skipper func(c *gin.Context) bool
}

// New returns Gin middleware running eng for the requests it keys (core.Config.Methods:
// POST and PATCH by default); every other request goes through untouched. Mount it on
// the engine, a group or one route; every route may share one eng. It panics when eng or
// cfg.Scope is nil (a programming error).
func New(eng *core.Engine, cfg Config) gin.HandlerFunc {
	if eng == nil {
		panic("ginidem: New: eng is nil (build it once with core.New)")
	}
	if cfg.Scope == nil {
		panic("ginidem: New: Config.Scope is nil (return a constant for a single-tenant API)")
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
		if !eng.Handle(c.Writer, c.Request, func() string { return scope(c) }, func(held http.ResponseWriter, r *http.Request) {
			runHeld(c, held, r)
		}) {
			c.Next() // not keyed: the chain runs as usual
			return
		}
		// The engine answered: the chain ran in runHeld and its outcome was written, or
		// it must not run at all (a replay, a problem).
		c.Abort()
	}
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
