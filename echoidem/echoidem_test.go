package echoidem_test

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

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/echoidem"
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

// app is the Echo server every test talks to. Its routes are the same as ginidem's test
// app, so the table below is the same on both frameworks.
type app struct {
	http.Handler
	runs    atomic.Int64  // handler runs, all routes together
	panics  atomic.Int64  // runs of /api/panic
	entered chan struct{} // when non-nil, /api/orders signals here, then waits on gate
	gate    chan struct{}
	// outer is what a middleware mounted before echoidem saw after the chain: the status
	// of c.Response() and whether c.Request() still was the original request.
	mu    sync.Mutex
	outer []string
}

func newApp(t *testing.T) *app {
	t.Helper()
	a := &app{}
	store := memstore.New()
	mw := echoidem.NewWithConfig(echoidem.Config{
		Scope:  func(c echo.Context) string { s, _ := c.Get("account").(string); return s },
		Config: core.Config{Store: store},
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
		a.runs.Add(1)
		return c.String(http.StatusOK, "list")
	})
	api.POST("/fail/:code", func(c echo.Context) error {
		a.runs.Add(1)
		code, _ := strconv.Atoi(c.Param("code"))
		return echo.NewHTTPError(code, "failed")
	})
	api.POST("/error", func(c echo.Context) error { // a plain error: Echo's 500 page
		a.runs.Add(1)
		return errors.New("database down")
	})
	api.POST("/panic", func(c echo.Context) error { // panics on its first run only
		a.runs.Add(1)
		if a.panics.Add(1) == 1 {
			panic("boom")
		}
		return c.JSON(http.StatusCreated, map[string]bool{"ok": true})
	})
	api.POST("/flush", func(c echo.Context) error {
		a.runs.Add(1)
		_, _ = c.Response().Write([]byte("partial"))
		c.Response().Flush()
		_, err := c.Response().Write([]byte(" rest"))
		return err
	})
	api.POST("/hijack", func(c echo.Context) error {
		a.runs.Add(1)
		_, _, err := c.Response().Hijack()
		return c.String(http.StatusOK, fmt.Sprintf("%t %t", errors.Is(err, echoidem.ErrStreaming), errors.Is(err, http.ErrNotSupported)))
	})
	e.POST("/open", func(c echo.Context) error { // outside the group: no middleware
		a.runs.Add(1)
		return c.String(http.StatusCreated, "open")
	})
	e.POST("/route", func(c echo.Context) error { // route-level mounting
		a.runs.Add(1)
		return c.String(http.StatusCreated, fmt.Sprintf("route %d", a.runs.Load()))
	}, mw)
	a.Handler = e
	return a
}

func (a *app) createOrder(c echo.Context) error {
	n := a.runs.Add(1)
	var in map[string]any
	if err := c.Bind(&in); err != nil {
		return err
	}
	if a.entered != nil {
		a.entered <- struct{}{}
		<-a.gate
	}
	op := core.OperationFrom(c.Request().Context())
	c.Response().Header().Set("Location", fmt.Sprintf("/api/orders/%d", n))
	c.SetCookie(&http.Cookie{Name: "session", Value: "s3cret", Path: "/", HttpOnly: true})
	return c.JSON(http.StatusCreated, map[string]any{"id": n, "item": in["item"], "key": op.Key(), "scope": op.Scope(),
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
		_, err := core.OperationFromSafely(c.Request().Context())
		n := runs.Add(1)
		if c.QueryParam("teapot") != "" {
			return echo.NewHTTPError(http.StatusTeapot, "short and stout")
		}
		return c.String(http.StatusCreated, fmt.Sprintf("%d %t", n, errors.Is(err, core.ErrNoOperation)))
	}, echoidem.NewWithConfig(echoidem.Config{
		Scope:  func(echo.Context) string { return "tenant" },
		Config: core.Config{Store: memstore.New(), KeyOptional: true},
	}))
	for i, want := range []string{"1 true", "2 true"} {
		if got := do(t, e, "POST", "/x", "", "", order); got.status != 201 || got.body != want {
			t.Errorf("request %d without key: %d %q, want 201 %q", i+1, got.status, got.body, want)
		}
	}
	if got := do(t, e, "POST", "/x", "k", "", order); got.body != "3 false" {
		t.Errorf("with key: %q, want the operation in context", got.body)
	}
	// Without a key the handler's error goes back to Echo as usual; with one, it is
	// rendered, recorded and replayed.
	if got := do(t, e, "POST", "/x?teapot=1", "", "", order); got.status != http.StatusTeapot || got.replayed() {
		t.Errorf("error without key: %d replayed=%t, want 418", got.status, got.replayed())
	}
	for _, replayed := range []bool{false, true} {
		if got := do(t, e, "POST", "/x?teapot=1", "t", "", order); got.status != http.StatusTeapot ||
			got.replayed() != replayed || !strings.Contains(got.body, "short and stout") {
			t.Errorf("error with key: %d replayed=%t %q, want 418 replayed=%t", got.status, got.replayed(), got.body, replayed)
		}
	}
	if n := runs.Load(); n != 5 {
		t.Errorf("handler ran %d times, want 5", n)
	}
}

