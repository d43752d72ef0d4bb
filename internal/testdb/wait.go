package testdb

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

// A test that needs another request to be waiting for a lock waits for the database to
// say so, never for a fixed time: a sleep long enough on one machine is too short on a
// loaded one, and the test then passes without exercising its case.

// pollEvery is how often the waits below look again.
const pollEvery = 5 * time.Millisecond

// BlockedBy counts the PostgreSQL backends waiting for a lock that backend pid holds, as
// pg_blocking_pids tells: the twins queued behind a request's transaction, whether they
// wait for its key row (a transactionid lock) or for an advisory lock. A request learns
// its pid with SELECT pg_backend_pid() in its own transaction.
func BlockedBy(ctx context.Context, pid int32) (int, error) {
	pool, err := openAdmin()
	if err != nil {
		return 0, err
	}
	var n int
	err = pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE wait_event_type = 'Lock' AND $1::int = ANY(pg_blocking_pids(pid))`, pid).Scan(&n)
	return n, err
}

// AwaitBlockedBy waits until at least n PostgreSQL backends wait for a lock that backend
// pid holds (BlockedBy), and returns ctx's error if they never do. It polls on testdb's
// own pool, not the caller's (whose connections the waiters may hold), and runs on any
// goroutine: a handler holding its key calls it.
func AwaitBlockedBy(ctx context.Context, pid int32, n int) error {
	return poll(ctx, func() (bool, error) {
		got, err := BlockedBy(ctx, pid)
		return got >= n, err
	}, func() string { return fmt.Sprintf("%d backends waiting for a lock of backend %d", n, pid) })
}

// waiterLabel is the profiler label MarkWaiter sets.
const waiterLabel = "idem.testdb.waiter"

// MarkWaiter runs fn on the calling goroutine labelled as name (runtime/pprof labels),
// so that SQLiteBusy can tell whether that goroutine waits for SQLite's lock. Goroutines
// fn starts inherit the label.
func MarkWaiter(ctx context.Context, name string, fn func(ctx context.Context)) {
	pprof.Do(ctx, pprof.Labels(waiterLabel, name), fn)
}

// busyHandler is SQLite's busy handler in modernc.org/sqlite (which
// github.com/glebarez/sqlite runs): a connection that asked for a lock another connection
// holds sleeps and retries in it until busy_timeout runs out.
const busyHandler = "modernc.org/sqlite/lib.sqliteDefaultBusyCallback"

// SQLiteBusy reports whether a goroutine marked name (MarkWaiter) is inside SQLite's busy
// handler: its connection waits for a lock that another connection holds. SQLite runs in
// the process and keeps no list of waiters; the goroutine's stack is where its lock wait
// shows.
func SQLiteBusy(name string) bool {
	var b bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&b, 1) // one record per distinct stack and labels
	label := strconv.Quote(waiterLabel) + ":" + strconv.Quote(name)
	for _, rec := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(rec, label) && strings.Contains(rec, busyHandler) {
			return true
		}
	}
	return false
}

// AwaitSQLiteBusy waits until the goroutine marked name (MarkWaiter) waits for SQLite's
// lock (SQLiteBusy), and returns ctx's error if it never does.
func AwaitSQLiteBusy(ctx context.Context, name string) error {
	return poll(ctx, func() (bool, error) { return SQLiteBusy(name), nil },
		func() string { return fmt.Sprintf("goroutine %q waiting in SQLite's busy handler", name) })
}

// poll checks cond every pollEvery until it holds, fails, or ctx ends.
func poll(ctx context.Context, cond func() (bool, error), what func() string) error {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("testdb: waiting for %s: %w", what(), err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testdb: never saw %s: %w", what(), context.Cause(ctx))
		case <-tick.C:
		}
	}
}
