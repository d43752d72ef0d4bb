package reliability_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/gormstore"
)

// InnoDB specifics, through gormstore and the engine over HTTP, on the MariaDB server.

// claimsWaiting counts the sessions of the test's database running the store's claim
// statement (an INSERT into the key table): while another transaction holds the key's row,
// each of them waits for its lock. (MariaDB's INNODB_TRX does not reliably list a
// transaction waiting for its first lock; PROCESSLIST shows the statement.)
func (d *gormDB) claimsWaiting() int {
	d.t.Helper()
	return d.count("SELECT count(*) FROM information_schema.PROCESSLIST WHERE db = DATABASE() AND command = 'Execute' " +
		"AND info LIKE 'INSERT INTO `idempotency_keys`%'")
}

// TestMariaDBLockWaitTimeoutAnswers409: a twin of a request in flight waits for the key
// at most the lock wait (innodb_lock_wait_timeout, whole seconds; 1205 when it runs out)
// and gets 409 + Retry-After; once the first commits, the twin's retry replays it.
func TestMariaDBLockWaitTimeoutAnswers409(t *testing.T) {
	t.Parallel()
	d := newGormDB(t, onMariaDB)
	a := newGormApp(t, d, gormAppConfig{direct: true, cfg: core.Config{LockWait: time.Second}})
	g := newGate("lock-1")
	first := holder(t, a, g, "acct", jsonBody(1))

	began := time.Now()
	mustProblem(t, a.post("acct", g.key, "", jsonBody(1)), http.StatusConflict, core.ProblemInProgress, true)
	t.Logf("the twin waited %v for the key (LockWait 1s)", time.Since(began).Round(time.Millisecond))
	mustProblem(t, a.post("acct", g.key, "", jsonBody(2)), http.StatusConflict, core.ProblemInProgress, true)

	close(g.open)
	r := <-first
	require.Equal(t, http.StatusCreated, r.status, "first: %v", r)
	again := a.post("acct", g.key, "", jsonBody(1))
	assert.True(t, again.status == http.StatusCreated && again.replayed() && sameBody(again, r), "retry after the first committed: %v", again)
	assert.Equal(t, 1, d.orders("acct", g.key))
	assert.EqualValues(t, 1, a.calls.Load(), "handler runs")
}

// TestMariaDBDeadlockAnswers503ThenRetrySucceeds: two keyed requests update two business
// tables in opposite orders, a real deadlock. InnoDB rolls the victim's whole transaction
// back (1213): its claim goes with it, the application answers 503 + Retry-After, nothing
// of it is recorded; the other request commits. The victim's retry with the same key runs
// once, and every table counts each request once.
func TestMariaDBDeadlockAnswers503ThenRetrySucceeds(t *testing.T) {
	t.Parallel()
	d := newGormDB(t, onMariaDB)
	cs := newCrossedStock(t, d)
	a := newGormApp(t, d, gormAppConfig{direct: true, poolSize: 4, cfg: core.Config{LockWait: 5 * time.Second}})
	take := func(ctx context.Context, tx *gorm.DB, r *http.Request) error {
		key := core.MustOperation(ctx).Key()
		if err := cs.first(tx, key); err != nil {
			return err
		}
		return cs.second(tx, key)
	}
	a.business.Store(&take)

	got := cs.post(a)
	var victim string
	for key, r := range got {
		switch r.status {
		case http.StatusCreated:
		case http.StatusServiceUnavailable:
			require.Empty(t, victim, "both requests failed: %v", got)
			victim = key
			assert.NotEmpty(t, r.header.Get("Retry-After"), "the victim's 503 has no Retry-After")
			assert.Contains(t, string(r.body), "1213", "the victim's 503 is not the deadlock's")
		default:
			t.Fatalf("%s: %v", key, r)
		}
	}
	require.NotEmpty(t, victim, "no deadlock: %v", got)
	_, kept := d.keyState("acct", victim)
	assert.False(t, kept, "the deadlock's victim left its key")
	assert.Zero(t, d.orders("acct", victim), "the deadlock's victim left its order")

	rs := a.retryUntilDone("acct", victim, "", jsonBody(1), 30)
	last := rs[len(rs)-1]
	require.True(t, last.status == http.StatusCreated && !last.replayed(), "the victim's retry: %v", rs)
	for key := range got {
		assert.Equal(t, 1, d.orders("acct", key), key)
	}
	assert.Equal(t, 98, d.count("SELECT n FROM stock_a"))
	assert.Equal(t, 98, d.count("SELECT n FROM stock_b"))
	assert.EqualValues(t, 3, a.calls.Load(), "handler runs: two, then the victim's retry")
}

