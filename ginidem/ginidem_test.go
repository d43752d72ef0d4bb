package ginidem_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/ginidem"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	goleak.VerifyTestMain(m)
}

// app is the Gin server every test talks to. Its routes are the same as echoidem's test
// app, so the table below is the same on both frameworks.
type app struct {
	http.Handler
	runs    atomic.Int64  // handler runs, all routes together
	panics  atomic.Int64  // runs of /api/panic
	entered chan struct{} // when non-nil, /api/orders signals here, then waits on gate
	gate    chan struct{}
	// outer is what a middleware mounted before ginidem saw after the chain: the status
	// of c.Writer and whether c.Request still was the original request.
	mu    sync.Mutex
	outer []string
}

func newApp(t *testing.T) *app {
	t.Helper()
	a := &app{}
	store := memstore.New()
	mw := ginidem.New(ginidem.Config{
		Scope:  func(c *gin.Context) string { return c.GetString("account") },
		Config: core.Config{Store: store},
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
		a.runs.Add(1)
		c.String(http.StatusOK, "list")
	})
	api.POST("/fail/:code", func(c *gin.Context) {
		a.runs.Add(1)
		code, _ := strconv.Atoi(c.Param("code"))
		c.AbortWithStatusJSON(code, gin.H{"error": "failed"})
	})
	api.POST("/error", func(c *gin.Context) { // an error nobody renders
		a.runs.Add(1)
		_ = c.Error(errors.New("database down"))
	})
	api.POST("/panic", func(c *gin.Context) { // panics on its first run only
		a.runs.Add(1)
		if a.panics.Add(1) == 1 {
			panic("boom")
		}
		c.JSON(http.StatusCreated, gin.H{"ok": true})
	})
	api.POST("/flush", func(c *gin.Context) {
		a.runs.Add(1)
		c.String(http.StatusOK, "partial")
		c.Writer.Flush()
		c.String(http.StatusOK, " rest")
	})
	api.POST("/hijack", func(c *gin.Context) {
		a.runs.Add(1)
		_, _, err := c.Writer.Hijack()
		c.String(http.StatusOK, "%t %t", errors.Is(err, ginidem.ErrStreaming), errors.Is(err, http.ErrNotSupported))
	})
	r.POST("/open", func(c *gin.Context) { // outside the group: no middleware
		a.runs.Add(1)
		c.String(http.StatusCreated, "open")
	})
	r.POST("/route", mw, func(c *gin.Context) { // route-level mounting
		a.runs.Add(1)
		c.String(http.StatusCreated, "route %d", a.runs.Load())
	})
	a.Handler = r
	return a
}

func (a *app) createOrder(c *gin.Context) {
	n := a.runs.Add(1)
	var in map[string]any
	if err := c.ShouldBindJSON(&in); err != nil {
		c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"error": err.Error()})
		return
	}
	if a.entered != nil {
		a.entered <- struct{}{}
		<-a.gate
	}
	op := core.OperationFrom(c.Request.Context())
	c.Header("Location", fmt.Sprintf("/api/orders/%d", n))
	c.SetCookie("session", "s3cret", 3600, "/", "", false, true)
	c.JSON(http.StatusCreated, gin.H{"id": n, "item": in["item"], "key": op.Key(), "scope": op.Scope(),
		"note": strings.Repeat("x", 120)})
}

// resp is one recorded answer.
type resp struct {
	status int
	header http.Header
	body   string
}

func (r resp) replayed() bool { return r.header.Get("Idempotent-Replayed") == "true" }

