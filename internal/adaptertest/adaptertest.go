// Package adaptertest holds the tests every framework adapter (ginidem, echoidem) must
// pass word for word: the response table (first request, byte-identical replay, 409 in
// flight, 422, 400, released keys after a 5xx, an error or a panic, refused flush and
// hijack, untouched GETs and routes outside the group), a duplicate in flight and
// parallel duplicates. An adapter's test builds an App with the routes below on its
// framework and calls Run. Test support only.
//
// Routes an App serves (ginidem/echoidem mounted on the /api group, with an
// "authentication" middleware before it setting the account from X-Account):
//
//	POST /api/orders      201 JSON with id, item, key, scope; Location; a Set-Cookie
//	GET  /api/orders      200 "list"
//	POST /api/fail/:code  the status code, JSON {"error":"failed"}
//	POST /api/error       an error nobody renders (the framework's 500)
//	POST /api/panic       panics on its first run only, then 201
//	POST /api/flush       writes, flushes, writes
//	POST /api/hijack      200 "<errors.Is(err, ErrStreaming)> <errors.Is(err, http.ErrNotSupported)>"
//	POST /open            outside the group: no middleware
//	POST /route           the middleware mounted on the route alone; 201 "route <runs>"
//
// Every handler adds one to Runs; /api/orders, when Entered is set, signals on it and
// waits for Gate before answering.
package adaptertest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/redistopo"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// App is an adapter's test server.
type App struct {
	http.Handler
	Runs    atomic.Int64  // handler runs, all routes together
	Panics  atomic.Int64  // runs of /api/panic
	Entered chan struct{} // when non-nil, /api/orders signals here, then waits on Gate
	Gate    chan struct{}
}

// Store is a store the shared tests run on: Open returns a fresh, empty one.
type Store struct {
	Name string
	Open func(t *testing.T) storage.Store
}

// Stores are the stores the shared tests run on: memstore, and redisstore on the test
// Redis with a key prefix of its own (both phased, the mode a store without a
// transaction to share runs; the SQL stores' atomic mode is tested through the adapters
// in internal/storekit).
var Stores = []Store{
	{"memstore", func(*testing.T) storage.Store { return memstore.New() }},
	{"redisstore", func(t *testing.T) storage.Store {
		c, prefix := testdb.Redis(t)
		return redisstore.New(c, redisstore.WithPrefix(prefix))
	}},
}

// RedisTopologies are redisstore on the test binary's shared Redis Cluster and Sentinel
// group (internal/redistopo, started on first use), each store with a key prefix of its
// own. A test binary running them calls redistopo.StopShared in its TestMain. One
// adapter runs them: the topology is the store's business, not the adapter's.
var RedisTopologies = []Store{
	{"redis-cluster", func(t *testing.T) storage.Store {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistopo.SharedCluster(t).Addrs(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		return redisstore.New(c, redisstore.WithPrefix(testdb.Name("idemtest")+":"))
	}},
	{"redis-sentinel", func(t *testing.T) storage.Store {
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistopo.MasterName,
			SentinelAddrs: redistopo.SharedSentinel(t).SentinelAddrs(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		return redisstore.New(c, redisstore.WithPrefix(testdb.Name("idemtest")+":"))
	}},
}

// Run runs the shared tests on every store of Stores (RunOn).
func Run(t *testing.T, newApp func(t *testing.T, store storage.Store) *App) {
	RunOn(t, Stores, newApp)
}

// RunOn runs the shared tests on every store of stores as parallel subtests, each on a
// fresh App that newApp builds on the store it is given.
func RunOn(t *testing.T, stores []Store, newApp func(t *testing.T, store storage.Store) *App) {
	for _, st := range stores {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			app := func(t *testing.T) *App { return newApp(t, st.Open(t)) }
			t.Run("ResponseTable", func(t *testing.T) { t.Parallel(); responseTable(t, app) })
			t.Run("InProgressIs409", func(t *testing.T) { t.Parallel(); inProgressIs409(t, app) })
			t.Run("ParallelDuplicatesRunOnce", func(t *testing.T) { t.Parallel(); parallelDuplicatesRunOnce(t, app) })
		})
	}
}

// Resp is one recorded answer.
type Resp struct {
	Status int
	Header http.Header
	Body   string
}

// Replayed reports whether the answer carries Idempotent-Replayed: true.
func (r Resp) Replayed() bool { return r.Header.Get("Idempotent-Replayed") == "true" }

// Do sends one request to h. key "" sends no Idempotency-Key; account "" sends no
// X-Account.
func Do(t testing.TB, h http.Handler, method, path, key, account, body string) Resp {
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
	return Resp{Status: rec.Code, Header: rec.Result().Header, Body: rec.Body.String()}
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
	// Order, Reordered (the same JSON, keys and spaces moved) and OtherOrder are the
	// request bodies of the shared tests.
	Order      = `{"item":"book","qty":1,"meta":{"a":1,"b":[1,2,3]}}`
	Reordered  = "{ \"meta\": {\"b\":[1,2,3], \"a\":1},\n \"qty\":1, \"item\":\"book\" }"
	OtherOrder = `{"item":"pen","qty":1}`
)

