package ginidem_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/ginidem"
	"github.com/idemkit/idem/internal/adaptertest"
	"github.com/idemkit/idem/internal/redistopo"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	code := m.Run()
	if err := redistopo.StopShared(); err != nil { // before the leak check: each server has a goroutine
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// app is the Gin server every test talks to: the routes internal/adaptertest documents,
// so the shared tests run on it word for word.
type app struct {
	*adaptertest.App
	// outer is what a middleware mounted before ginidem saw after the chain: the status
	// of c.Writer and whether c.Request still was the original request.
	mu    sync.Mutex
	outer []string
}

func newApp(t *testing.T) *app { return newAppOn(t, memstore.New()) }

func newAppOn(t *testing.T, store storage.Store) *app {
	t.Helper()
	a := &app{App: &adaptertest.App{}}
	mw := ginidem.New(adaptertest.Engine(core.Config{Store: store}), ginidem.Config{
		Scope: func(c *gin.Context) string { return c.GetString("account") },
	})

	r := gin.New()
	r.Use(gin.RecoveryWithWriter(io.Discard)) // gin.Recovery(), quiet
	r.Use(func(c *gin.Context) {
		req := c.Request
		c.Next()
		a.mu.Lock()
		a.outer = append(a.outer, fmt.Sprintf("%d %t", c.Writer.Status(), c.Request == req))
		a.mu.Unlock()
	})
	r.Use(func(c *gin.Context) { c.Set("account", c.GetHeader("X-Account")) }) // "authentication"

	api := r.Group("/api", mw)
	api.POST("/orders", a.createOrder)
	api.GET("/orders", func(c *gin.Context) {
		a.Runs.Add(1)
		c.String(http.StatusOK, "list")
	})
	api.POST("/fail/:code", func(c *gin.Context) {
		a.Runs.Add(1)
		code, _ := strconv.Atoi(c.Param("code"))
		c.AbortWithStatusJSON(code, gin.H{"error": "failed"})
	})
	api.POST("/error", func(c *gin.Context) { // an error nobody renders
		a.Runs.Add(1)
		_ = c.Error(errors.New("database down"))
	})
	api.POST("/panic", func(c *gin.Context) { // panics on its first run only
		a.Runs.Add(1)
		if a.Panics.Add(1) == 1 {
			panic("boom")
		}
		c.JSON(http.StatusCreated, gin.H{"ok": true})
	})
	api.POST("/flush", func(c *gin.Context) {
		a.Runs.Add(1)
		c.String(http.StatusOK, "partial")
		c.Writer.Flush()
		c.String(http.StatusOK, " rest")
	})
	api.POST("/hijack", func(c *gin.Context) {
		a.Runs.Add(1)
		_, _, err := c.Writer.Hijack()
		c.String(http.StatusOK, "%t %t", errors.Is(err, ginidem.ErrStreaming), errors.Is(err, http.ErrNotSupported))
	})
	r.POST("/open", func(c *gin.Context) { // outside the group: no middleware
		a.Runs.Add(1)
		c.String(http.StatusCreated, "open")
	})
	r.POST("/route", mw, func(c *gin.Context) { // route-level mounting
		a.Runs.Add(1)
		c.String(http.StatusCreated, "route %d", a.Runs.Load())
	})
	a.Handler = r
	return a
}

func (a *app) createOrder(c *gin.Context) {
	n := a.Runs.Add(1)
	var in map[string]any
	if err := c.ShouldBindJSON(&in); err != nil {
		c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"error": err.Error()})
		return
	}
	if a.Entered != nil {
		a.Entered <- struct{}{}
		<-a.Gate
	}
	op := core.MustOperation(c.Request.Context())
	c.Header("Location", fmt.Sprintf("/api/orders/%d", n))
	c.SetCookie("session", "s3cret", 3600, "/", "", false, true)
	c.JSON(http.StatusCreated, gin.H{"id": n, "item": in["item"], "key": op.Key(), "scope": op.Scope(),
		"note": strings.Repeat("x", 120)})
}

// TestShared runs the tests every adapter passes word for word.
func TestShared(t *testing.T) {
	t.Parallel()
	adaptertest.Run(t, func(t *testing.T, store storage.Store) *adaptertest.App { return newAppOn(t, store).App })
}

// TestSharedOnRedisTopologies runs the shared tests on redisstore on a Redis Cluster and
// a Sentinel group.
func TestSharedOnRedisTopologies(t *testing.T) {
	t.Parallel()
	adaptertest.RunOn(t, adaptertest.RedisTopologies, func(t *testing.T, store storage.Store) *adaptertest.App { return newAppOn(t, store).App })
}

// do, order and otherOrder are the shared tests' helper and bodies.
var do = adaptertest.Do

const (
	order      = adaptertest.Order
	otherOrder = adaptertest.OtherOrder
)

