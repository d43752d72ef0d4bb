package reliability_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/pgxstore"
)

// gate holds the handler of one key after its business write until opened.
type gate struct {
	key     string
	entered chan struct{}
	open    chan struct{}
	once    sync.Once
}

func newGate(key string) *gate {
	return &gate{key: key, entered: make(chan struct{}), open: make(chan struct{})}
}

// hold is an afterWrite hook: the first request for the gate's key waits there.
func (g *gate) hold(r *http.Request) int {
	if core.MustOperation(r.Context()).Key() != g.key {
		return 0
	}
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.entered)
		<-g.open
	}
	return 0
}

// hookedApp is an application whose handler takes hooks: an instance or a gormApp.
type hookedApp interface {
	setHooks(hooks)
	post(scope, key, query, body string) reply
}

// holder sends the first request for g's key and waits until its handler holds the key;
// the reply arrives on the returned channel once the gate opens.
func holder(t *testing.T, in hookedApp, g *gate, scope, body string) <-chan reply {
	t.Helper()
	in.setHooks(hooks{afterWrite: g.hold})
	out := make(chan reply, 1)
	go func() { out <- in.post(scope, g.key, "", body) }()
	select {
	case <-g.entered:
	case r := <-out:
		t.Fatalf("the first request returned before holding its key: %v", r)
	case <-time.After(10 * time.Second):
		t.Fatal("the first request never reached its handler")
	}
	return out
}

// TestLockTimeoutAnswers409: a twin of a request in flight waits for the key at most the
// lock wait (lock_timeout, 55P03) and gets 409 + Retry-After, whatever its body; once the
// first commits, the twin's retry replays it.
func TestLockTimeoutAnswers409(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceConfig{direct: true, cfg: core.Config{LockWait: 300 * time.Millisecond}})
	g := newGate("lock-1")
	first := holder(t, in, g, "acct", jsonBody(1))

	mustProblem(t, in.post("acct", g.key, "", jsonBody(1)), http.StatusConflict, core.ProblemInProgress, true)
	mustProblem(t, in.post("acct", g.key, "", jsonBody(2)), http.StatusConflict, core.ProblemInProgress, true)

	close(g.open)
	r := <-first
	if r.status != http.StatusCreated {
		t.Fatalf("first: %v", r)
	}
	again := in.post("acct", g.key, "", jsonBody(1))
	if again.status != http.StatusCreated || !again.replayed() || !sameBody(again, r) {
		t.Fatalf("retry after the first committed: %v, want its replay", again)
	}
	if n := d.orders("acct", g.key); n != 1 || in.calls.Load() != 1 {
		t.Fatalf("%d orders, %d handler runs; want 1 and 1", n, in.calls.Load())
	}
}

// TestLockTimeoutInHandler: the claim's lock wait is the transaction's lock_timeout, so a
// handler waiting for a business row lock held by another request gets 55P03 after it;
// the application answers 503, nothing is recorded, and the retry succeeds.
func TestLockTimeoutInHandler(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	d.exec(`CREATE TABLE stock (id int PRIMARY KEY, n int NOT NULL); INSERT INTO stock VALUES (1, 10)`)
	in := newInstance(t, d, instanceConfig{direct: true, cfg: core.Config{LockWait: 300 * time.Millisecond}})
	g := newGate("takes-stock")
	in.setHooks(hooks{afterWrite: func(r *http.Request) int {
		ctx := r.Context()
		if _, err := pgxstore.MustTx(ctx).Exec(ctx, fmt.Sprintf(`UPDATE %s SET n = n - 1 WHERE id = 1`, d.table("stock"))); err != nil {
			return dbStatus(err)
		}
		return g.hold(r)
	}})
	first := make(chan reply, 1)
	go func() { first <- in.post("acct", g.key, "", jsonBody(1)) }()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request never took the stock row")
	}

	blocked := in.post("acct", "wants-stock", "", jsonBody(2))
	if blocked.status != http.StatusServiceUnavailable {
		t.Fatalf("request waiting for the stock row: %v, want the application's 503", blocked)
	}
	if _, ok := d.key("acct", "wants-stock"); ok {
		t.Fatal("the 503 was recorded")
	}
	close(g.open)
	if r := <-first; r.status != http.StatusCreated {
		t.Fatalf("first: %v", r)
	}
	if r := in.post("acct", "wants-stock", "", jsonBody(2)); r.status != http.StatusCreated || r.replayed() {
		t.Fatalf("retry: %v", r)
	}
	if n := d.count(`SELECT n FROM stock WHERE id = 1`); n != 8 {
		t.Fatalf("stock %d, want 8", n)
	}
	if n := d.count(`SELECT count(*) FROM orders`); n != 2 {
		t.Fatalf("%d orders, want 2", n)
	}
}

