package echoidem_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/echoidem"
	"github.com/idemkit/idem/internal/adaptertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newEcho() *echo.Echo {
	e := echo.New()
	e.HideBanner = true
	e.Logger.SetOutput(io.Discard)
	return e
}

// app is the Echo server every test talks to: the routes internal/adaptertest documents,
// so the shared tests run on it word for word.
type app struct {
	*adaptertest.App
	// outer is what a middleware mounted before echoidem saw after the chain: the status
	// of c.Response() and whether c.Request() still was the original request.
	mu    sync.Mutex
	outer []string
}

func newApp(t *testing.T) *app { return newAppOn(t, memstore.New()) }

func newAppOn(t *testing.T, store storage.Store) *app {
	t.Helper()
	a := &app{App: &adaptertest.App{}}
	mw := echoidem.New(adaptertest.Engine(core.Config{Store: store}), echoidem.Config{
		Scope: func(c echo.Context) string { s, _ := c.Get("account").(string); return s },
	})

	e := newEcho()
	e.Use(middleware.Recover())
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			befores := 0
			c.Response().Before(func() { befores++ })
			err := next(c)
			a.mu.Lock()
			a.outer = append(a.outer, fmt.Sprintf("%d %t %d %v", c.Response().Status, c.Request() == req, befores, err))
			a.mu.Unlock()
			return err
		}
	})
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc { // "authentication"
		return func(c echo.Context) error {
			c.Set("account", c.Request().Header.Get("X-Account"))
			return next(c)
		}
	})

	api := e.Group("/api", mw)
	api.POST("/orders", a.createOrder)
	api.GET("/orders", func(c echo.Context) error {
		a.Runs.Add(1)
		return c.String(http.StatusOK, "list")
	})
	api.POST("/fail/:code", func(c echo.Context) error {
		a.Runs.Add(1)
		code, _ := strconv.Atoi(c.Param("code"))
		return echo.NewHTTPError(code, "failed")
	})
	api.POST("/error", func(c echo.Context) error { // a plain error: Echo's 500 page
		a.Runs.Add(1)
		return errors.New("database down")
	})
	api.POST("/panic", func(c echo.Context) error { // panics on its first run only
		a.Runs.Add(1)
		if a.Panics.Add(1) == 1 {
			panic("boom")
		}
		return c.JSON(http.StatusCreated, map[string]bool{"ok": true})
	})
	api.POST("/flush", func(c echo.Context) error {
		a.Runs.Add(1)
		_, _ = c.Response().Write([]byte("partial"))
		c.Response().Flush()
		_, err := c.Response().Write([]byte(" rest"))
		return err
	})
	api.POST("/hijack", func(c echo.Context) error {
		a.Runs.Add(1)
		_, _, err := c.Response().Hijack()
		return c.String(http.StatusOK, fmt.Sprintf("%t %t", errors.Is(err, echoidem.ErrStreaming), errors.Is(err, http.ErrNotSupported)))
	})
	e.POST("/open", func(c echo.Context) error { // outside the group: no middleware
		a.Runs.Add(1)
		return c.String(http.StatusCreated, "open")
	})
	e.POST("/route", func(c echo.Context) error { // route-level mounting
		a.Runs.Add(1)
		return c.String(http.StatusCreated, fmt.Sprintf("route %d", a.Runs.Load()))
	}, mw)
	a.Handler = e
	return a
}

func (a *app) createOrder(c echo.Context) error {
	n := a.Runs.Add(1)
	var in map[string]any
	if err := c.Bind(&in); err != nil {
		return err
	}
	if a.Entered != nil {
		a.Entered <- struct{}{}
		<-a.Gate
	}
	op := core.MustOperation(c.Request().Context())
	c.Response().Header().Set("Location", fmt.Sprintf("/api/orders/%d", n))
	c.SetCookie(&http.Cookie{Name: "session", Value: "s3cret", Path: "/", HttpOnly: true})
	return c.JSON(http.StatusCreated, map[string]any{"id": n, "item": in["item"], "key": op.Key(), "scope": op.Scope(),
		"note": strings.Repeat("x", 120)})
}