// TestOuterMiddlewareSeesTheAnswer: a middleware mounted before ginidem finds c.Writer
// reporting the status the client got and c.Request restored, on every path.
func TestOuterMiddlewareSeesTheAnswer(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	do(t, a, "POST", "/api/orders", "k1", "acme", order)      // original
	do(t, a, "POST", "/api/orders", "k1", "acme", order)      // replay
	do(t, a, "POST", "/api/orders", "k1", "acme", otherOrder) // problem
	do(t, a, "POST", "/api/fail/503", "k2", "acme", order)    // released
	do(t, a, "POST", "/api/panic", "k3", "acme", order)       // panic, recovered outside
	want := []string{"201 true", "201 true", "422 true", "503 true"}
	a.mu.Lock()
	defer a.mu.Unlock()
	if got := strings.Join(a.outer, ","); got != strings.Join(want, ",") {
		t.Errorf("outer middleware saw %q, want %q (the panicking request never returns to it)", got, want)
	}
}

func TestOptionalKeyPassesThrough(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	r := gin.New()
	r.POST("/x", ginidem.New(adaptertest.Engine(core.Config{Store: memstore.New(), KeyOptional: true}), ginidem.Config{
		Scope: func(*gin.Context) string { return "tenant" },
	}), func(c *gin.Context) {
		_, keyed := core.OperationFromContext(c.Request.Context())
		c.String(http.StatusCreated, "%d %t", runs.Add(1), !keyed)
	})
	for i, want := range []string{"1 true", "2 true"} {
		if got := do(t, r, "POST", "/x", "", "", order); got.Status != 201 || got.Body != want {
			t.Errorf("request %d without key: %d %q, want 201 %q", i+1, got.Status, got.Body, want)
		}
	}
	if got := do(t, r, "POST", "/x", "k", "", order); got.Body != "3 false" {
		t.Errorf("with key: %q, want the operation in context", got.Body)
	}
}

func TestHandlerMayChangeStatusBeforeWriting(t *testing.T) {
	t.Parallel()
	r := gin.New()
	r.POST("/x", ginidem.New(adaptertest.Engine(core.Config{Store: memstore.New()}), ginidem.Config{
		Scope: func(*gin.Context) string { return "tenant" },
	}), func(c *gin.Context) {
		c.Status(http.StatusOK)
		if c.Writer.Written() || c.Writer.Size() != -1 {
			t.Errorf("Written %t Size %d before any write, want false -1", c.Writer.Written(), c.Writer.Size())
		}
		c.Status(http.StatusAccepted) // gin keeps the last status set before the first write
		c.Writer.WriteHeaderNow()
		if !c.Writer.Written() || c.Writer.Size() != 0 || c.Writer.Status() != http.StatusAccepted {
			t.Errorf("after WriteHeaderNow: Written %t Size %d Status %d", c.Writer.Written(), c.Writer.Size(), c.Writer.Status())
		}
		n, _ := c.Writer.WriteString("queued")
		if c.Writer.Size() != n || c.Writer.Pusher() != nil {
			t.Errorf("Size %d after writing %d bytes; Pusher %v", c.Writer.Size(), n, c.Writer.Pusher())
		}
	})
	for _, replayed := range []bool{false, true} {
		if got := do(t, r, "POST", "/x", "k", "", order); got.Status != http.StatusAccepted || got.Body != "queued" || got.Replayed() != replayed {
			t.Errorf("got %d %q replayed=%t, want 202 \"queued\" replayed=%t", got.Status, got.Body, got.Replayed(), replayed)
		}
	}
}

// TestNewPanicsOnProgrammingErrors: a nil engine or Scope is a programming error, refused
// when the middleware is built (the engine's own options are core.New's to refuse).
func TestNewPanicsOnProgrammingErrors(t *testing.T) {
	t.Parallel()
	eng := adaptertest.Engine(core.Config{Store: memstore.New()})
	scope := func(*gin.Context) string { return "tenant" }
	assert.Panics(t, func() { ginidem.New(nil, ginidem.Config{Scope: scope}) }, "nil engine")
	assert.Panics(t, func() { ginidem.New(eng, ginidem.Config{}) }, "nil Scope")
}

// TestSkipper: a Skipper sees the Gin context, so a route is skipped by c.FullPath();
// it runs before any key is read.
func TestSkipper(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	r := gin.New()
	r.Use(ginidem.New(adaptertest.Engine(core.Config{Store: memstore.New()}), ginidem.Config{
		Scope:   func(*gin.Context) string { return "tenant" },
		Skipper: func(c *gin.Context) bool { return c.FullPath() == "/login" },
	}))
	h := func(c *gin.Context) { c.String(http.StatusCreated, strconv.FormatInt(runs.Add(1), 10)) }
	r.POST("/login", h)
	r.POST("/orders/:id", h)
	assert.Equal(t, http.StatusCreated, do(t, r, "POST", "/login", "", "", order).Status, "the skipped route runs without a key")
	assert.Equal(t, http.StatusBadRequest, do(t, r, "POST", "/orders/7", "", "", order).Status, "a kept route needs a key")
	assert.Equal(t, int64(1), runs.Load(), "handler runs")
}

