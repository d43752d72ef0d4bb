package testdb_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	_ "github.com/glebarez/sqlite" // registers database/sql driver "sqlite"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/internal/testdb"
)

// TestAwaitBlockedBy: a transaction holding a row's lock is reported blocking once, and
// only once, another transaction waits for that row.
func TestAwaitBlockedBy(t *testing.T) {
	t.Parallel()
	url, schema := testdb.PostgresSchema(t)
	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ctx := t.Context()
	_, err = pool.Exec(ctx, "CREATE TABLE "+schema+".r (id int PRIMARY KEY); INSERT INTO "+schema+".r VALUES (1)")
	require.NoError(t, err)

	holder, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(context.Background())
	var pid int32
	require.NoError(t, holder.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	_, err = holder.Exec(ctx, "UPDATE "+schema+".r SET id = 1")
	require.NoError(t, err)

	n, err := testdb.BlockedBy(ctx, pid)
	require.NoError(t, err)
	assert.Zero(t, n, "nobody waits yet")

	waiter := make(chan error, 1)
	go func() {
		_, err := pool.Exec(ctx, "UPDATE "+schema+".r SET id = 1")
		waiter <- err
	}()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, testdb.AwaitBlockedBy(wctx, pid, 1))
	select {
	case err := <-waiter:
		t.Fatalf("the waiter returned (%v) while the row was held", err)
	default:
	}
	require.NoError(t, holder.Rollback(ctx))
	require.NoError(t, <-waiter)
}

// TestAwaitSQLiteBusy: a goroutine whose connection waits for SQLite's write lock is seen
// in the busy handler; one that does not wait is not.
func TestAwaitSQLiteBusy(t *testing.T) {
	t.Parallel()
	path := testdb.SQLitePath(t)
	open := func() *sql.DB {
		db, err := sql.Open("sqlite", path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)")
		require.NoError(t, err)
		db.SetMaxOpenConns(1)
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	a, b := open(), open()
	ctx := t.Context()
	_, err := a.ExecContext(ctx, "CREATE TABLE r (id int)")
	require.NoError(t, err)
	holder, err := a.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer holder.Rollback()
	_, err = holder.ExecContext(ctx, "INSERT INTO r VALUES (1)")
	require.NoError(t, err)
	assert.False(t, testdb.SQLiteBusy("twin"), "nothing waits yet")

	waiter := make(chan error, 1)
	go testdb.MarkWaiter(ctx, "twin", func(ctx context.Context) {
		_, err := b.ExecContext(ctx, "INSERT INTO r VALUES (2)")
		waiter <- err
	})
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, testdb.AwaitSQLiteBusy(wctx, "twin"))
	assert.False(t, testdb.SQLiteBusy("other"), "only the marked goroutine")
	require.NoError(t, holder.Commit())
	require.NoError(t, <-waiter)
	assert.False(t, testdb.SQLiteBusy("twin"), "the waiter is done")
}