// TestShared runs the tests every adapter passes word for word.
func TestShared(t *testing.T) {
	t.Parallel()
	adaptertest.Run(t, func(t *testing.T, store storage.Store) *adaptertest.App { return newAppOn(t, store).App })
}

// do, order and otherOrder are the shared tests' helper and bodies.
var do = adaptertest.Do

const (
	order      = adaptertest.Order
	otherOrder = adaptertest.OtherOrder
)

// TestOuterMiddlewareSeesTheAnswer: a middleware mounted before echoidem finds
// c.Response() reporting the status the client got, c.Request() restored, no error
// returned (it went through c.Error inside), and its Before hook run exactly once.
func TestOuterMiddlewareSeesTheAnswer(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	do(t, a, "POST", "/api/orders", "k1", "acme", order)      // original
	do(t, a, "POST", "/api/orders", "k1", "acme", order)      // replay
	do(t, a, "POST", "/api/orders", "k1", "acme", otherOrder) // problem
	do(t, a, "POST", "/api/fail/503", "k2", "acme", order)    // returned error, released
	do(t, a, "POST", "/api/panic", "k3", "acme", order)       // panic, recovered outside
	want := []string{"201 true 1 <nil>", "201 true 1 <nil>", "422 true 1 <nil>", "503 true 1 <nil>"}
	a.mu.Lock()
	defer a.mu.Unlock()
	if got := strings.Join(a.outer, ","); got != strings.Join(want, ",") {
		t.Errorf("outer middleware saw %q, want %q (the panicking request never returns to it)", got, want)
	}
}

func TestOptionalKeyPassesThrough(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	e := newEcho()
	e.POST("/x", func(c echo.Context) error {
		_, keyed := core.OperationFromContext(c.Request().Context())
		n := runs.Add(1)
		if c.QueryParam("teapot") != "" {
			return echo.NewHTTPError(http.StatusTeapot, "short and stout")
		}
		return c.String(http.StatusCreated, fmt.Sprintf("%d %t", n, !keyed))
	}, echoidem.New(adaptertest.Engine(core.Config{Store: memstore.New(), KeyOptional: true}), echoidem.Config{
		Scope: func(echo.Context) string { return "tenant" },
	}))
	for i, want := range []string{"1 true", "2 true"} {
		if got := do(t, e, "POST", "/x", "", "", order); got.Status != 201 || got.Body != want {
			t.Errorf("request %d without key: %d %q, want 201 %q", i+1, got.Status, got.Body, want)
		}
	}
	if got := do(t, e, "POST", "/x", "k", "", order); got.Body != "3 false" {
		t.Errorf("with key: %q, want the operation in context", got.Body)
	}
	// Without a key the handler's error goes back to Echo as usual; with one, it is
	// rendered, recorded and replayed.
	if got := do(t, e, "POST", "/x?teapot=1", "", "", order); got.Status != http.StatusTeapot || got.Replayed() {
		t.Errorf("error without key: %d replayed=%t, want 418", got.Status, got.Replayed())
	}
	for _, replayed := range []bool{false, true} {
		if got := do(t, e, "POST", "/x?teapot=1", "t", "", order); got.Status != http.StatusTeapot ||
			got.Replayed() != replayed || !strings.Contains(got.Body, "short and stout") {
			t.Errorf("error with key: %d replayed=%t %q, want 418 replayed=%t", got.Status, got.Replayed(), got.Body, replayed)
		}
	}
	if n := runs.Load(); n != 5 {
		t.Errorf("handler ran %d times, want 5", n)
	}
}

