package ginidem

import (
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem/core"
)

// Config configures the Gin middleware. Zero fields take the defaults documented on
// core.Config.
type Config struct {
	// Scope names the caller a key belongs to (account, API key, tenant), read from the
	// Gin context after authentication (what your auth middleware stored with c.Set).
	// Keys never collide across scopes, so a multi-tenant API must return the caller's
	// identity here. It runs only for requests that take part. Required, unless
	// core.Config.Scope is set instead; return a constant for a single-tenant API.
	Scope func(c *gin.Context) string

	// Config holds the engine's options: Store (required), Mode, Methods, KeyOptional,
	// Skip, HeaderName, Lease, LeaseWait, LockWait, Retention, MaxRequestBody,
	// MaxResponseBody, ReplayHeaders, Storable, Fingerprint, Problem, RetryAfter, Logger
	// and Hooks, each with the default its comment states.
	core.Config
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
	scope := cfg.Scope
	if s := cfg.Config.Scope; scope == nil && s != nil {
		scope = func(c *gin.Context) string { return s(c.Request) }
	}
	// Driven through ServeScoped only; with no scope at all, core reports Scope as required.
	cfg.NoScopeFunc = scope != nil
	eng, err := core.New(cfg.Config)
	if err != nil {
		return nil, fmt.Errorf("ginidem: %w", err)
	}
	return func(c *gin.Context) {
		if !eng.Applies(c.Request) {
			c.Next()
			return
		}
		ran := false
		eng.ServeScoped(c.Writer, c.Request, scope(c), func(w http.ResponseWriter, r *http.Request) {
			ran = true
			if buf, ok := w.(*core.Buffer); ok {
				runHeld(c, buf, r)
			} else {
				c.Next() // not keyed (an optional key is absent): the chain runs as usual
			}
		})
		if !ran {
			c.Abort() // the engine answered (replay or problem): the handlers must not run
		}
	}, nil
}

// runHeld runs the rest of the chain with c.Writer holding the response in buf and
// c.Request set to r, whose context carries the operation and the store's transaction.
func runHeld(c *gin.Context, buf *core.Buffer, r *http.Request) {
	w := writerPool.Get().(*writer)
	w.ResponseWriter, w.buf, w.status = c.Writer, buf, http.StatusOK
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