// TestMariaDBPausedServerAnswers503: MariaDB stops answering (the proxy stalls every
// connection; the shared server itself is not ours to stop). Requests carry a deadline,
// as behind a server's timeout: a claim answers 503 + Retry-After by it, the handler not
// run. A request without a deadline paused after its business write answers 503 not
// recorded within StoreTimeout. Once the server answers again, both keys run once. (Without a request
// deadline StoreTimeout bounds the claim: TestGormPausedDatabaseClaimIsBounded.)
func TestMariaDBPausedServerAnswers503(t *testing.T) {
	t.Parallel()
	d := newGormDB(t, onMariaDB)
	a := newGormApp(t, d, gormAppConfig{deadline: 3 * time.Second, cfg: core.Config{LockWait: time.Second, StoreTimeout: 2 * time.Second}})
	require.Equal(t, http.StatusCreated, a.post("acct", "before", "", jsonBody(1)).status)

	a.proxy.Stall()
	ch := make(chan reply, 1)
	began := time.Now()
	go func() { ch <- a.post("acct", "paused-claim", "", jsonBody(2)) }()
	r, ok := waitReply(ch, unbounded)
	took := time.Since(began)
	a.proxy.Resume()
	if !ok {
		t.Fatalf("no answer after %v while MariaDB was paused: the claim is unbounded (then: %v)", unbounded, <-ch)
	}
	mustProblem(t, r, http.StatusServiceUnavailable, core.ProblemStoreUnavailable, true)
	assert.EqualValues(t, 1, a.calls.Load(), "the handler ran while the store was paused")
	t.Logf("paused claim answered in %v (request deadline 3s)", took.Round(time.Millisecond))

	// The completion is bounded by StoreTimeout even without a request deadline.
	b := newGormApp(t, d, gormAppConfig{cfg: core.Config{LockWait: time.Second, StoreTimeout: 2 * time.Second}})
	b.setHooks(hooks{afterWrite: func(r *http.Request) int {
		if core.MustOperation(r.Context()).Key() == "paused-commit" {
			b.proxy.Stall()
		}
		return 0
	}})
	began = time.Now()
	go func() { ch <- b.post("acct", "paused-commit", "", jsonBody(3)) }()
	r, ok = waitReply(ch, unbounded)
	took = time.Since(began)
	b.setHooks(hooks{})
	b.proxy.Resume()
	if !ok {
		t.Fatalf("no answer after %v while MariaDB was paused before COMMIT (then: %v)", unbounded, <-ch)
	}
	mustProblem(t, r, http.StatusServiceUnavailable, core.ProblemNotRecorded, true)
	t.Logf("request paused before its completion answered in %v (StoreTimeout 2s bounds the completion, and the release after it, each)", took.Round(time.Millisecond))

	for i, key := range []string{"paused-claim", "paused-commit"} {
		rs := a.retryUntilDone("acct", key, "", jsonBody(2+i), 30)
		require.Equal(t, http.StatusCreated, rs[len(rs)-1].status, "%s after MariaDB came back: %v", key, rs)
		assert.Equal(t, 1, d.orders("acct", key), key)
	}
}

