package gormstore_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/driver/postgres"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/internal/testdb"
)

// handlerWaitBound is how long a handler's statement in these tests may wait for a row
// before the test gives up on it: far beyond the claims' lock wait, so that a wait the
// lock wait does not bound fails the test instead of hanging it. It is no assertion on
// how long the wait took.
const handlerWaitBound = 30 * time.Second

// TestPostgresHandlerRunsUnderTheLockWait: on PostgreSQL the claim's lock wait is the
// atomic transaction's lock_timeout, as in pgxstore, whichever claim the store makes: a
// handler's statement that waits for a row another transaction holds fails with 55P03
// (lock_not_available) instead of waiting as long as the connection's own lock_timeout
// lets it (none by default), the request's writes roll back with the key, and the
// connection goes back to the pool with its own lock_timeout (SET LOCAL ended with the
// transaction).
func TestPostgresHandlerRunsUnderTheLockWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []gormstore.Option
		// expired: the key has a completed row past the claim's retention, which the claim
		// statement finds and the claim after it replaces in the same transaction.
		expired bool
	}{
		{name: "SingleWrite"},
		{name: "SingleWriteReplacingAnExpiredRow", expired: true},
		{name: "WithLookupFirst", opts: []gormstore.Option{gormstore.WithLookupFirst()}},
		{name: "WithClaimRowFirst", opts: []gormstore.Option{gormstore.WithClaimRowFirst()}},
		{name: "RepeatableRead", opts: []gormstore.Option{gormstore.WithIsolation(sql.LevelRepeatableRead)}},
		{name: "Serializable", opts: []gormstore.Option{gormstore.WithIsolation(sql.LevelSerializable)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			connURL, _ := testdb.PostgresSchema(t)
			db := withOrders(t, finish(t, postgres.Open(connURL)))
			sqlDB, err := db.DB()
			require.NoError(t, err)
			sqlDB.SetMaxOpenConns(1) // the claim's connection is the one the pool hands out next
			other := finish(t, postgres.Open(connURL))
			require.NoError(t, other.Exec(`CREATE TABLE stock (id int PRIMARY KEY, n int NOT NULL)`).Error)
			require.NoError(t, other.Exec(`INSERT INTO stock VALUES (1, 10)`).Error)
			s := migrated(t, db, tc.opts...)
			own := lockSetting(t, db, "postgres")

			c := claimFor("k", "a", storage.ModeAtomic)
			c.LockWait = 250 * time.Millisecond
			require.NotEqual(t, "250ms", own, "the connection's own lock_timeout must differ from the claim's")
			if tc.expired {
				done := mustLock(t, s, c)
				require.NoError(t, done.Complete(t.Context(), created))
				c.Retention = time.Microsecond // the completed row is past it: as if absent
			}

			// Another transaction, on another connection, holds the stock row.
			holder := other.Begin()
			require.NoError(t, holder.Error)
			t.Cleanup(func() { holder.Rollback() })
			require.NoError(t, holder.Exec(`UPDATE stock SET n = n - 1 WHERE id = 1`).Error)

			lock := mustLock(t, s, c)
			ctx, cancel := context.WithTimeout(lock.Context(t.Context()), handlerWaitBound)
			defer cancel()
			tx := gormstore.MustDB(ctx)
			assert.Equal(t, "250ms", lockSetting(t, tx, "postgres"), "the handler's lock_timeout")
			require.NoError(t, tx.Create(&order{Ref: "k"}).Error)
			waited := tx.Exec(`UPDATE stock SET n = n - 1 WHERE id = 1`).Error
			var pgErr *pgconn.PgError
			require.ErrorAs(t, waited, &pgErr, "the handler's wait for the held row: %v", waited)
			require.Equal(t, "55P03", pgErr.Code, "the handler's wait ends at the lock wait: %v", waited)

			// The handler answers a 5xx: the engine releases the key, and the request's
			// writes roll back with it.
			require.NoError(t, lock.Release(t.Context()))
			assert.Zero(t, countOrders(t, db, "k"), "the order rolled back")
			assert.Equal(t, own, lockSetting(t, db, "postgres"), "the connection back in the pool keeps its own lock_timeout")
			require.NoError(t, holder.Rollback().Error)
			again := mustLock(t, s, c) // nothing recorded: the key is free
			assert.False(t, again.Resumed())
			require.NoError(t, again.Release(t.Context()))
		})
	}
}

// TestPostgresPhasedHandlerKeepsItsLockTimeout: in phased mode on PostgreSQL the claim's
// transaction, which sets lock_timeout for its own wait, commits before the handler runs;
// the phases' transactions and the final one keep the connection's own lock_timeout.
func TestPostgresPhasedHandlerKeepsItsLockTimeout(t *testing.T) {
	t.Parallel()
	db := openPostgres(t)
	sqlDB, err := db.DB()
	require.NoError(t, err)
	sqlDB.SetMaxOpenConns(1) // every statement on the same connection
	s := migrated(t, db)
	own := lockSetting(t, db, "postgres")

	c := claimFor("k", "a", storage.ModePhased)
	c.LockWait = 250 * time.Millisecond
	require.NotEqual(t, "250ms", own, "the connection's own lock_timeout must differ from the claim's")
	lock := mustLock(t, s, c)
	ctx := lock.Context(t.Context())
	require.NoError(t, lock.Phase(ctx, "charged", func(ctx context.Context) error {
		assert.Equal(t, own, lockSetting(t, gormstore.MustDB(ctx), "postgres"), "a phase's lock_timeout")
		return nil
	}))
	assert.Equal(t, own, lockSetting(t, gormstore.MustDB(ctx), "postgres"), "the final transaction's lock_timeout")
	require.NoError(t, lock.Complete(t.Context(), created))
	assert.Equal(t, own, lockSetting(t, db, "postgres"), "the connection back in the pool")
}