// do sends one request to h. key "" sends no Idempotency-Key; account "" sends no
// X-Account.
func do(t testing.TB, h http.Handler, method, path, key, account, body string) resp {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if account != "" {
		req.Header.Set("X-Account", account)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return resp{status: rec.Code, header: rec.Result().Header, body: rec.Body.String()}
}

// step is one request of a table row and what must come back.
type step struct {
	method, path, key, account, body string
	status                           int
	replayed                         bool
	runs                             int64            // handler runs after this step
	problem                          core.ProblemKind // the problem's kind, when the answer is a problem
	bodyHas                          string           // a substring of the body
	bodyLacks                        string           // a string the body must not contain
}

func post(path, key, body string, status int, replayed bool, runs int64) step {
	return step{method: http.MethodPost, path: path, key: key, body: body, status: status, replayed: replayed, runs: runs}
}

const (
	order      = `{"item":"book","qty":1,"meta":{"a":1,"b":[1,2,3]}}`
	reordered  = "{ \"meta\": {\"b\":[1,2,3], \"a\":1},\n \"qty\":1, \"item\":\"book\" }"
	otherOrder = `{"item":"pen","qty":1}`
)

// table is the response table, shared word for word with echoidem's tests.
var table = []struct {
	name  string
	steps []step
	check func(t *testing.T, got []resp) // optional, on all answers of the row
}{
	{name: "first 201 then byte-identical replay", steps: []step{
		{method: "POST", path: "/api/orders", key: "k1", account: "acme", body: order, status: 201, runs: 1, bodyHas: `"key":"k1","note"`},
		{method: "POST", path: "/api/orders", key: "k1", account: "acme", body: order, status: 201, replayed: true, runs: 1},
		{method: "POST", path: "/api/orders", key: "k1", account: "acme", body: reordered, status: 201, replayed: true, runs: 1},
	}, check: func(t *testing.T, got []resp) {
		first := got[0]
		if first.replayed() {
			t.Errorf("first answer carries Idempotent-Replayed")
		}
		if first.header.Get("Set-Cookie") == "" {
			t.Errorf("first answer lost its Set-Cookie")
		}
		if !strings.Contains(first.body, `"scope":"acme"`) {
			t.Errorf("handler did not see the scope: %s", first.body)
		}
		for _, r := range got[1:] {
			if r.body != first.body {
				t.Errorf("replay body %q, want byte-identical %q", r.body, first.body)
			}
			for _, h := range []string{"Location", "Content-Type"} {
				if r.header.Get(h) == "" || r.header.Get(h) != first.header.Get(h) {
					t.Errorf("replay %s = %q, want %q", h, r.header.Get(h), first.header.Get(h))
				}
			}
			if c := r.header.Values("Set-Cookie"); len(c) != 0 {
				t.Errorf("replay sent Set-Cookie %q", c)
			}
		}
	}},
	{name: "different payload is 422", steps: []step{
		post("/api/orders", "k1", order, 201, false, 1),
		{method: "POST", path: "/api/orders", key: "k1", body: otherOrder, status: 422, runs: 1, problem: core.ProblemKeyReused},
	}},
	{name: "missing key is 400", steps: []step{
		{method: "POST", path: "/api/orders", body: order, status: 400, problem: core.ProblemKeyMissing},
	}},
	{name: "malformed key is 400", steps: []step{
		{method: "POST", path: "/api/orders", key: "a,b", body: order, status: 400, problem: core.ProblemKeyInvalid},
		{method: "POST", path: "/api/orders", key: strings.Repeat("k", 256), body: order, status: 400, problem: core.ProblemKeyInvalid},
	}},
	{name: "scopes are isolated", steps: []step{
		{method: "POST", path: "/api/orders", key: "k1", account: "acme", body: order, status: 201, runs: 1, bodyHas: `"scope":"acme"`},
		{method: "POST", path: "/api/orders", key: "k1", account: "globex", body: order, status: 201, runs: 2, bodyHas: `"scope":"globex"`},
		{method: "POST", path: "/api/orders", key: "k1", account: "acme", body: order, status: 201, replayed: true, runs: 2, bodyHas: `"id":1`},
	}},
	{name: "handler 4xx is stored and replayed", steps: []step{
		post("/api/fail/400", "k1", order, 400, false, 1),
		{method: "POST", path: "/api/fail/400", key: "k1", body: order, status: 400, replayed: true, runs: 1, bodyHas: "failed"},
	}},
	{name: "handler 500 releases the key", steps: []step{
		post("/api/fail/500", "k1", order, 500, false, 1),
		post("/api/fail/500", "k1", order, 500, false, 2),
	}},
	{name: "plain handler error is 500 and releases the key", steps: []step{
		post("/api/error", "k1", order, 500, false, 1),
		post("/api/error", "k1", order, 500, false, 2),
	}},
	{name: "panic releases the key and recovery answers", steps: []step{
		post("/api/panic", "k1", order, 500, false, 1),
		post("/api/panic", "k1", order, 201, false, 2),
		post("/api/panic", "k1", order, 201, true, 2),
	}},
	{name: "flush is refused, nothing half-sent", steps: []step{
		{method: "POST", path: "/api/flush", key: "k1", body: order, status: 500, runs: 1, bodyLacks: "partial"},
		{method: "POST", path: "/api/flush", key: "k1", body: order, status: 500, runs: 2, bodyLacks: "partial"},
	}},
	{name: "hijack is refused", steps: []step{
		{method: "POST", path: "/api/hijack", key: "k1", body: order, status: 200, runs: 1, bodyHas: "true true"},
	}},
	{name: "GET routes are untouched", steps: []step{
		{method: "GET", path: "/api/orders", key: "k1", status: 200, runs: 1, bodyHas: "list"},
		{method: "GET", path: "/api/orders", key: "k1", status: 200, runs: 2, bodyHas: "list"},
		{method: "GET", path: "/api/orders", key: "a,b", status: 200, runs: 3, bodyHas: "list"},
	}},
	{name: "routes outside the group are untouched", steps: []step{
		post("/open", "", order, 201, false, 1),
		post("/open", "k1", order, 201, false, 2),
		post("/open", "k1", order, 201, false, 3),
	}},
	{name: "route-level mounting", steps: []step{
		{method: "POST", path: "/route", body: order, status: 400, problem: core.ProblemKeyMissing},
		{method: "POST", path: "/route", key: "k1", body: order, status: 201, runs: 1, bodyHas: "route 1"},
		{method: "POST", path: "/route", key: "k1", body: order, status: 201, replayed: true, runs: 1, bodyHas: "route 1"},
	}},
}

func TestResponseTable(t *testing.T) {
	t.Parallel()
	for _, row := range table {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			a := newApp(t)
			var got []resp
			for i, s := range row.steps {
				account := s.account
				if account == "" {
					account = "anonymous" // an authenticated caller with no account of the row's own
				}
				r := do(t, a, s.method, s.path, s.key, account, s.body)
				got = append(got, r)
				where := fmt.Sprintf("step %d (%s %s key %q)", i+1, s.method, s.path, s.key)
				if r.status != s.status {
					t.Fatalf("%s: status %d, want %d; body %s", where, r.status, s.status, r.body)
				}
				if r.replayed() != s.replayed {
					t.Errorf("%s: replayed %t, want %t", where, r.replayed(), s.replayed)
				}
				if n := a.runs.Load(); n != s.runs {
					t.Errorf("%s: handler ran %d times, want %d", where, n, s.runs)
				}
				if s.problem != "" {
					if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
						t.Errorf("%s: Content-Type %q, want application/problem+json", where, ct)
					}
					if !strings.Contains(r.body, `"type":"`+core.DefaultProblemBase+string(s.problem)+`"`) {
						t.Errorf("%s: body %s, want problem %s", where, r.body, s.problem)
					}
				}
				if s.bodyHas != "" && !strings.Contains(r.body, s.bodyHas) {
					t.Errorf("%s: body %q lacks %q", where, r.body, s.bodyHas)
				}
				if s.bodyLacks != "" && strings.Contains(r.body, s.bodyLacks) {
					t.Errorf("%s: body %q contains %q", where, r.body, s.bodyLacks)
				}
			}
			if row.check != nil {
				row.check(t, got)
			}
		})
	}
}