// TestMariaDBRepeatableReadTwins: at REPEATABLE READ (InnoDB's default) twins sent in
// parallel wait for the first on the key's row; when it commits each ends with its replay,
// or a 409/503 whose retry replays it. The handler runs once, the order exists once.
func TestMariaDBRepeatableReadTwins(t *testing.T) {
	t.Parallel()
	const twins = 6
	d := newGormDB(t, onMariaDB)
	require.Equal(t, "REPEATABLE-READ", d.isolation(), "the server's default isolation")
	a := newGormApp(t, d, gormAppConfig{direct: true, poolSize: twins + 2, cfg: core.Config{LockWait: 10 * time.Second}})
	g := newGate("rr-1")
	first := holder(t, a, g, "acct", jsonBody(1))
	var opened sync.Once
	open := func() { opened.Do(func() { close(g.open) }) }
	t.Cleanup(open) // before the server closes, whatever failed
	replies := make(chan reply, twins)
	var answered atomic.Int64
	for range twins {
		go func() {
			r := a.post("acct", g.key, "", jsonBody(1))
			answered.Add(1)
			replies <- r
		}()
	}
	// Every twin waits for the first's row lock, or has already answered (a 409 or a 503:
	// waiters on one row can deadlock each other, and the store gives up after retrying).
	deadline := time.Now().Add(20 * time.Second)
	for d.claimsWaiting()+int(answered.Load()) < twins {
		require.True(t, time.Now().Before(deadline), "the twins neither waited for the key nor answered: %d waiting, %d answered",
			d.claimsWaiting(), answered.Load())
		time.Sleep(5 * time.Millisecond) // polling the server's process list
	}
	open()
	r := <-first
	require.Equal(t, http.StatusCreated, r.status, "first: %v", r)
	seen := map[int]int{}
	for range twins {
		tw := <-replies
		seen[tw.status]++
		switch tw.status {
		case http.StatusCreated:
			assert.True(t, tw.replayed() && sameBody(tw, r), "twin got a 201 that is not the first's replay: %v", tw)
		case http.StatusConflict, http.StatusServiceUnavailable:
			assert.NotEmpty(t, tw.header.Get("Retry-After"), "twin's %d has no Retry-After", tw.status)
			rs := a.retryUntilDone("acct", g.key, "", jsonBody(1), 30)
			last := rs[len(rs)-1]
			assert.True(t, last.replayed() && sameBody(last, r), "twin's retry: %v", rs)
		default:
			t.Errorf("twin: %v", tw)
		}
	}
	t.Logf("twins' answers by status: %v", seen)
	assert.Equal(t, 1, d.orders("acct", g.key))
	assert.EqualValues(t, 1, a.calls.Load(), "handler runs")
}