// dbStatus is dbError's status.
func dbStatus(err error) int {
	w := &statusRecorder{}
	dbError(w, err)
	return w.status
}

type statusRecorder struct {
	status int
	h      http.Header
}

func (s *statusRecorder) Header() http.Header {
	if s.h == nil {
		s.h = http.Header{}
	}
	return s.h
}
func (s *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (s *statusRecorder) WriteHeader(code int)        { s.status = code }

// TestStatementTimeoutAnswers409: with a statement_timeout shorter than the lock wait, a
// twin's claim is cancelled by it (57014), which means 409 as lock_timeout does (pgxstore's
// doc, "Portability"); a business statement cut by it is the application's 503, not recorded,
// and its retry succeeds.
func TestStatementTimeoutAnswers409(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceConfig{direct: true, runtime: map[string]string{"statement_timeout": "500"},
		cfg: core.Config{LockWait: 30 * time.Second}})
	g := newGate("stmt-1")
	first := holder(t, in, g, "acct", jsonBody(1))
	mustProblem(t, in.post("acct", g.key, "", jsonBody(1)), http.StatusConflict, core.ProblemInProgress, true)
	close(g.open)
	if r := <-first; r.status != http.StatusCreated {
		t.Fatalf("first: %v", r)
	}

	in.setHooks(hooks{afterWrite: func(r *http.Request) int {
		if r.URL.Query().Get("slow") == "" {
			return 0
		}
		ctx := r.Context()
		_, err := pgxstore.MustTx(ctx).Exec(ctx, `SELECT pg_sleep(5)`)
		return dbStatus(err)
	}})
	slow := in.post("acct", "stmt-2", "slow=1", jsonBody(2))
	if slow.status != http.StatusServiceUnavailable {
		t.Fatalf("statement cut by statement_timeout: %v, want 503", slow)
	}
	if _, ok := d.key("acct", "stmt-2"); ok || d.orders("acct", "stmt-2") != 0 {
		t.Fatal("a timed-out request left its key or its order")
	}
	if r := in.post("acct", "stmt-3", "", jsonBody(3)); r.status != http.StatusCreated {
		t.Fatalf("next request: %v", r)
	}
}

// TestRepeatableReadTwins: at REPEATABLE READ (the default of distributed PostgreSQL-like
// databases) twins waiting for a key get a serialization failure when the first commits;
// each twin must end with the first's replay or a 409/503, and the order exists once.
func TestRepeatableReadTwins(t *testing.T) {
	t.Parallel()
	const twins = 6
	d := newDB(t)
	in := newInstance(t, d, instanceConfig{direct: true, iso: pgx.RepeatableRead, poolSize: twins + 2,
		cfg: core.Config{LockWait: 10 * time.Second}})
	g := newGate("rr-1")
	first := holder(t, in, g, "acct", jsonBody(1))
	replies := make(chan reply, twins)
	for range twins {
		go func() { replies <- in.post("acct", g.key, "", jsonBody(1)) }()
	}
	d.waitLockWaiters(twins)
	close(g.open)
	r := <-first
	if r.status != http.StatusCreated {
		t.Fatalf("first: %v", r)
	}
	seen := map[int]int{}
	for range twins {
		tw := <-replies
		seen[tw.status]++
		switch tw.status {
		case http.StatusCreated:
			if !tw.replayed() || !sameBody(tw, r) {
				t.Errorf("twin got a 201 that is not the first's replay: %v", tw)
			}
		case http.StatusConflict, http.StatusServiceUnavailable:
			if tw.header.Get("Retry-After") == "" {
				t.Errorf("twin's %d has no Retry-After", tw.status)
			}
		default:
			t.Errorf("twin: %v", tw)
		}
	}
	t.Logf("twins' answers by status: %v", seen)
	if n := d.orders("acct", g.key); n != 1 || in.calls.Load() != 1 {
		t.Fatalf("%d orders, %d handler runs; want 1 and 1", n, in.calls.Load())
	}
}