func TestSkipper(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	e := newEcho()
	e.Use(echoidem.New(adaptertest.Engine(core.Config{Store: memstore.New()}), echoidem.Config{
		Skipper: func(c echo.Context) bool { return c.Path() == "/skipped" },
		Scope:   func(echo.Context) string { return "tenant" },
	}))
	h := func(c echo.Context) error { return c.String(http.StatusCreated, strconv.FormatInt(runs.Add(1), 10)) }
	e.POST("/skipped", h)
	e.POST("/kept", h)
	if got := do(t, e, "POST", "/skipped", "", "", order); got.Status != http.StatusCreated {
		t.Errorf("skipped route without key: %d, want 201", got.Status)
	}
	if got := do(t, e, "POST", "/kept", "", "", order); got.Status != http.StatusBadRequest {
		t.Errorf("kept route without key: %d, want 400", got.Status)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}

// TestNewTakesTheScope: Config.Scope keys each caller apart; the same key from two
// accounts is two operations.
func TestNewTakesTheScope(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	e := newEcho()
	e.Use(echoidem.New(adaptertest.Engine(core.Config{Store: memstore.New()}), echoidem.Config{Scope: func(c echo.Context) string { return c.Request().Header.Get("X-Account") }}))
	e.POST("/x", func(c echo.Context) error { return c.String(http.StatusCreated, strconv.FormatInt(runs.Add(1), 10)) })
	a := do(t, e, "POST", "/x", "k", "acme", order)
	b := do(t, e, "POST", "/x", "k", "globex", order)
	assert.Equal(t, "1", a.Body, "acme's first request")
	assert.Equal(t, "2", b.Body, "globex's request with acme's key is its own operation")
	assert.False(t, b.Replayed(), "globex must never get acme's replay")
}

// TestNewPanicsOnProgrammingErrors: a nil engine or Scope is a programming error, refused
// when the middleware is built (the engine's own options are core.New's to refuse).
func TestNewPanicsOnProgrammingErrors(t *testing.T) {
	t.Parallel()
	eng := adaptertest.Engine(core.Config{Store: memstore.New()})
	scope := func(echo.Context) string { return "tenant" }
	assert.Panics(t, func() { echoidem.New(nil, echoidem.Config{Scope: scope}) }, "nil engine")
	assert.Panics(t, func() { echoidem.New(eng, echoidem.Config{}) }, "nil Scope")
}

// TestFlushPanicsWithErrStreaming: the refusal is echoidem's documented panic, seen by
// the recover middleware, and the key is released.
func TestFlushPanicsWithErrStreaming(t *testing.T) {
	t.Parallel()
	var recovered atomic.Value
	e := newEcho()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			defer func() {
				if rec := recover(); rec != nil {
					recovered.Store(rec)
					c.Error(echo.ErrInternalServerError)
				}
			}()
			return next(c)
		}
	})
	e.POST("/sse", func(c echo.Context) error {
		_, _ = c.Response().Write([]byte("data: partial\n\n"))
		c.Response().Flush()
		return nil
	}, echoidem.New(adaptertest.Engine(core.Config{Store: memstore.New()}), echoidem.Config{
		Scope: func(echo.Context) string { return "tenant" },
	}))
	got := do(t, e, "POST", "/sse", "k", "", order)
	err, _ := recovered.Load().(error)
	if got.Status != http.StatusInternalServerError || strings.Contains(got.Body, "partial") || !errors.Is(err, echoidem.ErrStreaming) {
		t.Errorf("got %d %q, recovered %v; want 500, no partial body, ErrStreaming", got.Status, got.Body, recovered.Load())
	}
}

// TestEmptyScopeFailsClosed: a Scope reading a c.Get("account") that was never set (the
// middleware mounted before authentication) refuses the request with a 500 problem; the
// handler does not run and nothing is stored, so two callers never share a key space.
func TestEmptyScopeFailsClosed(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	var runs atomic.Int64
	e := newEcho()
	e.POST("/orders", func(c echo.Context) error { runs.Add(1); return c.String(http.StatusCreated, "made") },
		echoidem.New(adaptertest.Engine(core.Config{Store: store}), echoidem.Config{Scope: func(c echo.Context) string { s, _ := c.Get("account").(string); return s }}))
	for _, caller := range []string{"acme", "globex"} {
		got := do(t, e, "POST", "/orders", "shared", caller, order)
		assert.Equal(t, http.StatusInternalServerError, got.Status, "%s: status", caller)
		assert.Contains(t, got.Body, string(core.ProblemMisconfigured), "%s: problem", caller)
		assert.False(t, got.Replayed(), "%s: replayed", caller)
	}
	assert.Zero(t, runs.Load(), "handler runs")
	assert.Zero(t, store.Len(), "keys stored")
}
