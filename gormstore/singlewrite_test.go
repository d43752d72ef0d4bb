package gormstore_test

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/driver/postgres"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/gormstore"
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
			tx := gormstore.DB(lock.Context(t.Context()))
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