// TestMariaDBConcurrentNewKeys: at REPEATABLE READ concurrent claims of new keys take gap
// locks and may deadlock each other; the store retries such a claim (nothing of the
// request ran), and answers 503 + Retry-After if it keeps losing. Whatever each request
// got, its retries end in one 201 and one order per key.
func TestMariaDBConcurrentNewKeys(t *testing.T) {
	t.Parallel()
	const clients, perClient = 8, 20
	d := newGormDB(t, onMariaDB)
	a := newGormApp(t, d, gormAppConfig{direct: true, poolSize: clients, cfg: core.Config{LockWait: 5 * time.Second}})
	var mu sync.Mutex
	seen := map[int]int{}
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perClient {
				key := fmt.Sprintf("k-%03d", i*clients+c) // interleaved: neighbours in the index at once
				rs := a.retryUntilDone("acct", key, "", jsonBody(i), 30)
				mu.Lock()
				for _, r := range rs {
					seen[r.status]++
				}
				mu.Unlock()
				if last := rs[len(rs)-1]; last.status != http.StatusCreated {
					t.Errorf("%s: %v", key, rs)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("answers by status: %v", seen)
	assert.Equal(t, clients*perClient, d.count(`SELECT count(*) FROM orders`))
	assert.Zero(t, d.count(`SELECT count(*) FROM (SELECT scope, idem_key FROM orders GROUP BY scope, idem_key HAVING count(*) > 1) dup`))
}

// TestMariaDBHandlerRetryAfterDeadlockKeepsNothing: a handler that catches a deadlock
// and carries on in the same request (retrying its statements, as some code does) must
// not write outside the key's transaction: what it writes after the deadlock must roll
// back with it, and the client's retry must leave exactly one order for the key.
//
// InnoDB answers a deadlock (1213) by rolling the whole transaction back, claim
// included, and the session goes on in autocommit (issue 19): gormstore then refuses
// every statement the handler sends next through gormstore.MustDB(ctx), with an error
// wrapping gormstore.ErrRolledBack and the deadlock, so nothing commits on its own. A
// handler that reports the refused statement's error answers as it answers a deadlock
// (here 503); one that swallows that too and answers 201 gets 503 "not recorded" from
// the engine, whose completion the store refuses the same way. Either way the retry runs
// the handler afresh, once.
func TestMariaDBHandlerRetryAfterDeadlockKeepsNothing(t *testing.T) {
	t.Parallel()
	for _, swallowAll := range []bool{false, true} {
		t.Run(fmt.Sprintf("swallow all %v", swallowAll), func(t *testing.T) {
			t.Parallel()
			d := newGormDB(t, onMariaDB)
			cs := newCrossedStock(t, d)
			a := newGormApp(t, d, gormAppConfig{direct: true, poolSize: 4, cfg: core.Config{LockWait: 5 * time.Second}})
			var swallowed sync.Map // key → the deadlock its handler swallowed
			take := func(ctx context.Context, tx *gorm.DB, r *http.Request) error {
				key := core.MustOperation(ctx).Key()
				if err := cs.first(tx, key); err != nil {
					return err
				}
				err := cs.second(tx, key)
				if err == nil {
					return nil
				}
				swallowed.Store(key, err)
				// "Retry the statement": the whole request again, in what it believes is
				// still its transaction.
				err = errors.Join(
					tx.Create(&gormOrder{Scope: "acct", IdemKey: key, Amount: -1}).Error,
					tx.Exec("UPDATE "+cs.order(key)[0]+" SET n = n - 1 WHERE id = 1").Error,
					cs.second(tx, key))
				assert.ErrorIs(t, err, gormstore.ErrRolledBack, "the statements after the deadlock") // not require: the server's goroutine
				if swallowAll {
					return nil
				}
				return err
			}
			a.business.Store(&take)

			got := cs.post(a)
			var victim string
			swallowed.Range(func(k, v any) bool { victim = k.(string); t.Logf("%s swallowed: %v", k, v); return true })
			require.NotEmpty(t, victim, "no deadlock: %v", got)
			if r := got[victim]; swallowAll {
				mustProblem(t, r, http.StatusServiceUnavailable, core.ProblemNotRecorded, true)
			} else {
				require.Equal(t, http.StatusServiceUnavailable, r.status, "the victim: %v", r)
				assert.Contains(t, string(r.body), "try again: 1213", "the application sees the deadlock in the refusal")
			}
			_, kept := d.keyState("acct", victim)
			assert.False(t, kept, "the victim's key was recorded")
			assert.Zero(t, d.orders("acct", victim), "what the victim wrote after the deadlock was committed without its key")

			a.business.Store(nil)
			rs := a.retryUntilDone("acct", victim, "", jsonBody(1), 30)
			require.Equal(t, http.StatusCreated, rs[len(rs)-1].status, "the victim's retry: %v", rs)
			for key := range got {
				assert.Equal(t, 1, d.orders("acct", key), "orders of key %s after the retry", key)
			}
			assert.Equal(t, 99, d.count("SELECT n FROM stock_a"), "stock_a: only the survivor's update (the retry writes no stock)")
			assert.Equal(t, 99, d.count("SELECT n FROM stock_b"), "stock_b: only the survivor's update (the retry writes no stock)")
		})
	}
}

// crossedStock is the setup of a deadlock between two requests: keys "ab" and "ba"
// update two stock tables in opposite orders, and on their first attempt each holds its
// first lock until the other holds its own.
type crossedStock struct {
	firstLocks sync.WaitGroup
	once       sync.Map
}

// newCrossedStock creates the tables stock_a and stock_b in d, each with one row of 100.
func newCrossedStock(t *testing.T, d *gormDB) *crossedStock {
	for _, tbl := range []string{"stock_a", "stock_b"} {
		require.NoError(t, d.check.Exec("CREATE TABLE "+tbl+" (id int PRIMARY KEY, n int NOT NULL) ENGINE=InnoDB").Error)
		require.NoError(t, d.check.Exec("INSERT INTO "+tbl+" VALUES (1, 100)").Error)
	}
	cs := &crossedStock{}
	cs.firstLocks.Add(2)
	return cs
}

// order is the tables key updates, in its order.
func (cs *crossedStock) order(key string) []string {
	if key == "ba" {
		return []string{"stock_b", "stock_a"}
	}
	return []string{"stock_a", "stock_b"}
}

// first takes key's first lock and, on the key's first attempt only, waits until both
// requests hold theirs.
func (cs *crossedStock) first(tx *gorm.DB, key string) error {
	if err := tx.Exec("UPDATE " + cs.order(key)[0] + " SET n = n - 1 WHERE id = 1").Error; err != nil {
		return err
	}
	if _, again := cs.once.LoadOrStore(key, true); !again {
		cs.firstLocks.Done()
		cs.firstLocks.Wait()
	}
	return nil
}

// second asks for key's second lock: the other request's first.
func (cs *crossedStock) second(tx *gorm.DB, key string) error {
	return tx.Exec("UPDATE " + cs.order(key)[1] + " SET n = n - 1 WHERE id = 1").Error
}

// post sends both requests at once and returns their replies by key.
func (cs *crossedStock) post(a *gormApp) map[string]reply {
	replies := map[string]chan reply{"ab": make(chan reply, 1), "ba": make(chan reply, 1)}
	for key, ch := range replies {
		go func() { ch <- a.post("acct", key, "", jsonBody(1)) }()
	}
	return map[string]reply{"ab": <-replies["ab"], "ba": <-replies["ba"]}
}
