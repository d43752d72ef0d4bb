package reliability_test

import (
	"bufio"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/gormstore"
)

// The SQLite kill trials' child: the test binary re-executed with sqliteChildEnv naming
// the database (file and DSN parameters). TestMain then serves the orders application on
// gormstore instead of running tests, on a free loopback port it prints to stdout, until
// it is killed or a request's crash point kills it.
const (
	sqliteChildEnv = "IDEM_RELIABILITY_SQLITE_CHILD"
	childReady     = "sqlite child listening on "
	childLifetime  = 3 * time.Minute // a child never outlives a run that lost it
	crashExit      = 3               // the status of a crash by os.Exit
	// A request's crash plan: where the child dies (a crashPoint) and how ("exit": os.Exit;
	// "kill": SIGKILL to itself).
	headerCrashAt  = "X-Crash-At"
	headerCrashHow = "X-Crash-How"
)

// crashPoint is a moment of a keyed request at which the child dies.
type crashPoint string

const (
	atClaim        crashPoint = "claim"         // the claim's statement has run (the first in a transaction naming the key)
	atAfterClaim   crashPoint = "after-claim"   // the handler starts
	atAfterWrite   crashPoint = "after-write"   // the order is inserted, uncommitted
	atBeforeCommit crashPoint = "before-commit" // the completion is written; COMMIT not called
	atDuringCommit crashPoint = "during-commit" // a random instant from COMMIT's start (up to 1.5ms)
	atAfterCommit  crashPoint = "after-commit"  // COMMIT returned; the response not sent
	atAcknowledged crashPoint = "acknowledged"  // the client has its 201; the parent SIGKILLs the child
)

var crashPoints = []crashPoint{atClaim, atAfterClaim, atAfterWrite, atBeforeCommit, atDuringCommit, atAfterCommit, atAcknowledged}

// armedCrash is the child's plan for the request in flight (the trials send one at a time).
var armedCrash atomic.Pointer[crashPlan]

type crashPlan struct {
	key  string
	at   crashPoint
	kill bool
}

// crashHere dies if the armed plan is for key (any key when key is "") at point.
func crashHere(key string, at crashPoint) {
	p := armedCrash.Load()
	if p == nil || p.at != at || (key != "" && p.key != key) {
		return
	}
	die(p.kill)
}