// table is the response table every adapter answers identically.
var table = []struct {
	name  string
	steps []step
	check func(t *testing.T, got []Resp) // optional, on all answers of the row
}{
	{name: "first 201 then byte-identical replay", steps: []step{
		{method: "POST", path: "/api/orders", key: "k1", account: "acme", body: Order, status: 201, runs: 1, bodyHas: `"key":"k1","note"`},
		{method: "POST", path: "/api/orders", key: "k1", account: "acme", body: Order, status: 201, replayed: true, runs: 1},
		{method: "POST", path: "/api/orders", key: "k1", account: "acme", body: Reordered, status: 201, replayed: true, runs: 1},
	}, check: func(t *testing.T, got []Resp) {
		first := got[0]
		assert.False(t, first.Replayed(), "the first answer carries Idempotent-Replayed")
		assert.NotEmpty(t, first.Header.Get("Set-Cookie"), "the first answer keeps its Set-Cookie")
		assert.Contains(t, first.Body, `"scope":"acme"`, "the handler sees the scope")
		for _, r := range got[1:] {
			assert.Equal(t, first.Body, r.Body, "a replay is byte-identical")
			for _, h := range []string{"Location", "Content-Type"} {
				assert.NotEmpty(t, first.Header.Get(h), "the first answer's %s", h)
				assert.Equal(t, first.Header.Get(h), r.Header.Get(h), "the replay's %s", h)
			}
			assert.Empty(t, r.Header.Values("Set-Cookie"), "a replay never sends Set-Cookie")
		}
	}},
	{name: "different payload is 422", steps: []step{
		post("/api/orders", "k1", Order, 201, false, 1),
		{method: "POST", path: "/api/orders", key: "k1", body: OtherOrder, status: 422, runs: 1, problem: core.ProblemKeyReused},
	}},
	{name: "missing key is 400", steps: []step{
		{method: "POST", path: "/api/orders", body: Order, status: 400, problem: core.ProblemKeyMissing},
	}},
	{name: "malformed key is 400", steps: []step{
		{method: "POST", path: "/api/orders", key: "a,b", body: Order, status: 400, problem: core.ProblemKeyInvalid},
		{method: "POST", path: "/api/orders", key: strings.Repeat("k", 256), body: Order, status: 400, problem: core.ProblemKeyInvalid},
	}},
	{name: "scopes are isolated", steps: []step{
		{method: "POST", path: "/api/orders", key: "k1", account: "acme", body: Order, status: 201, runs: 1, bodyHas: `"scope":"acme"`},
		{method: "POST", path: "/api/orders", key: "k1", account: "globex", body: Order, status: 201, runs: 2, bodyHas: `"scope":"globex"`},
		{method: "POST", path: "/api/orders", key: "k1", account: "acme", body: Order, status: 201, replayed: true, runs: 2, bodyHas: `"id":1`},
	}},
	{name: "handler 4xx is stored and replayed", steps: []step{
		post("/api/fail/400", "k1", Order, 400, false, 1),
		{method: "POST", path: "/api/fail/400", key: "k1", body: Order, status: 400, replayed: true, runs: 1, bodyHas: "failed"},
	}},
	{name: "handler 500 releases the key", steps: []step{
		post("/api/fail/500", "k1", Order, 500, false, 1),
		post("/api/fail/500", "k1", Order, 500, false, 2),
	}},
	{name: "plain handler error is 500 and releases the key", steps: []step{
		post("/api/error", "k1", Order, 500, false, 1),
		post("/api/error", "k1", Order, 500, false, 2),
	}},
	{name: "panic releases the key and recovery answers", steps: []step{
		post("/api/panic", "k1", Order, 500, false, 1),
		post("/api/panic", "k1", Order, 201, false, 2),
		post("/api/panic", "k1", Order, 201, true, 2),
	}},
	{name: "flush is refused, nothing half-sent", steps: []step{
		{method: "POST", path: "/api/flush", key: "k1", body: Order, status: 500, runs: 1, bodyLacks: "partial"},
		{method: "POST", path: "/api/flush", key: "k1", body: Order, status: 500, runs: 2, bodyLacks: "partial"},
	}},
	{name: "hijack is refused", steps: []step{
		{method: "POST", path: "/api/hijack", key: "k1", body: Order, status: 200, runs: 1, bodyHas: "true true"},
	}},
	{name: "GET routes are untouched", steps: []step{
		{method: "GET", path: "/api/orders", key: "k1", status: 200, runs: 1, bodyHas: "list"},
		{method: "GET", path: "/api/orders", key: "k1", status: 200, runs: 2, bodyHas: "list"},
		{method: "GET", path: "/api/orders", key: "a,b", status: 200, runs: 3, bodyHas: "list"},
	}},
	{name: "routes outside the group are untouched", steps: []step{
		post("/open", "", Order, 201, false, 1),
		post("/open", "k1", Order, 201, false, 2),
		post("/open", "k1", Order, 201, false, 3),
	}},
	{name: "route-level mounting", steps: []step{
		{method: "POST", path: "/route", body: Order, status: 400, problem: core.ProblemKeyMissing},
		{method: "POST", path: "/route", key: "k1", body: Order, status: 201, runs: 1, bodyHas: "route 1"},
		{method: "POST", path: "/route", key: "k1", body: Order, status: 201, replayed: true, runs: 1, bodyHas: "route 1"},
	}},
}

