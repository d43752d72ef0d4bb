package gormstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/internal/testdb"
)

// handlerAfterRollback is what a handler that swallowed a rollback-meaning error met when
// it carried on in what it took to be its transaction.
type handlerAfterRollback struct {
	cause             error // the error of the statement the database rolled back
	exec, query, row  error // a later INSERT, SELECT and QueryRow through gormstore.MustDB(ctx)
	phase, completion error
}

// requireRefused checks that every statement after the rollback was refused with an error
// wrapping ErrRolledBack and the cause (isCause).
func (h *handlerAfterRollback) requireRefused(t *testing.T, isCause func(error) bool) {
	t.Helper()
	require.Error(t, h.cause, "the statement the database rolled back")
	for name, err := range map[string]error{"INSERT": h.exec, "SELECT": h.query, "QueryRow": h.row} {
		require.ErrorIs(t, err, gormstore.ErrRolledBack, "%s after the rollback", name)
		assert.True(t, isCause(err), "%s after the rollback: %v does not wrap the cause", name, err)
	}
}

// carryOn is the handler that swallows err and goes on in tx; it records what it met.
func (h *handlerAfterRollback) carryOn(tx *gorm.DB, err error, ref string) {
	h.cause = err
	h.exec = tx.Create(&order{Ref: ref}).Error
	var n int
	h.query = tx.Raw("SELECT 1").Scan(&n).Error
	h.row = tx.Raw("SELECT 1").Row().Scan(&n)
}

// isDeadlock reports whether err wraps MySQL's ER_LOCK_DEADLOCK.
func isDeadlock(err error) bool {
	var my *gomysql.MySQLError
	return errors.As(err, &my) && my.Number == 1213
}

// TestMySQLDeadlockInHandlerKeepsNothing: InnoDB answers a deadlock by rolling the whole
// transaction back and carries on in autocommit. A handler that swallows the deadlock and
// goes on writing through gormstore.MustDB(ctx) has every later statement refused with an
// error wrapping ErrRolledBack and the deadlock, so none commits on its own; the
// completion (or the phase) fails the same way, sending nothing but ROLLBACK, not as a
// lost lease; and the key is not recorded, so a retry claims it afresh. In atomic mode
// (also on a database opened with PrepareStmt), in phased mode's request transaction,
// and in a phase's.
func TestMySQLDeadlockInHandlerKeepsNothing(t *testing.T) {
	t.Parallel()
	db := withOrders(t, openMySQL(t))
	for _, tc := range []struct {
		name             string
		mode             storage.Mode
		inPhase, prepare bool
	}{
		{"atomic", storage.ModeAtomic, false, false},
		{"atomic, PrepareStmt", storage.ModeAtomic, false, true},
		{"phased", storage.ModePhased, false, false},
		{"in a phase", storage.ModePhased, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := db
			if tc.prepare {
				pool = db.Session(&gorm.Session{PrepareStmt: true})
			}
			s := migrated(t, pool)
			tables := [2]string{testdb.Name("stock_a"), testdb.Name("stock_b")}
			for _, tbl := range tables {
				require.NoError(t, db.Exec("CREATE TABLE "+tbl+" (id int PRIMARY KEY, n int NOT NULL) ENGINE=InnoDB").Error)
				require.NoError(t, db.Exec("INSERT INTO "+tbl+" VALUES (1, 100)").Error)
				t.Cleanup(func() { db.Exec("DROP TABLE " + tbl) })
			}
			prefix := testdb.Name("k")
			var locks [2]storage.Lock
			for i := range locks {
				locks[i] = mustLock(t, s, claimFor(fmt.Sprint(prefix, i), "a", tc.mode))
			}

			// Each locks its first table, then, once both hold one, the other's: InnoDB finds
			// the cycle at once and rolls one of them back; the other goes on when it has.
			var firstLocks, done sync.WaitGroup
			firstLocks.Add(2)
			var got [2]handlerAfterRollback
			for i := range locks {
				done.Go(func() {
					h := &got[i]
					body := func(ctx context.Context) error {
						tx := gormstore.MustDB(ctx)
						err := tx.Exec("UPDATE " + tables[i] + " SET n = n - 1 WHERE id = 1").Error
						firstLocks.Done()
						if err != nil {
							return err
						}
						firstLocks.Wait()
						if err := tx.Exec("UPDATE " + tables[1-i] + " SET n = n - 1 WHERE id = 1").Error; err != nil {
							h.carryOn(tx, err, fmt.Sprint(prefix, i))
						}
						return nil
					}
					ctx := locks[i].Context(t.Context())
					if tc.inPhase {
						if h.phase = locks[i].Phase(ctx, "stock", body); h.phase != nil {
							_ = locks[i].Release(t.Context())
							return
						}
					} else if h.phase = body(ctx); h.phase != nil {
						return
					}
					if h.completion = locks[i].Complete(t.Context(), created); h.completion != nil {
						_ = locks[i].Release(t.Context())
					}
				})
			}
			done.Wait()

			victim := 0
			if got[1].cause != nil {
				victim = 1
			}
			v, survivor := got[victim], got[1-victim]
			require.True(t, isDeadlock(v.cause), "no deadlock: %+v", got)
			v.requireRefused(t, isDeadlock)
			failed := v.completion
			if tc.inPhase {
				failed = v.phase
				assert.NoError(t, v.completion, "no completion after a failed phase")
			} else {
				assert.NoError(t, v.phase)
			}
			require.ErrorIs(t, failed, gormstore.ErrRolledBack)
			assert.True(t, isDeadlock(failed), "%v does not wrap the deadlock", failed)
			assert.NotErrorIs(t, failed, storage.ErrLeaseLost, "no lease was lost: the engine must not answer 409")
			assert.Equal(t, handlerAfterRollback{}, survivor, "the survivor")

			assert.Zero(t, countOrders(t, db, fmt.Sprint(prefix, victim)), "the victim's order, written after the deadlock")
			for _, tbl := range tables {
				var n int
				require.NoError(t, db.Raw("SELECT n FROM "+tbl+" WHERE id = 1").Scan(&n).Error)
				assert.Equal(t, 99, n, "%s: the survivor's update only", tbl)
			}
			mustLock(t, s, claimFor(fmt.Sprint(prefix, victim), "a", tc.mode)) // not recorded: claimed afresh
			rec := mustRecord(t, s, claimFor(fmt.Sprint(prefix, 1-victim), "a", tc.mode))
			assert.Equal(t, created.Status, rec.Response.Status, "the survivor's response")
		})
	}
}