func die(kill bool) {
	if kill {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
	os.Exit(crashExit) // no deferred function, no Close: what SQLite wrote stays as it is
}

// runSQLiteChild is the child's main: it returns only on a failure to serve.
func runSQLiteChild() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "sqlite child:", err)
		return 2
	}
	time.AfterFunc(childLifetime, func() {
		fmt.Fprintln(os.Stderr, "sqlite child: lifetime over, exiting")
		os.Exit(4)
	})
	db, err := gorm.Open(&sqlite.Dialector{DriverName: crashDriverName(), DSN: os.Getenv(sqliteChildEnv)}, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return fail(err)
	}
	eng, err := core.New(core.Config{Store: gormstore.New(db)})
	if err != nil {
		return fail(err)
	}
	orders := func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		op := core.MustOperation(ctx)
		crashHere(op.Key(), atAfterClaim)
		var req struct {
			Amount int `json:"amount"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, "bad body: "+err.Error(), http.StatusBadRequest)
			return
		}
		row := gormOrder{Scope: op.Scope(), IdemKey: op.Key(), Amount: req.Amount}
		if err := gormstore.MustDB(ctx).Create(&row).Error; err != nil {
			http.Error(w, "database error: "+err.Error(), http.StatusInternalServerError)
			return
		}
		crashHere(op.Key(), atAfterWrite)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", row.ID))
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(order{ID: row.ID, Scope: row.Scope, Key: row.IdemKey, Amount: row.Amount})
	}
	idem := eng.Middleware(func(r *http.Request) string { return r.Header.Get("X-Account") })(http.HandlerFunc(orders))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		armedCrash.Store(nil)
		if at := r.Header.Get(headerCrashAt); at != "" {
			armedCrash.Store(&crashPlan{key: r.Header.Get("Idempotency-Key"), at: crashPoint(at), kill: r.Header.Get(headerCrashHow) == "kill"})
		}
		idem.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	fmt.Println(childReady + ln.Addr().String())
	return fail((&http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}).Serve(ln))
}

// crashDriver wraps the SQLite driver to reach the moments inside the store: the claim's
// statement and COMMIT.
type crashDriver struct{ inner driver.Driver }

var registerCrashDriver sync.Once

func crashDriverName() string {
	const name = "sqlite-crash-points"
	registerCrashDriver.Do(func() {
		db, err := sql.Open(sqlite.DriverName, ":memory:")
		if err != nil {
			panic(err)
		}
		inner := db.Driver()
		_ = db.Close()
		sql.Register(name, crashDriver{inner: inner})
	})
	return name
}

func (d crashDriver) Open(name string) (driver.Conn, error) {
	c, err := d.inner.Open(name)
	if err != nil {
		return nil, err
	}
	return &crashConn{Conn: c}, nil
}

// crashConn forwards to the SQLite connection (which implements every context method).
type crashConn struct {
	driver.Conn
	inTx, claimed bool
}

func (c *crashConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	c.inTx, c.claimed = true, false
	return &crashTx{Tx: tx, c: c}, nil
}

func (c *crashConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
}

func (c *crashConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	res, err := c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
	if err == nil && c.inTx && !c.claimed {
		if p := armedCrash.Load(); p != nil && p.at == atClaim && namesKey(args, p.key) {
			c.claimed = true
			die(p.kill)
		}
	}
	return res, err
}

func (c *crashConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

func (c *crashConn) Ping(ctx context.Context) error { return c.Conn.(driver.Pinger).Ping(ctx) }

func namesKey(args []driver.NamedValue, key string) bool {
	for _, a := range args {
		if s, ok := a.Value.(string); ok && s == key {
			return true
		}
	}
	return false
}

type crashTx struct {
	driver.Tx
	c *crashConn
}

func (t *crashTx) Commit() error {
	t.c.inTx = false
	crashHere("", atBeforeCommit)
	if p := armedCrash.Load(); p != nil && p.at == atDuringCommit {
		time.AfterFunc(time.Duration(rand.IntN(1500))*time.Microsecond, func() { die(p.kill) })
	}
	if err := t.Tx.Commit(); err != nil {
		return err
	}
	crashHere("", atAfterCommit)
	return nil
}

func (t *crashTx) Rollback() error {
	t.c.inTx = false
	return t.Tx.Rollback()
}

// sqliteChild is a running child server.
type sqliteChild struct {
	*endpoint
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has ended; then state is set
	state  *os.ProcessState
}

// startSQLiteChild starts a child on the database dsn and waits until it serves.
func startSQLiteChild(t *testing.T, dsn string) *sqliteChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), sqliteChildEnv+"="+dsn)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start(), "start the child server")
	c := &sqliteChild{cmd: cmd, exited: make(chan struct{})}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), childReady); ok {
				ready <- addr
			}
		}
		_ = cmd.Wait()
		c.state = cmd.ProcessState
		close(c.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.exited
	})
	select {
	case addr := <-ready:
		tr := &http.Transport{DisableKeepAlives: true}
		c.endpoint = &endpoint{url: "http://" + addr, client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
	case <-c.exited:
		t.Fatalf("the child server exited before serving: %v", c.state)
	case <-time.After(30 * time.Second):
		t.Fatal("the child server never said it was listening")
	}
	return c
}

// waitExit waits for the child to end and says how: "exit N" or "killed".
func (c *sqliteChild) waitExit(t *testing.T) string {
	t.Helper()
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the child never died")
	}
	if ws, ok := c.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "killed"
	}
	return fmt.Sprintf("exit %d", c.state.ExitCode())
}

// TestSQLiteKillTrials kills the application process at each moment of a keyed request in
// turn (IDEM_SQLITE_KILL_TRIALS trials, default 100, as many as the fault trials of the
// other databases), by os.Exit or SIGKILL alternately, with the demo's SQLite settings
// (WAL, synchronous FULL). A new process reopens the file
// and the client retries with the same key until the answer is final. Every trial must
// end with exactly one order; every 2xx names it, byte for byte the same; a commit the
// client never heard of is replayed; a 201 the client got survives the kill and is
// replayed; and the file passes PRAGMA integrity_check after every trial.
func TestSQLiteKillTrials(t *testing.T) {
	t.Parallel()
	trials := envInt(t, "IDEM_SQLITE_KILL_TRIALS", 100)
	require.GreaterOrEqual(t, trials, 2*len(crashPoints), "IDEM_SQLITE_KILL_TRIALS: each moment once by os.Exit and once by SIGKILL")
	d := newGormDB(t, onSQLite)
	var mode, sync string
	require.NoError(t, d.check.Raw("PRAGMA journal_mode").Scan(&mode).Error)
	require.NoError(t, d.check.Raw("PRAGMA synchronous").Scan(&sync).Error)

	child := startSQLiteChild(t, d.dsn)
	per := make([]tally, len(crashPoints))
	deaths := map[string]int{}
	start := time.Now()
	for i := range trials {
		pi := i % len(crashPoints)
		at := crashPoints[pi]
		kill := (i/len(crashPoints))%2 == 1
		key := fmt.Sprintf("kill-%05d", i)
		scope := "acct-" + fmt.Sprint(i%3)
		body := jsonBody(i)
		tl := &per[pi]
		tl.attempted++
		began := time.Now()

		h := http.Header{headerCrashAt: {string(at)}, headerCrashHow: {"exit"}}
		if kill || at == atAcknowledged {
			h.Set(headerCrashHow, "kill")
		}
		first := child.sendHeader(http.MethodPost, "/orders", scope, key, body, h)
		switch at {
		case atAcknowledged:
			require.True(t, first.err == nil && first.status == http.StatusCreated, "trial %d (%s): %v", i, at, first)
			require.NoError(t, child.cmd.Process.Signal(syscall.SIGKILL))
		case atDuringCommit:
			require.True(t, first.err != nil || first.status == http.StatusCreated, "trial %d (%s): want a 201 or no answer, got %v", i, at, first)
		default:
			require.Error(t, first.err, "trial %d (%s): the child answered instead of dying: %v", i, at, first)
		}
		deaths[child.waitExit(t)]++
		child = startSQLiteChild(t, d.dsn) // reopens the file the dead one left

		replies := append([]reply{first}, child.retryUntilDone(scope, key, "", body, 30)...)
		last := replies[len(replies)-1]
		require.True(t, last.err == nil && last.status == http.StatusCreated, "trial %d (%s): the retries never got a 201: %v", i, at, replies)
		if last.replayed() {
			tl.replays++
		} else {
			tl.reruns++
		}
		switch n := d.orders(scope, key); {
		case n > 1:
			tl.duplicated++
			t.Errorf("trial %d (%s): %d orders for one key", i, at, n)
		case n == 0:
			tl.lost++
			t.Errorf("trial %d (%s): no order although the client got %v", i, at, last)
		}
		acked := false
		for _, r := range replies {
			if r.err != nil || r.status/100 != 2 {
				continue
			}
			if !acked {
				acked = true
				tl.acknowledged++
			}
			o := r.order(t)
			assert.True(t, sameBody(r, last) && o.Key == key && o.Scope == scope, "trial %d (%s): 2xx answers differ: %s vs %s", i, at, r.body, last.body)
			if d.count(`SELECT count(*) FROM orders WHERE id = ? AND idem_key = ?`, o.ID, key) != 1 {
				tl.lost++
				t.Errorf("trial %d (%s): acknowledged order %d is not in the file", i, at, o.ID)
			}
		}
		if first.err == nil && first.status/100 == 2 {
			tl.first2xx++
		} else {
			tl.first5xx++ // no answer: the process died
		}
		if (at == atAfterCommit || at == atAcknowledged) && !last.replayed() {
			t.Errorf("trial %d (%s): the committed request ran again instead of replaying: %v", i, at, last)
		}
		var check string
		require.NoError(t, d.check.Raw("PRAGMA integrity_check").Scan(&check).Error)
		require.Equal(t, "ok", check, "trial %d (%s): PRAGMA integrity_check", i, at)
		if t.Failed() {
			t.FailNow()
		}
		tl.elapsed += time.Since(began)
	}

	var total tally
	var lines []string
	for pi, tl := range per {
		total.add(tl)
		lines = append(lines, fmt.Sprintf("  %-14s attempted=%d first:201=%d/none=%d retry:replayed=%d handler-rerun=%d (%v a trial)",
			crashPoints[pi], tl.attempted, tl.first2xx, tl.first5xx, tl.replays, tl.reruns,
			(tl.elapsed/time.Duration(max(tl.attempted, 1))).Round(time.Millisecond)))
	}
	t.Logf("gormstore × SQLite (journal_mode=%s, synchronous=%s): attempted=%d acknowledged=%d duplicated=%d lost=%d (%v; deaths: %v; integrity_check ok after every trial)\n%s",
		mode, sync, total.attempted, total.acknowledged, total.duplicated, total.lost, time.Since(start).Round(time.Millisecond),
		deaths, strings.Join(lines, "\n"))
	require.Zero(t, total.duplicated+total.lost, "duplicated=%d lost=%d", total.duplicated, total.lost)
	require.Equal(t, total.attempted, total.acknowledged, "trials that never got a 2xx")
	assert.Zero(t, d.count(`SELECT count(*) FROM (SELECT scope, idem_key FROM orders GROUP BY scope, idem_key HAVING count(*) > 1) dup`))
	assert.Equal(t, trials, d.count(`SELECT count(*) FROM idempotency_keys WHERE state = 'completed'`))
}

// TestSQLiteHandlerAfterFullDiskKeepsNothing: the SQLite side of
// TestMariaDBHandlerRetryAfterDeadlockKeepsNothing. After SQLITE_FULL (also IOERR, BUSY,
// NOMEM, INTERRUPT) SQLite may have rolled the transaction back and gone on in
// autocommit, or undone the statement only (as here): the error does not tell which, so
// gormstore rolls the transaction back itself, as SQLite recommends, and refuses the
// handler's later statements (gormstore.ErrRolledBack). A handler that swallows it all
// and answers 201 gets 503 "not recorded"; nothing it wrote is kept, not even the order
// it wrote before; the retry runs it afresh, once. The disk is full for real: the
// connections' max_page_count leaves room for small rows, not for the handler's large one.
func TestSQLiteHandlerAfterFullDiskKeepsNothing(t *testing.T) {
	t.Parallel()
	d := newGormDB(t, onSQLite)
	pages := d.count("PRAGMA page_count")
	d.dsn += fmt.Sprintf("&_pragma=max_page_count(%d)", pages+16) // the app's connections
	a := newGormApp(t, d, gormAppConfig{})
	var full atomic.Pointer[error]
	fill := func(ctx context.Context, tx *gorm.DB, r *http.Request) error {
		key := core.MustOperation(ctx).Key()
		err := tx.Create(&gormOrder{Scope: "acct", IdemKey: strings.Repeat("x", 128<<10), Amount: 0}).Error
		full.Store(&err)
		if err != nil { // "write a failure row", then answer as if all went well
			assert.ErrorIs(t, tx.Create(&gormOrder{Scope: "acct", IdemKey: key, Amount: -1}).Error, gormstore.ErrRolledBack)
		}
		return nil
	}
	a.business.Store(&fill)

	r := a.post("acct", "k", "", jsonBody(1))
	require.NotNil(t, full.Load(), "the handler ran")
	var lite interface{ Code() int }
	require.ErrorAs(t, *full.Load(), &lite, "the database is not full")
	require.Equal(t, 13, lite.Code()&0xff, "SQLITE_FULL: %v", *full.Load())
	mustProblem(t, r, http.StatusServiceUnavailable, core.ProblemNotRecorded, true)
	_, kept := d.keyState("acct", "k")
	assert.False(t, kept, "the key was recorded")
	assert.Zero(t, d.orders("acct", "k"), "an order was kept")

	a.business.Store(nil)
	rs := a.retryUntilDone("acct", "k", "", jsonBody(1), 30)
	require.Equal(t, http.StatusCreated, rs[len(rs)-1].status, "the retry: %v", rs)
	assert.Equal(t, 1, d.orders("acct", "k"), "orders after the retry")
}