func responseTable(t *testing.T, newApp func(t *testing.T) *App) {
	for _, row := range table {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			a := newApp(t)
			var got []Resp
			for i, s := range row.steps {
				account := s.account
				if account == "" {
					account = "anonymous" // an authenticated caller with no account of the row's own
				}
				r := Do(t, a, s.method, s.path, s.key, account, s.body)
				got = append(got, r)
				where := fmt.Sprintf("step %d (%s %s key %q)", i+1, s.method, s.path, s.key)
				require.Equal(t, s.status, r.Status, "%s: status; body %s", where, r.Body)
				assert.Equal(t, s.replayed, r.Replayed(), "%s: replayed", where)
				assert.Equal(t, s.runs, a.Runs.Load(), "%s: handler runs so far", where)
				if s.problem != "" {
					assert.Equal(t, "application/problem+json", r.Header.Get("Content-Type"), "%s: Content-Type", where)
					assert.Contains(t, r.Body, `"type":"`+core.DefaultProblemBase+string(s.problem)+`"`, "%s: problem type", where)
				}
				if s.bodyHas != "" {
					assert.Contains(t, r.Body, s.bodyHas, "%s: body", where)
				}
				if s.bodyLacks != "" {
					assert.NotContains(t, r.Body, s.bodyLacks, "%s: body", where)
				}
			}
			if row.check != nil {
				row.check(t, got)
			}
		})
	}
}

func inProgressIs409(t *testing.T, newApp func(t *testing.T) *App) {
	a := newApp(t)
	a.Entered, a.Gate = make(chan struct{}), make(chan struct{})
	first := make(chan Resp)
	go func() { first <- Do(t, a, "POST", "/api/orders", "k1", "acme", Order) }()
	<-a.Entered // the first request holds the key and waits

	dup := Do(t, a, "POST", "/api/orders", "k1", "acme", Order)
	assert.Equal(t, http.StatusConflict, dup.Status, "a duplicate in flight")
	assert.Equal(t, "1", dup.Header.Get("Retry-After"), "the duplicate's Retry-After")
	assert.Contains(t, dup.Body, string(core.ProblemInProgress), "the duplicate's problem")
	other := Do(t, a, "POST", "/api/orders", "k1", "acme", OtherOrder)
	assert.Equal(t, http.StatusUnprocessableEntity, other.Status, "another payload in flight")

	close(a.Gate)
	r := <-first
	require.Equal(t, http.StatusCreated, r.Status, "the first request")
	assert.False(t, r.Replayed(), "the first request is the original")
	r = Do(t, a, "POST", "/api/orders", "k1", "acme", Order)
	assert.Equal(t, http.StatusCreated, r.Status, "after completion")
	assert.True(t, r.Replayed(), "after completion: a replay")
	assert.Equal(t, int64(1), a.Runs.Load(), "handler runs")
}

func parallelDuplicatesRunOnce(t *testing.T, newApp func(t *testing.T) *App) {
	a := newApp(t)
	const n = 30
	var wg sync.WaitGroup
	answers := make([]Resp, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			answers[i] = Do(t, a, "POST", "/api/orders", "dup", "acme", Order)
		})
	}
	close(start)
	wg.Wait()
	require.Equal(t, int64(1), a.Runs.Load(), "handler runs for %d parallel duplicates", n)
	originals := 0
	var body string
	for _, r := range answers {
		switch {
		case r.Status == http.StatusCreated && !r.Replayed():
			originals++
			body = r.Body
		case r.Status == http.StatusCreated || r.Status == http.StatusConflict:
		default:
			t.Errorf("unexpected answer %d %s", r.Status, r.Body)
		}
	}
	require.Equal(t, 1, originals, "original answers")
	for _, r := range answers {
		if r.Replayed() {
			assert.Equal(t, body, r.Body, "a replay is byte-identical to the original")
		}
	}
}

// Engine returns core.New(cfg), panicking on an invalid cfg: a test's own bug.
func Engine(cfg core.Config) *core.Engine {
	eng, err := core.New(cfg)
	if err != nil {
		panic(err)
	}
	return eng
}