// TestReplayAfterRetention: the store's retention reaches the engine's claims.
func TestReplayAfterRetention(t *testing.T) {
	t.Parallel()
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	var runs atomic.Int64
	r := gin.New()
	r.POST("/x", ginidem.New(adaptertest.Engine(core.Config{Store: memstore.New(memstore.WithClock(clock), memstore.WithRetention(time.Hour))}), ginidem.Config{
		Scope: func(*gin.Context) string { return "tenant" },
	}), func(c *gin.Context) { c.String(http.StatusCreated, "%d", runs.Add(1)) })
	if got := do(t, r, "POST", "/x", "k", "", order); got.Body != "1" {
		t.Fatalf("first: %q", got.Body)
	}
	if got := do(t, r, "POST", "/x", "k", "", order); got.Body != "1" || !got.Replayed() {
		t.Fatalf("within retention: %q replayed=%t, want the replay", got.Body, got.Replayed())
	}
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	if got := do(t, r, "POST", "/x", "k", "", order); got.Body != "2" || got.Replayed() {
		t.Errorf("past retention: %q replayed=%t, want a new run", got.Body, got.Replayed())
	}
}

// TestFlushPanicsWithErrStreaming: the refusal is ginidem's documented panic, seen by
// gin's recovery, and the key is released.
func TestFlushPanicsWithErrStreaming(t *testing.T) {
	t.Parallel()
	var recovered atomic.Value
	r := gin.New()
	r.Use(gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, rec any) {
		recovered.Store(rec)
		c.AbortWithStatus(http.StatusInternalServerError)
	}))
	r.POST("/sse", ginidem.New(adaptertest.Engine(core.Config{Store: memstore.New()}), ginidem.Config{
		Scope: func(*gin.Context) string { return "tenant" },
	}), func(c *gin.Context) {
		c.SSEvent("message", "partial")
		c.Writer.Flush()
	})
	got := do(t, r, "POST", "/sse", "k", "", order)
	err, _ := recovered.Load().(error)
	if got.Status != http.StatusInternalServerError || got.Body != "" || !errors.Is(err, ginidem.ErrStreaming) {
		t.Errorf("got %d %q, recovered %v; want 500, empty body, ErrStreaming", got.Status, got.Body, recovered.Load())
	}
}

// TestEmptyScopeFailsClosed: a Scope reading what authentication never set (the
// middleware mounted before it) refuses the request with a 500 problem; the handler
// does not run and nothing is stored, so two callers never share a key space.
func TestEmptyScopeFailsClosed(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	var runs atomic.Int64
	r := gin.New()
	r.POST("/orders", ginidem.New(adaptertest.Engine(core.Config{Store: store}), ginidem.Config{
		Scope: func(c *gin.Context) string { return c.GetString("account") }, // never set
	}), func(c *gin.Context) { runs.Add(1); c.String(http.StatusCreated, "made") })
	for _, caller := range []string{"acme", "globex"} {
		got := do(t, r, "POST", "/orders", "shared", caller, order)
		assert.Equal(t, http.StatusInternalServerError, got.Status, "%s: status", caller)
		assert.Contains(t, got.Body, string(core.ProblemMisconfigured), "%s: problem", caller)
		assert.False(t, got.Replayed(), "%s: replayed", caller)
	}
	assert.Zero(t, runs.Load(), "handler runs")
	assert.Zero(t, store.Len(), "keys stored")
}

// TestEarlyHintsAreNotTheFinalStatus: a Gin handler that sends 103 Early Hints and then
// its 201, through a real server: the client gets the 201, which is recorded and replayed.
func TestEarlyHintsAreNotTheFinalStatus(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	r := gin.New()
	r.POST("/orders", ginidem.New(adaptertest.Engine(core.Config{Store: memstore.New()}), ginidem.Config{
		Scope: func(*gin.Context) string { return "tenant" },
	}), func(c *gin.Context) {
		runs.Add(1)
		c.Header("Link", "</app.css>; rel=preload; as=style")
		c.Writer.WriteHeader(http.StatusEarlyHints)
		c.JSON(http.StatusCreated, gin.H{"id": 1})
	})
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	for i, replayed := range []string{"", "true"} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/orders", strings.NewReader(order))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "hints-1")
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, http.StatusCreated, resp.StatusCode, "request %d: the final status", i+1)
		assert.JSONEq(t, `{"id":1}`, string(body), "request %d", i+1)
		assert.Equal(t, replayed, resp.Header.Get("Idempotent-Replayed"), "request %d", i+1)
	}
	assert.Equal(t, int64(1), runs.Load(), "the handler runs once")
}