func TestSkipper(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	cfg := echoidem.Config{
		Skipper: func(c echo.Context) bool { return c.Path() == "/skipped" },
		Scope:   func(echo.Context) string { return "tenant" },
		Config:  core.Config{Store: memstore.New()},
	}
	e := newEcho()
	e.Use(echoidem.NewWithConfig(cfg))
	h := func(c echo.Context) error { return c.String(http.StatusCreated, strconv.FormatInt(runs.Add(1), 10)) }
	e.POST("/skipped", h)
	e.POST("/kept", h)
	if got := do(t, e, "POST", "/skipped", "", "", order); got.status != http.StatusCreated {
		t.Errorf("skipped route without key: %d, want 201", got.status)
	}
	if got := do(t, e, "POST", "/kept", "", "", order); got.status != http.StatusBadRequest {
		t.Errorf("kept route without key: %d, want 400", got.status)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}

// TestNewTakesTheScope: New(store, scope) keys each caller apart; the same key from two
// accounts is two operations.
func TestNewTakesTheScope(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	e := newEcho()
	e.Use(echoidem.New(memstore.New(), func(c echo.Context) string { return c.Request().Header.Get("X-Account") }))
	e.POST("/x", func(c echo.Context) error { return c.String(http.StatusCreated, strconv.FormatInt(runs.Add(1), 10)) })
	a := do(t, e, "POST", "/x", "k", "acme", order)
	b := do(t, e, "POST", "/x", "k", "globex", order)
	assert.Equal(t, "1", a.body, "acme's first request")
	assert.Equal(t, "2", b.body, "globex's request with acme's key is its own operation")
	assert.False(t, b.replayed(), "globex must never get acme's replay")
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	scope := func(echo.Context) string { return "tenant" }
	for _, tc := range []struct {
		name  string
		cfg   echoidem.Config
		field string
	}{
		{"no store", echoidem.Config{Scope: scope}, "Store"},
		{"no scope", echoidem.Config{Config: core.Config{Store: store}}, "Scope"},
		{"atomic on memstore", echoidem.Config{Scope: scope, Config: core.Config{Store: store, Mode: core.ModeAtomic}}, "Mode"},
		{"bad replay header", echoidem.Config{Scope: scope, Config: core.Config{Store: store, ReplayHeaders: []string{"Set-Cookie"}}}, "ReplayHeaders"},
	} {
		_, err := tc.cfg.ToMiddleware()
		if !errors.Is(err, core.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field+":") {
			t.Errorf("%s: error %v, want ErrInvalidConfig naming %s", tc.name, err, tc.field)
		}
		func() {
			defer func() {
				if p := recover(); p == nil {
					t.Errorf("%s: NewWithConfig did not panic", tc.name)
				}
			}()
			echoidem.NewWithConfig(tc.cfg)
		}()
	}
	for name, mk := range map[string]func(){
		"nil store": func() { echoidem.New(nil, scope) },
		"nil scope": func() { echoidem.New(store, nil) },
	} {
		assert.Panics(t, mk, "New with a %s", name)
	}
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
	}, echoidem.NewWithConfig(echoidem.Config{
		Scope:  func(echo.Context) string { return "tenant" },
		Config: core.Config{Store: memstore.New()},
	}))
	got := do(t, e, "POST", "/sse", "k", "", order)
	err, _ := recovered.Load().(error)
	if got.status != http.StatusInternalServerError || strings.Contains(got.body, "partial") || !errors.Is(err, echoidem.ErrStreaming) {
		t.Errorf("got %d %q, recovered %v; want 500, no partial body, ErrStreaming", got.status, got.body, recovered.Load())
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
		echoidem.New(store, func(c echo.Context) string { s, _ := c.Get("account").(string); return s }))
	for _, caller := range []string{"acme", "globex"} {
		got := do(t, e, "POST", "/orders", "shared", caller, order)
		assert.Equal(t, http.StatusInternalServerError, got.status, "%s: status", caller)
		assert.Contains(t, got.body, string(core.ProblemMisconfigured), "%s: problem", caller)
		assert.False(t, got.replayed(), "%s: replayed", caller)
	}
	assert.Zero(t, runs.Load(), "handler runs")
	assert.Zero(t, store.Len(), "keys stored")
}