// TestSerializableWriteSkewAnswers503: at SERIALIZABLE, two requests with different keys
// that each read what the other writes cannot both commit; the loser gets 503 +
// Retry-After (from the store's failed commit, or from the application when PostgreSQL
// detects the conflict at the write), nothing of it is kept, and its retry succeeds.
func TestSerializableWriteSkewAnswers503(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	aDone := make(chan struct{}) // skew-a's request is over: committed, or failed
	var aOnce sync.Once
	seeA := core.HookFunc(func(_ context.Context, ev core.Event) {
		if ev.Key == "skew-a" && ev.Outcome.Final() {
			aOnce.Do(func() { close(aDone) })
		}
	})
	in := newInstance(t, d, instanceConfig{direct: true, iso: pgx.Serializable, cfg: core.Config{LockWait: 10 * time.Second, Hooks: seeA}})
	var read sync.WaitGroup
	read.Add(2)
	written := make(chan struct{})
	var writes sync.WaitGroup
	writes.Add(2)
	go func() { writes.Wait(); close(written) }()
	in.setHooks(hooks{
		// Each reads the orders before writing its own, and waits for the other's read.
		afterClaim: func(r *http.Request) {
			ctx := r.Context()
			var n int
			_ = pgxstore.MustTx(ctx).QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s`, d.table("orders"))).Scan(&n)
			read.Done()
			read.Wait()
		},
		// Both have written before either commits; the first key commits first.
		afterWrite: func(r *http.Request) int {
			writes.Done()
			<-written
			if core.MustOperation(r.Context()).Key() == "skew-b" {
				select {
				case <-aDone:
				case <-time.After(10 * time.Second):
					t.Error("skew-a never finished while skew-b waited for it")
				}
			}
			return 0
		},
	})
	a, b := make(chan reply, 1), make(chan reply, 1)
	go func() { a <- in.post("acct", "skew-a", "", jsonBody(1)) }()
	go func() { b <- in.post("acct", "skew-b", "", jsonBody(2)) }()
	ra, rb := <-a, <-b
	loser, loserKey := rb, "skew-b"
	if ra.status != http.StatusCreated {
		loser, loserKey = ra, "skew-a"
		if rb.status != http.StatusCreated {
			t.Fatalf("both lost: %v / %v", ra, rb)
		}
	}
	if loser.status != http.StatusServiceUnavailable || loser.header.Get("Retry-After") == "" {
		t.Fatalf("loser %s: %v, want 503 + Retry-After", loserKey, loser)
	}
	t.Logf("loser %s answered: %v", loserKey, loser)
	if _, ok := d.key("acct", loserKey); ok || d.orders("acct", loserKey) != 0 {
		t.Fatal("the loser left its key or its order")
	}
	in.setHooks(hooks{})
	if r := in.post("acct", loserKey, "", jsonBody(3)); r.status != http.StatusCreated || r.replayed() {
		t.Fatalf("loser's retry: %v", r)
	}
	if n := d.count(`SELECT count(*) FROM orders`); n != 2 {
		t.Fatalf("%d orders, want 2", n)
	}
}

// TestPausedDatabaseWithDeadline: PostgreSQL stops answering (the proxy stalls every
// connection) while requests carry a deadline, as behind a server timeout: the claim
// gives up at the deadline with 503 + Retry-After, the handler never runs, and the service
// recovers when the database does.
func TestPausedDatabaseWithDeadline(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceConfig{deadline: time.Second})
	if r := in.post("acct", "before", "", jsonBody(1)); r.status != http.StatusCreated {
		t.Fatalf("before the pause: %v", r)
	}
	in.proxy.Stall()
	var wg sync.WaitGroup
	replies := make([]reply, 6)
	for i := range replies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i] = in.post("acct", fmt.Sprintf("paused-%d", i), "", jsonBody(i))
		}()
	}
	wg.Wait()
	for _, r := range replies {
		mustProblem(t, r, http.StatusServiceUnavailable, core.ProblemStoreUnavailable, true)
	}
	if in.calls.Load() != 1 {
		t.Fatalf("the handler ran %d times; only the request before the pause may have run it", in.calls.Load())
	}
	in.proxy.Resume()
	for i := range replies {
		key := fmt.Sprintf("paused-%d", i)
		rs := in.retryUntilDone("acct", key, "", jsonBody(i), 30)
		if last := rs[len(rs)-1]; last.status != http.StatusCreated {
			t.Fatalf("%s after the database came back: %v", key, rs)
		}
		if n := d.orders("acct", key); n != 1 {
			t.Fatalf("%s: %d orders", key, n)
		}
	}
}

// TestPausedDatabaseDuringHandler: the database stops answering while the handler writes;
// the handler's statement gives up at the request's deadline, the engine rolls back and
// answers 503 + Retry-After, and the retry after the database returns creates the order once.
func TestPausedDatabaseDuringHandler(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceConfig{deadline: time.Second})
	in.setHooks(hooks{afterClaim: func(r *http.Request) {
		if core.MustOperation(r.Context()).Key() == "paused-in-handler" {
			in.proxy.Stall()
		}
	}})
	r := in.post("acct", "paused-in-handler", "", jsonBody(1))
	mustProblem(t, r, http.StatusServiceUnavailable, core.ProblemNotRecorded, true)
	in.setHooks(hooks{})
	in.proxy.Resume()
	rs := in.retryUntilDone("acct", "paused-in-handler", "", jsonBody(1), 30)
	if last := rs[len(rs)-1]; last.status != http.StatusCreated || last.replayed() {
		t.Fatalf("after the database came back: %v", rs)
	}
	if n := d.orders("acct", "paused-in-handler"); n != 1 {
		t.Fatalf("%d orders, want 1", n)
	}
}

// unbounded is how long a test waits before calling an answer unbounded: far beyond the
// lock wait (2s) plus any sane network margin.
const unbounded = 30 * time.Second

// TestPausedDatabaseDuringCommit: the database stops answering just as the store sends the
// completion and COMMIT. The engine records the outcome detached from the request's
// cancellation, but StoreTimeout still bounds it: 503 + Retry-After (the commit's outcome
// is unknown to the client; the retry replays or re-runs it), and one order after the
// retry. (Before the fix, the request hung for as long as the database was paused.)
func TestPausedDatabaseDuringCommit(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceConfig{deadline: time.Second})
	in.tracer.arm("stall-commit", completeBatch, false, in.proxy.Stall)
	ch := make(chan reply, 1)
	go func() { ch <- in.post("acct", "stall-commit", "", jsonBody(1)) }()
	r, ok := waitReply(ch, unbounded)
	in.proxy.Resume()
	if !ok {
		t.Errorf("no answer after %v while the database was paused during COMMIT: unbounded (then: %v)", unbounded, <-ch)
	} else {
		mustProblem(t, r, http.StatusServiceUnavailable, core.ProblemNotRecorded, true)
	}
	rs := in.retryUntilDone("acct", "stall-commit", "", jsonBody(1), 30)
	if last := rs[len(rs)-1]; last.status != http.StatusCreated {
		t.Fatalf("after the database came back: %v", rs)
	}
	if n := d.orders("acct", "stall-commit"); n != 1 {
		t.Fatalf("%d orders, want 1", n)
	}
}

// TestPausedDatabaseWithoutDeadline: the database stops answering and the request has no
// deadline of its own (net/http gives none by default). lock_timeout cannot help (the
// server never sees the statement); the claim is bounded by LockWait + StoreTimeout and
// answers 503 + Retry-After, the handler not run. (Before the fix, it waited for ever and
// the goroutines piled up.)
func TestPausedDatabaseWithoutDeadline(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceConfig{})
	if r := in.post("acct", "before", "", jsonBody(1)); r.status != http.StatusCreated {
		t.Fatalf("before the pause: %v", r)
	}
	in.proxy.Stall()
	ch := make(chan reply, 1)
	go func() { ch <- in.post("acct", "paused", "", jsonBody(2)) }()
	r, ok := waitReply(ch, unbounded)
	in.proxy.Resume()
	if !ok {
		t.Fatalf("no answer after %v while the database was paused: the claim is unbounded (then: %v)", unbounded, <-ch)
	}
	mustProblem(t, r, http.StatusServiceUnavailable, core.ProblemStoreUnavailable, true)
	if in.calls.Load() != 1 {
		t.Fatalf("the handler ran %d times, want 1 (before the pause)", in.calls.Load())
	}
}

// waitReply waits up to d for a reply; ok is false when none came.
func waitReply(ch <-chan reply, d time.Duration) (reply, bool) {
	select {
	case r := <-ch:
		return r, true
	case <-time.After(d):
		return reply{}, false
	}
}