func TestInProgressIs409(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	a.entered, a.gate = make(chan struct{}), make(chan struct{})
	first := make(chan resp)
	go func() { first <- do(t, a, "POST", "/api/orders", "k1", "acme", order) }()
	<-a.entered // the first request holds the key and waits

	dup := do(t, a, "POST", "/api/orders", "k1", "acme", order)
	if dup.status != http.StatusConflict || dup.header.Get("Retry-After") != "1" ||
		!strings.Contains(dup.body, string(core.ProblemInProgress)) {
		t.Errorf("duplicate in flight: %d Retry-After %q %s, want 409, 1, in-progress problem",
			dup.status, dup.header.Get("Retry-After"), dup.body)
	}
	other := do(t, a, "POST", "/api/orders", "k1", "acme", otherOrder)
	if other.status != http.StatusUnprocessableEntity {
		t.Errorf("other payload in flight: %d, want 422", other.status)
	}

	close(a.gate)
	if r := <-first; r.status != http.StatusCreated || r.replayed() {
		t.Fatalf("first: %d replayed=%t, want 201 original", r.status, r.replayed())
	}
	if r := do(t, a, "POST", "/api/orders", "k1", "acme", order); r.status != http.StatusCreated || !r.replayed() {
		t.Errorf("after completion: %d replayed=%t, want 201 replayed", r.status, r.replayed())
	}
	if n := a.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}