// TestMySQLLockWaitTimeoutInHandler: a lock wait timeout (1205) rolls back only the
// statement unless the server runs with innodb_rollback_on_timeout=ON: the store asks the
// server which, and only then refuses the rest. On a server with the default (OFF) the
// handler that caught the timeout goes on in its transaction and commits.
func TestMySQLLockWaitTimeoutInHandler(t *testing.T) {
	t.Parallel()
	db := withOrders(t, openMySQL(t))
	s := migrated(t, db)
	var rollbackOnTimeout bool
	require.NoError(t, db.Raw("SELECT @@innodb_rollback_on_timeout").Scan(&rollbackOnTimeout).Error)
	tbl := testdb.Name("stock")
	require.NoError(t, db.Exec("CREATE TABLE "+tbl+" (id int PRIMARY KEY, n int NOT NULL) ENGINE=InnoDB").Error)
	t.Cleanup(func() { db.Exec("DROP TABLE " + tbl) })
	require.NoError(t, db.Exec("INSERT INTO "+tbl+" VALUES (1, 100)").Error)

	holder := db.Begin()
	require.NoError(t, holder.Error)
	t.Cleanup(func() { holder.Rollback() })
	require.NoError(t, holder.Exec("UPDATE "+tbl+" SET n = n - 1 WHERE id = 1").Error)

	ref := testdb.Name("k")
	lock := mustLock(t, s, claimFor(ref, "a", storage.ModeAtomic))
	tx := gormstore.MustDB(lock.Context(t.Context()))
	// The connection's own lock wait, put back for the pool before the test ends.
	require.NoError(t, tx.Exec("SET @lock_wait = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = 1").Error)
	waited := tx.Exec("UPDATE " + tbl + " SET n = n - 1 WHERE id = 1").Error
	var my *gomysql.MySQLError
	require.ErrorAs(t, waited, &my)
	require.EqualValues(t, 1205, my.Number)

	later := tx.Create(&order{Ref: ref}).Error
	if rollbackOnTimeout {
		require.ErrorIs(t, later, gormstore.ErrRolledBack)
		require.ErrorIs(t, lock.Complete(t.Context(), created), gormstore.ErrRolledBack)
		assert.Zero(t, countOrders(t, db, ref))
		return
	}
	require.NoError(t, later, "the transaction survives a lock wait timeout")
	require.NoError(t, tx.Exec("SET SESSION innodb_lock_wait_timeout = @lock_wait").Error)
	require.NoError(t, lock.Complete(t.Context(), created))
	assert.Equal(t, int64(1), countOrders(t, db, ref))
	rec := mustRecord(t, s, claimFor(ref, "a", storage.ModeAtomic))
	assert.Equal(t, created.Status, rec.Response.Status)
}

