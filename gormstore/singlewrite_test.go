package gormstore_test

import (
	"context"
	"database/sql"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/driver/postgres"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/internal/seamtest"
	"github.com/idemkit/idem/internal/testdb"
)

// TestAtomicClaimFollowsTheTransactionsLevel: on PostgreSQL the default atomic claim
// writes nothing at READ COMMITTED (it holds the key's advisory lock, and no key row
// exists until Complete), and writes the started row first when the transaction runs at
// another level, here REPEATABLE READ as the server's default (no WithIsolation), where
// the lock could not serialise twins; so does WithClaimRowFirst at READ COMMITTED. Each
// completes and replays.
func TestAtomicClaimFollowsTheTransactionsLevel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		serverLevel string // the connections' default_transaction_isolation; "" the server's own
		opts        []gormstore.Option
		level       string // what the claim's transaction runs at
		singleWrite bool
	}{
		{"read committed", "", nil, "read committed", true},
		{"repeatable read by default", "repeatable read", nil, "repeatable read", false},
		{"WithClaimRowFirst", "", []gormstore.Option{gormstore.WithClaimRowFirst()}, "read committed", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			connURL, _ := testdb.PostgresSchema(t)
			if tc.serverLevel != "" {
				// %20, not url.Values' +: pgx reads a space only so.
				connURL += "&default_transaction_isolation=" + url.PathEscape(tc.serverLevel)
			}
			db := finish(t, postgres.Open(connURL))
			table := testdb.Name("keys")
			s := gormstore.New(db, append([]gormstore.Option{gormstore.WithTable(table)}, tc.opts...)...)
			require.NoError(t, s.Migrate(t.Context()))

			c := claimFor("k", "a", storage.ModeAtomic)
			lock := mustLock(t, s, c)
			tx := gormstore.MustDB(lock.Context(t.Context()))
			var level string
			var advisory, rows int
			require.NoError(t, tx.Raw(`SELECT current_setting('transaction_isolation')`).Scan(&level).Error)
			require.NoError(t, tx.Raw(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`).Scan(&advisory).Error)
			require.NoError(t, tx.Raw(`SELECT count(*) FROM `+table+` WHERE scope = ? AND idem_key = ?`, c.Scope, c.Key).Scan(&rows).Error)
			assert.Equal(t, tc.level, level, "the claim's transaction")
			if tc.singleWrite {
				assert.Equal(t, 1, advisory, "the claim holds the key's advisory lock")
				assert.Zero(t, rows, "no key row before Complete")
			} else {
				assert.Zero(t, advisory, "no advisory lock")
				assert.Equal(t, 1, rows, "the started key row, written first")
			}
			require.NoError(t, lock.Complete(t.Context(), created))
			rec := mustRecord(t, s, c)
			assert.Equal(t, storage.StateCompleted, rec.State)
			assert.Equal(t, created.Body, rec.Response.Body)
		})
	}
}

// TestAtomicTwinRecordedFirst: on an engine whose advisory-lock functions accept the call
// and do not lock (the test's schema defines them as no-ops, searched before pg_catalog),
// two twins both get the key at READ COMMITTED. The first to complete records it; the
// second's INSERT fails on the primary key and its Complete returns an error wrapping
// storage.ErrRecordedFirst (and storage.ErrTransient), its transaction and its business
// row rolled back, so that the engine answers it with the winner's record.
func TestAtomicTwinRecordedFirst(t *testing.T) {
	t.Parallel()
	connURL, schema := testdb.PostgresSchema(t)
	u, err := url.Parse(connURL)
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", schema+",pg_catalog") // no space: url.Values would write it as +
	u.RawQuery = q.Encode()
	db := finish(t, postgres.Open(u.String()))
	require.NoError(t, db.Exec(`CREATE FUNCTION `+schema+`.pg_try_advisory_xact_lock(bigint) RETURNS boolean LANGUAGE sql AS 'SELECT true';
		CREATE FUNCTION `+schema+`.pg_advisory_xact_lock(bigint) RETURNS void LANGUAGE sql AS 'SELECT'`).Error)
	require.NoError(t, db.Exec(`CREATE TABLE `+schema+`.orders (id serial PRIMARY KEY, key text NOT NULL)`).Error)
	s := gormstore.New(db, gormstore.WithTable(schema+".idempotency_keys"), gormstore.WithIsolation(sql.LevelReadCommitted))
	require.NoError(t, s.Migrate(t.Context()))

	c := claimFor("twin", "a", storage.ModeAtomic)
	first, second := mustLock(t, s, c), mustLock(t, s, c)
	for _, l := range []storage.Lock{first, second} {
		require.NoError(t, gormstore.MustDB(l.Context(t.Context())).Exec(`INSERT INTO `+schema+`.orders (key) VALUES (?)`, c.Key).Error)
	}
	require.NoError(t, first.Complete(t.Context(), created))
	err = second.Complete(t.Context(), created)
	require.ErrorIs(t, err, storage.ErrRecordedFirst)
	require.ErrorIs(t, err, storage.ErrTransient)
	require.NoError(t, second.Release(t.Context()), "Release after a failed Complete")

	var orders int64
	require.NoError(t, db.Raw(`SELECT count(*) FROM `+schema+`.orders`).Scan(&orders).Error)
	assert.EqualValues(t, 1, orders, "the loser's order rolled back")
	rec := mustRecord(t, s, c)
	assert.Equal(t, storage.StateCompleted, rec.State)
	assert.Equal(t, created.Body, rec.Response.Body)
}

// TestAtomicTwinWaitsInTheClaimStatement: on PostgreSQL at READ COMMITTED a twin of a
// request in flight waits for the key's advisory lock inside its one claim statement,
// bounded by the lock wait. When the holder rolls back, the twin gets the key in the same
// transaction (no second claim), and its handler runs under the lock_timeout the claim
// statement set for the transaction: the twin's lock wait.
func TestAtomicTwinWaitsInTheClaimStatement(t *testing.T) {
	t.Parallel()
	log := &claimLog{}
	db := openPostgres(t)
	db.Logger = log
	s := migrated(t, db)

	c := claimFor("k", "a", storage.ModeAtomic)
	holder := mustLock(t, s, c)
	var pid int32
	require.NoError(t, gormstore.MustDB(holder.Context(t.Context())).Raw("SELECT pg_backend_pid()").Scan(&pid).Error)
	twin := make(chan storage.Lock, 1)
	go func() {
		retry := c
		retry.LockWait = 10 * time.Second
		l, _, err := seamtest.Split(s.Claim(t.Context(), retry))
		assert.NoError(t, err, "the twin's claim")
		twin <- l
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, testdb.AwaitBlockedBy(ctx, pid, 1), "the twin waits for the holder")
	require.NoError(t, holder.Release(t.Context()))

	l := <-twin
	require.NotNil(t, l, "the twin of a released claim gets the key")
	assert.Equal(t, "10s", lockSetting(t, gormstore.MustDB(l.Context(t.Context())), "postgres"),
		"the twin's handler runs under the twin's lock wait")
	require.NoError(t, l.Complete(t.Context(), created))
	assert.Equal(t, 2, log.claims(), "one claim statement each: the twin did not claim again")
	rec := mustRecord(t, s, c)
	assert.Equal(t, storage.StateCompleted, rec.State)
}

// claimLog is a GORM logger that counts the store's claim statements (those that take
// the key's advisory lock).
type claimLog struct {
	mu sync.Mutex
	n  int
}

func (l *claimLog) LogMode(logger.LogLevel) logger.Interface { return l }
func (l *claimLog) Info(context.Context, string, ...any)     {}
func (l *claimLog) Warn(context.Context, string, ...any)     {}
func (l *claimLog) Error(context.Context, string, ...any)    {}

func (l *claimLog) Trace(_ context.Context, _ time.Time, fc func() (string, int64), _ error) {
	if sql, _ := fc(); strings.Contains(sql, "pg_try_advisory_xact_lock") {
		l.mu.Lock()
		l.n++
		l.mu.Unlock()
	}
}

func (l *claimLog) claims() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}