func TestParallelDuplicatesRunOnce(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	const n = 30
	var wg sync.WaitGroup
	answers := make([]resp, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			answers[i] = do(t, a, "POST", "/api/orders", "dup", "acme", order)
		})
	}
	close(start)
	wg.Wait()
	if runs := a.runs.Load(); runs != 1 {
		t.Fatalf("handler ran %d times, want 1", runs)
	}
	originals := 0
	var body string
	for _, r := range answers {
		switch {
		case r.status == http.StatusCreated && !r.replayed():
			originals++
			body = r.body
		case r.status == http.StatusCreated || r.status == http.StatusConflict:
		default:
			t.Errorf("unexpected answer %d %s", r.status, r.body)
		}
	}
	if originals != 1 {
		t.Fatalf("%d original answers, want 1", originals)
	}
	for _, r := range answers {
		if r.replayed() && r.body != body {
			t.Errorf("replay %q differs from the original %q", r.body, body)
		}
	}
}

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
	r.POST("/x", ginidem.New(ginidem.Config{
		Scope:  func(*gin.Context) string { return "tenant" },
		Config: core.Config{Store: memstore.New(), KeyOptional: true},
	}), func(c *gin.Context) {
		_, err := core.OperationFromSafely(c.Request.Context())
		c.String(http.StatusCreated, "%d %t", runs.Add(1), errors.Is(err, core.ErrNoOperation))
	})
	for i, want := range []string{"1 true", "2 true"} {
		if got := do(t, r, "POST", "/x", "", "", order); got.status != 201 || got.body != want {
			t.Errorf("request %d without key: %d %q, want 201 %q", i+1, got.status, got.body, want)
		}
	}
	if got := do(t, r, "POST", "/x", "k", "", order); got.body != "3 false" {
		t.Errorf("with key: %q, want the operation in context", got.body)
	}
}