// TestSQLiteFullInHandlerKeepsNothing: SQLITE_FULL is one of the errors after which
// SQLite may have rolled the transaction back; the store then rolls it back itself, as
// SQLite recommends, so whatever SQLite did, nothing of the request commits and the key
// is not recorded. The database is full for real: its max_page_count leaves room for
// small rows, not for the handler's large one.
func TestSQLiteFullInHandlerKeepsNothing(t *testing.T) {
	t.Parallel()
	db := withOrders(t, openSQLite(t))
	s := migrated(t, db)
	var pages int
	require.NoError(t, db.Raw("PRAGMA page_count").Scan(&pages).Error)
	sqlDB, err := db.DB()
	require.NoError(t, err)
	sqlDB.SetMaxOpenConns(1) // max_page_count is per connection: one connection has it
	require.NoError(t, db.Exec(fmt.Sprintf("PRAGMA max_page_count = %d", pages+8)).Error)

	for _, mode := range []storage.Mode{storage.ModeAtomic, storage.ModePhased} {
		ref := testdb.Name("k")
		lock := mustLock(t, s, claimFor(ref, "a", mode))
		tx := gormstore.MustDB(lock.Context(t.Context()))
		big := make([]byte, 64<<10)
		full := tx.Exec("INSERT INTO orders (ref, amount) VALUES (?, 0)", string(big)).Error
		var lite interface{ Code() int }
		require.ErrorAs(t, full, &lite, "%v: a row larger than the room left", mode)
		require.Equal(t, 13, lite.Code()&0xff, "%v: SQLITE_FULL: %v", mode, full)
		var h handlerAfterRollback
		h.carryOn(tx, full, ref)
		h.requireRefused(t, func(err error) bool { return errors.As(err, &lite) && lite.Code()&0xff == 13 })
		require.ErrorIs(t, lock.Complete(t.Context(), created), gormstore.ErrRolledBack, "%v", mode)
		require.NoError(t, lock.Release(t.Context()))
		assert.Zero(t, countOrders(t, db, ref), "%v", mode)
		mustLock(t, s, claimFor(ref, "a", mode)).Release(t.Context()) // not recorded: claimed afresh
	}
}

// TestDBIsStillAGormTransaction: what stands between the handler and its transaction on
// MySQL/MariaDB and SQLite keeps what GORM offers on a transaction: DB() returns the pool,
// and a nested Transaction is a savepoint that rolls back alone, also on a database
// opened with PrepareStmt.
func TestDBIsStillAGormTransaction(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		for _, prepare := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s prepare %v", d.name, prepare), func(t *testing.T) {
				t.Parallel()
				db := withOrders(t, d.open(t))
				if prepare {
					db = db.Session(&gorm.Session{PrepareStmt: true})
				}
				s := migrated(t, db)
				ref := testdb.Name("k")
				lock := mustLock(t, s, claimFor(ref, "a", storage.ModeAtomic))
				tx := gormstore.MustDB(lock.Context(t.Context()))
				pool, err := tx.DB()
				require.NoError(t, err)
				want, err := db.DB()
				require.NoError(t, err)
				assert.Same(t, want, pool)
				require.NoError(t, tx.Create(&order{Ref: ref}).Error)
				inner := errors.New("inner")
				require.ErrorIs(t, tx.Transaction(func(tx *gorm.DB) error {
					require.NoError(t, tx.Create(&order{Ref: ref}).Error)
					return inner
				}), inner)
				require.NoError(t, lock.Complete(t.Context(), created))
				assert.Equal(t, int64(1), countOrders(t, db, ref), "the order outside the savepoint")
			})
		}
	}
}

// TestAtomicCompleteOfAVanishedClaimIsNotALostLease: in atomic mode the claim's own
// transaction holds the key's row, so a completion that finds no row to update means
// that transaction no longer holds it (here the handler deleted it; elsewhere the
// database ended the transaction where the store could not see it). Nothing is recorded,
// and the error is not ErrLeaseLost, which the engine answers 409 "in progress": no other
// request holds the key. On PostgreSQL with the claim that writes the row first
// (WithClaimRowFirst; the default single write has no row before Complete to lose).
func TestAtomicCompleteOfAVanishedClaimIsNotALostLease(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			table := testdb.Name("keys")
			s := gormstore.New(d.open(t), gormstore.WithTable(table), gormstore.WithClaimRowFirst())
			require.NoError(t, s.Migrate(t.Context()))
			key := testdb.Name("k")
			lock := mustLock(t, s, claimFor(key, "a", storage.ModeAtomic))
			tx := gormstore.MustDB(lock.Context(t.Context()))
			require.NoError(t, tx.Exec("DELETE FROM "+table+" WHERE idem_key = ?", key).Error)
			err := lock.Complete(t.Context(), created)
			require.Error(t, err)
			assert.NotErrorIs(t, err, storage.ErrLeaseLost)
			assert.Contains(t, err.Error(), "nothing was recorded")
			mustLock(t, s, claimFor(key, "a", storage.ModeAtomic)) // claimed afresh
		})
	}
}
