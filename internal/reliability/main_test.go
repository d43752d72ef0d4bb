package reliability_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/internal/reliability"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgxstore"
)

func TestMain(m *testing.M) {
	if os.Getenv(sqliteChildEnv) != "" {
		os.Exit(runSQLiteChild()) // the SQLite kill trials' child server, not the tests
	}
	code := m.Run()
	if code == 0 {
		if err := findLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// healthCheck is the goroutine every open pgxpool.Pool keeps.
const healthCheck = "github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"

// findLeaks reports goroutines left behind by the tests. Every pool, server, client and
// proxy the tests open is closed by them; the one exception is the admin pool that testdb
// keeps for the whole run, whose health-check goroutine is ignored, once.
func findLeaks() error {
	// A pgx connection whose query a test's deadline cut is closed by pgx in the
	// background (its reader goroutine ends when the socket does); on a loaded machine
	// that can outlast one Find's own retries (about two seconds), so a leak must stay for
	// five of them (about ten seconds) to count.
	var err error
	for range 5 {
		if err = goleak.Find(goleak.IgnoreTopFunction(healthCheck)); err == nil {
			break
		}
	}
	if err != nil {
		return err
	}
	var n int
	for range 100 {
		if n = countGoroutines(healthCheck); n <= 1 {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%d pgxpool health checks are running: only testdb's admin pool may be left open", n)
}

// countGoroutines counts the goroutines whose stack holds fn.
func countGoroutines(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), fn+"(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// envInt reads a positive integer from the environment, or def.
func envInt(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// db is one test's schema on the test server: the key table, the business table orders
// (deliberately without a unique constraint on the key, so a duplicate shows), and a
// small pool straight to PostgreSQL to look at them.
type db struct {
	t       *testing.T
	schema  string
	connURL string // search_path is the schema
	check   *pgxpool.Pool
}

func newDB(t *testing.T) *db {
	t.Helper()
	connURL, schema := testdb.PostgresSchema(t)
	d := &db{t: t, schema: schema, connURL: connURL}
	d.check = openPool(t, connURL, poolConfig{size: 3})
	if err := pgxstore.New(d.check, pgxstore.WithTable(schema+"."+pgxstore.DefaultTable)).Migrate(context.Background()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	d.exec(`CREATE TABLE orders (
		id       bigserial PRIMARY KEY,
		scope    text NOT NULL,
		idem_key text NOT NULL,
		amount   int  NOT NULL)`)
	return d
}

func (d *db) table(name string) string { return pgx.Identifier{d.schema, name}.Sanitize() }

func (d *db) exec(sql string, args ...any) {
	d.t.Helper()
	sql = strings.NewReplacer("orders", d.table("orders"), "idempotency_keys", d.table(pgxstore.DefaultTable)).Replace(sql)
	if _, err := d.check.Exec(context.Background(), sql, args...); err != nil {
		d.t.Fatalf("%s: %v", sql, err)
	}
}

// count runs a count(*) query; the names orders and idempotency_keys are the test's.
func (d *db) count(sql string, args ...any) int {
	d.t.Helper()
	sql = strings.NewReplacer("orders", d.table("orders"), "idempotency_keys", d.table(pgxstore.DefaultTable)).Replace(sql)
	var n int
	if err := d.check.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		d.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// orders is how many orders key has in scope.
func (d *db) orders(scope, key string) int {
	d.t.Helper()
	return d.count(`SELECT count(*) FROM orders WHERE scope = $1 AND idem_key = $2`, scope, key)
}

// keyRow is a stored key as the table holds it.
type keyRow struct {
	state   string
	code    *int32
	headers []byte
	body    []byte
}

func (d *db) key(scope, key string) (keyRow, bool) {
	d.t.Helper()
	var r keyRow
	err := d.check.QueryRow(context.Background(), fmt.Sprintf(
		`SELECT state, response_code, response_headers, response_body FROM %s WHERE scope = $1 AND idem_key = $2`,
		d.table(pgxstore.DefaultTable)), scope, key).Scan(&r.state, &r.code, &r.headers, &r.body)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, false
	}
	if err != nil {
		d.t.Fatalf("read key %q/%q: %v", scope, key, err)
	}
	return r, true
}

// waitLockWaiters waits until n backends wait for a lock on one of the test's tables.
func (d *db) waitLockWaiters(n int) {
	d.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if d.count(`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND position($1 in query) > 0`, d.schema) >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	d.t.Fatalf("%d backends never came to wait for a lock", n)
}

// poolConfig shapes a pool.
type poolConfig struct {
	size    int32
	port    uint16 // 0: the server itself; else a proxy's port on 127.0.0.1
	tracer  pgx.QueryTracer
	runtime map[string]string // session settings, such as statement_timeout
}

// openPool opens a pool on connURL, checked with a ping unless it goes through a proxy,
// closed at cleanup after checking that no connection is still acquired.
func openPool(t *testing.T, connURL string, pc poolConfig) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(connURL)
	if err != nil {
		t.Fatalf("parse %s: %v", connURL, err)
	}
	cfg.MaxConns = pc.size
	if pc.port != 0 {
		cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = "127.0.0.1", pc.port, nil
	}
	cfg.ConnConfig.Tracer = pc.tracer
	for k, v := range pc.runtime {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil && pc.port == 0 {
		if err = p.Ping(ctx); err != nil {
			p.Close()
		}
	}
	if err != nil {
		t.Fatalf("PostgreSQL at %s is unreachable (%v); start it with: "+
			"pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start", testdb.PostgresURL(), err)
	}
	t.Cleanup(func() {
		// Every request has ended (the servers closed first): nothing may hold a
		// connection. A connection pgx gave up on is counted as acquired until pgx has
		// closed it, which may take its cancel request's 15s against a paused server.
		deadline := time.Now().Add(20 * time.Second)
		for p.Stat().AcquiredConns() != 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := p.Stat().AcquiredConns(); n != 0 {
			t.Errorf("pool still has %d acquired connections after the test", n)
		}
		p.Close()
	})
	return p
}

// instanceConfig shapes one application instance.
type instanceConfig struct {
	iso      pgx.TxIsoLevel // default read committed
	poolSize int32          // default 4
	direct   bool           // no proxy: the pool goes straight to PostgreSQL
	runtime  map[string]string
	// deadline, when positive, gives every request a context deadline (as a server's
	// timeout middleware would), set before the idem middleware.
	deadline time.Duration
	opts     []pgxstore.Option // the store's options, after its table and isolation
	// cfg is the engine's configuration; Store and Scope are set by newInstance.
	cfg core.Config
}

// instance is one application process: a pool (through its own proxy unless direct), a
// pgxstore on the test's key table, a core engine and an HTTP server creating orders.
type instance struct {
	t      *testing.T
	db     *db
	proxy  *reliability.Proxy
	pool   *pgxpool.Pool
	store  *pgxstore.Store
	eng    *core.Engine
	tracer *faultTracer
	*endpoint

	calls atomic.Int64 // handler runs
	hooks atomic.Pointer[hooks]
}

// hooks let a test act at chosen moments of the handler.
type hooks struct {
	// afterClaim runs first in the handler: the claim's transaction is open.
	afterClaim func(r *http.Request)
	// afterWrite runs after the order's INSERT; a non-zero status it returns is the
	// response (the handler writes nothing else).
	afterWrite func(r *http.Request) int
}

func newInstance(t *testing.T, d *db, ic instanceConfig) *instance {
	t.Helper()
	in := &instance{t: t, db: d, tracer: &faultTracer{}}
	if ic.poolSize == 0 {
		ic.poolSize = 4
	}
	if ic.iso == "" {
		ic.iso = pgx.ReadCommitted
	}
	pc := poolConfig{size: ic.poolSize, tracer: in.tracer, runtime: ic.runtime}
	if !ic.direct {
		p, err := reliability.Listen(serverAddr(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		in.proxy = p
		pc.port = p.Port()
	}
	in.pool = openPool(t, d.connURL, pc)
	in.store = pgxstore.New(in.pool, append([]pgxstore.Option{pgxstore.WithTable(d.schema + "." + pgxstore.DefaultTable),
		pgxstore.WithIsolation(ic.iso)}, ic.opts...)...)
	cfg := ic.cfg
	cfg.Store = in.store
	eng, err := core.New(cfg)
	if err != nil {
		t.Fatalf("core.New: %v", err)
	}
	in.eng = eng
	var h http.Handler = eng.Middleware(func(r *http.Request) string { return r.Header.Get("X-Account") })(http.HandlerFunc(in.orders))
	if ic.deadline > 0 {
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), ic.deadline)
			defer cancel()
			inner.ServeHTTP(w, r.WithContext(ctx))
		})
	}
	in.endpoint = newEndpoint(t, h)
	return in
}

// endpoint is an application's HTTP server and a client for it, closed at cleanup.
type endpoint struct {
	srv    *httptest.Server // nil for a server in another process
	url    string
	client *http.Client
}

func newEndpoint(t *testing.T, h http.Handler) *endpoint {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	e := &endpoint{srv: httptest.NewServer(h), client: &http.Client{Transport: tr, Timeout: 60 * time.Second}}
	e.url = e.srv.URL
	t.Cleanup(func() {
		e.srv.Close()
		tr.CloseIdleConnections()
	})
	return e
}

// serverAddr is the host:port of the test server.
func serverAddr(t *testing.T) string {
	t.Helper()
	cfg, err := pgconn.ParseConfig(testdb.PostgresURL())
	if err != nil {
		t.Fatalf("parse %s: %v", testdb.PostgresURL(), err)
	}
	return fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
}

func (in *instance) setHooks(h hooks) { in.hooks.Store(&h) }

// order is the handler's 201 body.
type order struct {
	ID     int64  `json:"id"`
	Scope  string `json:"scope"`
	Key    string `json:"key"`
	Amount int    `json:"amount"`
	Pad    string `json:"pad,omitempty"`
}

// startOrder is the start of every test application's order handler: it counts the run,
// calls the afterClaim hook if h has one, and decodes the body; on a bad body it answers
// 400 and reports false.
func startOrder(w http.ResponseWriter, r *http.Request, calls *atomic.Int64, h *hooks) (req orderRequest, ok bool) {
	calls.Add(1)
	if h != nil && h.afterClaim != nil {
		h.afterClaim(r)
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, "bad body: "+err.Error(), http.StatusBadRequest)
		return req, false
	}
	return req, true
}

// orderRequest is the body of a test application's order.
type orderRequest struct {
	Amount int `json:"amount"`
}

// orders creates an order in the request's transaction. Query parameters shape the
// response: secrets=1 adds credential headers, pad=N pads the body with N bytes.
func (in *instance) orders(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	op := core.MustOperation(ctx)
	h := in.hooks.Load()
	req, ok := startOrder(w, r, &in.calls, h)
	if !ok {
		return
	}
	o := order{Scope: op.Scope(), Key: op.Key(), Amount: req.Amount}
	err := pgxstore.MustTx(ctx).QueryRow(ctx, fmt.Sprintf(`INSERT INTO %s (scope, idem_key, amount) VALUES ($1, $2, $3) RETURNING id`,
		in.db.table("orders")), o.Scope, o.Key, o.Amount).Scan(&o.ID)
	if err != nil {
		dbError(w, err)
		return
	}
	if h != nil && h.afterWrite != nil {
		if status := h.afterWrite(r); status != 0 {
			http.Error(w, "failed on purpose", status)
			return
		}
	}
	q := r.URL.Query()
	if q.Get("secrets") != "" {
		w.Header().Set("Set-Cookie", "session=s3cr3t; HttpOnly")
		w.Header().Set("Authorization", "Bearer s3cr3t")
		w.Header().Set("WWW-Authenticate", `Bearer realm="s3cr3t"`)
		w.Header().Set("Proxy-Authenticate", `Basic realm="s3cr3t"`)
	}
	if n, _ := strconv.Atoi(q.Get("pad")); n > 0 {
		o.Pad = strings.Repeat("p", n)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/orders/%d", o.ID))
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(o)
}

// dbError answers a failed business statement as an application would: 503 for what a
// retry may cure (serialization failure, deadlock, a timeout), 500 otherwise. Neither is
// stored, so the key is released.
func dbError(w http.ResponseWriter, err error) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "40001", "40P01", "55P03", "57014":
			w.Header().Set("Retry-After", "1")
			http.Error(w, "try again: "+pgErr.Code, http.StatusServiceUnavailable)
			return
		}
	}
	http.Error(w, "database error: "+err.Error(), http.StatusInternalServerError)
}

// reply is what a client got.
type reply struct {
	status int
	header http.Header
	body   []byte
	err    error // transport error (no response)
}

func (r reply) replayed() bool { return r.header.Get("Idempotent-Replayed") == "true" }

func (r reply) problemType() string {
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(r.body, &p)
	return p.Type
}

func (r reply) order(t *testing.T) order {
	t.Helper()
	var o order
	if err := json.Unmarshal(r.body, &o); err != nil || o.ID == 0 {
		t.Fatalf("status %d body %q is not an order: %v", r.status, r.body, err)
	}
	return o
}

func (r reply) String() string {
	if r.err != nil {
		return "transport error: " + r.err.Error()
	}
	b := r.body
	if len(b) > 200 {
		b = append(b[:200:200], "…"...)
	}
	return fmt.Sprintf("%d %s", r.status, b)
}

// post sends POST /orders?query with the key (omitted when empty) and scope.
func (in *endpoint) post(scope, key, query, body string) reply {
	return in.send(http.MethodPost, "/orders?"+query, scope, key, body)
}

func (in *endpoint) send(method, target, scope, key, body string) reply {
	return in.sendHeader(method, target, scope, key, body, nil)
}

// sendHeader is send with extra request headers.
func (in *endpoint) sendHeader(method, target, scope, key, body string, h http.Header) reply {
	req, err := http.NewRequest(method, in.url+target, strings.NewReader(body))
	if err != nil {
		return reply{err: err}
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Account", scope)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	return in.do(req)
}

func (in *endpoint) do(req *http.Request) reply {
	resp, err := in.client.Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: b, err: err}
}

// retryUntilDone sends the request again until it is neither a 409 nor a 5xx (at most
// attempts times), and returns every reply.
func (in *endpoint) retryUntilDone(scope, key, query, body string, attempts int) []reply {
	var out []reply
	for range attempts {
		r := in.post(scope, key, query, body)
		out = append(out, r)
		if r.err == nil && r.status != http.StatusConflict && r.status < 500 {
			return out
		}
		time.Sleep(10 * time.Millisecond)
	}
	return out
}

// mustProblem checks that r is the problem typ with status, and Retry-After when retry.
func mustProblem(t *testing.T, r reply, status int, kind core.ProblemKind, retry bool) {
	t.Helper()
	typ := core.DefaultProblemBase + string(kind)
	if r.err != nil || r.status != status || r.problemType() != typ {
		t.Fatalf("got %v, want %d %s", r, status, typ)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("problem with Content-Type %q", ct)
	}
	if got := r.header.Get("Retry-After") != ""; got != retry {
		t.Fatalf("%d %s: Retry-After %q, want one: %v", status, typ, r.header.Get("Retry-After"), retry)
	}
}

// faultTracer lets a test act when the store sends a given batch for a given key: the
// claim or the completion (in either form of the atomic claim, see batchKind), before it
// is sent or after its results are read. It also keeps, per key, the store statements
// sent for it (see steps), so a trial can check which form of the claim it cut.
type faultTracer struct {
	mu   sync.Mutex
	plan *plan
	sent map[string][]step
}

// batchKind names the store's batches, as moments of a request.
type batchKind int

const (
	// claimBatch is the atomic claim's first round trip: BEGIN + INSERT … ON CONFLICT DO
	// NOTHING of the started row (row first), or BEGIN + the key's advisory lock + its
	// lookup (single write; without BEGIN when the store begins on its own).
	claimBatch batchKind = iota + 1
	// completeBatch is the completion: UPDATE … state = 'completed' + COMMIT (row first),
	// or the INSERT of the completed row + COMMIT (single write).
	completeBatch
)

// plan is one action at one point: before (start) or after (end, only when the batch
// succeeded) the batch of kind for key.
type plan struct {
	key  string
	kind batchKind
	end  bool
	act  func()
	done chan struct{} // closed once act has run
}

func (ft *faultTracer) arm(key string, kind batchKind, end bool, act func()) *plan {
	p := &plan{key: key, kind: kind, end: end, act: act, done: make(chan struct{})}
	ft.mu.Lock()
	ft.plan = p
	ft.mu.Unlock()
	return p
}

func (ft *faultTracer) disarm() {
	ft.mu.Lock()
	ft.plan = nil
	ft.mu.Unlock()
}

// take returns the plan for a batch of kind for key (at its end or not), once.
func (ft *faultTracer) take(kind batchKind, key string, end bool) *plan {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	p := ft.plan
	if p == nil || p.kind != kind || p.key != key || p.end != end {
		return nil
	}
	ft.plan = nil
	return p
}

// note records that the store sent a statement of step s for key.
func (ft *faultTracer) note(key string, s step) {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if ft.sent == nil {
		ft.sent = make(map[string][]step)
	}
	ft.sent[key] = append(ft.sent[key], s)
}

// steps returns the store statements sent for key so far, and forgets them.
func (ft *faultTracer) steps(key string) []step {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	s := ft.sent[key]
	delete(ft.sent, key)
	return s
}

func (p *plan) run() {
	p.act()
	close(p.done)
}

// fired reports whether the plan's action has run.
func (p *plan) fired() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kindOf names a pgxstore batch: its moment, the key it is for, and the step (the form of
// the claim or completion) it is.
func kindOf(b *pgx.Batch) (batchKind, string, step) {
	if b == nil || len(b.QueuedQueries) < 2 {
		return 0, "", 0
	}
	q := b.QueuedQueries
	if strings.HasPrefix(strings.ToLower(q[0].SQL), "begin") {
		q = q[1:]
	}
	first, last := q[0], b.QueuedQueries[len(b.QueuedQueries)-1]
	arg := func(qq *pgx.QueuedQuery, i int) string {
		if len(qq.Arguments) <= i {
			return ""
		}
		k, _ := qq.Arguments[i].(string)
		return k
	}
	switch {
	case len(q) == 1 && len(b.QueuedQueries) == 2 && strings.HasPrefix(first.SQL, "INSERT INTO") && strings.Contains(first.SQL, "ON CONFLICT"):
		return claimBatch, arg(first, 1), claimRowFirst
	case len(q) == 2 && strings.Contains(first.SQL, "pg_try_advisory_xact_lock") && strings.HasPrefix(q[1].SQL, "SELECT false"):
		return claimBatch, arg(first, 3), claimLocked
	case len(b.QueuedQueries) == 2 && strings.EqualFold(last.SQL, "commit") && strings.HasPrefix(first.SQL, "UPDATE") && strings.Contains(first.SQL, "state = 'completed'"):
		return completeBatch, arg(first, 1), completeUpdate
	case len(b.QueuedQueries) == 2 && strings.EqualFold(last.SQL, "commit") && strings.HasPrefix(first.SQL, "INSERT INTO") && strings.Contains(first.SQL, "'completed'"):
		return completeBatch, arg(first, 1), completeInsert
	}
	return 0, "", 0
}

type batchCtxKey struct{}

func (ft *faultTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (ft *faultTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (ft *faultTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	kind, key, st := kindOf(data.Batch)
	if kind == 0 {
		return ctx
	}
	ft.note(key, st)
	if p := ft.take(kind, key, false); p != nil {
		p.run()
	}
	return context.WithValue(ctx, batchCtxKey{}, [2]any{kind, key})
}

func (ft *faultTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (ft *faultTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	v, ok := ctx.Value(batchCtxKey{}).([2]any)
	if !ok || data.Err != nil {
		return
	}
	if p := ft.take(v[0].(batchKind), v[1].(string), true); p != nil {
		p.run()
	}
}

var (
	_ pgx.QueryTracer = (*faultTracer)(nil)
	_ pgx.BatchTracer = (*faultTracer)(nil)
)

// jsonBody is an order request body.
func jsonBody(amount int) string { return fmt.Sprintf(`{"amount":%d}`, amount) }

// sameBody reports whether two replies carry the same body.
func sameBody(a, b reply) bool { return bytes.Equal(a.body, b.body) }