func TestHandlerMayChangeStatusBeforeWriting(t *testing.T) {
	t.Parallel()
	r := gin.New()
	r.POST("/x", ginidem.New(ginidem.Config{
		Scope:  func(*gin.Context) string { return "tenant" },
		Config: core.Config{Store: memstore.New()},
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
		if got := do(t, r, "POST", "/x", "k", "", order); got.status != http.StatusAccepted || got.body != "queued" || got.replayed() != replayed {
			t.Errorf("got %d %q replayed=%t, want 202 \"queued\" replayed=%t", got.status, got.body, got.replayed(), replayed)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	scope := func(*gin.Context) string { return "tenant" }
	for _, tc := range []struct {
		name  string
		cfg   ginidem.Config
		field string
	}{
		{"no store", ginidem.Config{Scope: scope}, "Store"},
		{"no scope", ginidem.Config{Config: core.Config{Store: store}}, "Scope"},
		{"atomic on memstore", ginidem.Config{Scope: scope, Config: core.Config{Store: store, Mode: core.ModeAtomic}}, "Mode"},
		{"bad replay header", ginidem.Config{Scope: scope, Config: core.Config{Store: store, ReplayHeaders: []string{"Set-Cookie"}}}, "ReplayHeaders"},
	} {
		_, err := tc.cfg.ToMiddleware()
		if !errors.Is(err, core.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field+":") {
			t.Errorf("%s: error %v, want ErrInvalidConfig naming %s", tc.name, err, tc.field)
		}
		func() {
			defer func() {
				if p := recover(); p == nil {
					t.Errorf("%s: New did not panic", tc.name)
				}
			}()
			ginidem.New(tc.cfg)
		}()
	}
}

// TestSkipper: a Skipper sees the Gin context, so a route is skipped by c.FullPath();
// it runs before any key is read.
func TestSkipper(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	r := gin.New()
	r.Use(ginidem.New(ginidem.Config{
		Scope:   func(*gin.Context) string { return "tenant" },
		Skipper: func(c *gin.Context) bool { return c.FullPath() == "/login" },
		Config:  core.Config{Store: memstore.New()},
	}))
	h := func(c *gin.Context) { c.String(http.StatusCreated, strconv.FormatInt(runs.Add(1), 10)) }
	r.POST("/login", h)
	r.POST("/orders/:id", h)
	assert.Equal(t, http.StatusCreated, do(t, r, "POST", "/login", "", "", order).status, "the skipped route runs without a key")
	assert.Equal(t, http.StatusBadRequest, do(t, r, "POST", "/orders/7", "", "", order).status, "a kept route needs a key")
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
	r.POST("/x", ginidem.New(ginidem.Config{
		Scope:  func(*gin.Context) string { return "tenant" },
		Config: core.Config{Store: memstore.New(memstore.WithClock(clock), memstore.WithRetention(time.Hour))},
	}), func(c *gin.Context) { c.String(http.StatusCreated, "%d", runs.Add(1)) })
	if got := do(t, r, "POST", "/x", "k", "", order); got.body != "1" {
		t.Fatalf("first: %q", got.body)
	}
	if got := do(t, r, "POST", "/x", "k", "", order); got.body != "1" || !got.replayed() {
		t.Fatalf("within retention: %q replayed=%t, want the replay", got.body, got.replayed())
	}
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	if got := do(t, r, "POST", "/x", "k", "", order); got.body != "2" || got.replayed() {
		t.Errorf("past retention: %q replayed=%t, want a new run", got.body, got.replayed())
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
	r.POST("/sse", ginidem.New(ginidem.Config{
		Scope:  func(*gin.Context) string { return "tenant" },
		Config: core.Config{Store: memstore.New()},
	}), func(c *gin.Context) {
		c.SSEvent("message", "partial")
		c.Writer.Flush()
	})
	got := do(t, r, "POST", "/sse", "k", "", order)
	err, _ := recovered.Load().(error)
	if got.status != http.StatusInternalServerError || got.body != "" || !errors.Is(err, ginidem.ErrStreaming) {
		t.Errorf("got %d %q, recovered %v; want 500, empty body, ErrStreaming", got.status, got.body, recovered.Load())
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
	r.POST("/orders", ginidem.New(ginidem.Config{
		Scope:  func(c *gin.Context) string { return c.GetString("account") }, // never set
		Config: core.Config{Store: store},
	}), func(c *gin.Context) { runs.Add(1); c.String(http.StatusCreated, "made") })
	for _, caller := range []string{"acme", "globex"} {
		got := do(t, r, "POST", "/orders", "shared", caller, order)
		assert.Equal(t, http.StatusInternalServerError, got.status, "%s: status", caller)
		assert.Contains(t, got.body, string(core.ProblemMisconfigured), "%s: problem", caller)
		assert.False(t, got.replayed(), "%s: replayed", caller)
	}
	assert.Zero(t, runs.Load(), "handler runs")
	assert.Zero(t, store.Len(), "keys stored")
}
