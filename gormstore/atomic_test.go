package gormstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/internal/seamtest"
	"github.com/idemkit/idem/internal/testdb"
)

// TestAtomic: in atomic mode the handler's writes through gormstore.MustDB ride in the claim's
// transaction, on each dialect.
func TestAtomic(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			t.Run("CommitsWithResponse", func(t *testing.T) {
				t.Parallel()
				db := withOrders(t, d.open(t))
				s := migrated(t, db)
				c := claimFor("k", "a", storage.ModeAtomic)
				lock := mustLock(t, s, c)
				if err := gormstore.MustDB(lock.Context(t.Context())).Create(&order{Ref: "a", Amount: 1}).Error; err != nil {
					t.Fatalf("create: %v", err)
				}
				if n := countOrders(t, db, "a"); n != 0 {
					t.Fatalf("%d orders visible before Complete, want 0", n)
				}
				if err := lock.Complete(t.Context(), created); err != nil {
					t.Fatalf("Complete: %v", err)
				}
				if n := countOrders(t, db, "a"); n != 1 {
					t.Fatalf("%d orders after Complete, want 1", n)
				}
				if rec := mustRecord(t, s, c); rec.State != storage.StateCompleted || rec.Response.Status != created.Status {
					t.Fatalf("record after Complete: %+v", rec)
				}
			})
			t.Run("ReleaseRollsBack", func(t *testing.T) {
				t.Parallel()
				db := withOrders(t, d.open(t))
				s := migrated(t, db)
				lock := mustLock(t, s, claimFor("k", "a", storage.ModeAtomic))
				ctx := lock.Context(t.Context())
				if err := gormstore.MustDB(ctx).Create(&order{Ref: "a"}).Error; err != nil {
					t.Fatalf("create: %v", err)
				}
				err := lock.Phase(ctx, "charged", func(ctx context.Context) error {
					return gormstore.MustDB(ctx).Create(&order{Ref: "a"}).Error
				})
				if err != nil {
					t.Fatalf("Phase: %v", err)
				}
				if err := lock.Release(t.Context()); err != nil {
					t.Fatalf("Release: %v", err)
				}
				if n := countOrders(t, db, "a"); n != 0 {
					t.Fatalf("%d orders after Release, want 0", n)
				}
				if err := gormstore.MustDB(ctx).Create(&order{Ref: "late"}).Error; err == nil {
					t.Fatal("a write through the released lock's context succeeded")
				}
				mustLock(t, s, claimFor("k", "b", storage.ModeAtomic)) // the key is free again
			})
			// On PostgreSQL the claim's lock wait is the transaction's lock_timeout, the
			// handler's too (as in pgxstore); MySQL/MariaDB's and SQLite's settings outlive
			// the transaction, so the claim puts the connection's own back before the
			// handler runs. Either way the pool gets the connection back with its own.
			t.Run("LockWaitSetting", func(t *testing.T) {
				t.Parallel()
				db := d.open(t)
				sqlDB, _ := db.DB()
				sqlDB.SetMaxOpenConns(1) // every statement on the same connection
				s := migrated(t, db)
				before := lockSetting(t, db, d.name)
				c := claimFor("k", "a", storage.ModeAtomic)
				c.LockWait = 1234 * time.Millisecond
				want := before
				if d.name == "postgres" {
					want = "1234ms"
				}
				lock := mustLock(t, s, c)
				if got := lockSetting(t, gormstore.MustDB(lock.Context(t.Context())), d.name); got != want {
					t.Errorf("the handler runs with lock wait setting %q, want %q", got, want)
				}
				if err := lock.Complete(t.Context(), created); err != nil {
					t.Fatalf("Complete: %v", err)
				}
				if got := lockSetting(t, db, d.name); got != before {
					t.Errorf("the connection went back to the pool with lock wait setting %q, want %q", got, before)
				}
			})
			if d.name != "sqlite" {
				return // storetest's atomic cases cover twins on PostgreSQL and MariaDB
			}
			t.Run("TwinWaitsForCompletion", func(t *testing.T) {
				t.Parallel()
				s := migrated(t, d.open(t))
				c := claimFor("k", "a", storage.ModeAtomic)
				lock := mustLock(t, s, c)
				twin := make(chan *storage.Record, 1)
				name := testdb.Name("twin")
				go testdb.MarkWaiter(t.Context(), name, func(ctx context.Context) {
					twinClaim := c
					twinClaim.LockWait = 5 * time.Second
					_, rec, err := seamtest.Split(s.Claim(ctx, twinClaim))
					if err != nil {
						t.Errorf("twin: %v", err)
					}
					twin <- rec
				})
				awaitSQLiteBusy(t, name) // the twin waits for the claim's write lock
				if err := lock.Complete(t.Context(), created); err != nil {
					t.Fatalf("Complete: %v", err)
				}
				if rec := <-twin; rec == nil || rec.State != storage.StateCompleted {
					t.Fatalf("twin got %+v, want the completed record", rec)
				}
			})
			t.Run("TwinGivesUp", func(t *testing.T) {
				t.Parallel()
				s := migrated(t, d.open(t))
				c := claimFor("k", "a", storage.ModeAtomic)
				mustLock(t, s, c)
				c.LockWait = 100 * time.Millisecond
				start := time.Now()
				_, _, err := seamtest.Split(s.Claim(t.Context(), c))
				if !errors.Is(err, storage.ErrInProgress) {
					t.Fatalf("twin of an open transaction: %v, want ErrInProgress", err)
				}
				t.Logf("gave up after %v", time.Since(start))
			})
			t.Run("TwinClaimsAfterRelease", func(t *testing.T) {
				t.Parallel()
				s := migrated(t, d.open(t))
				c := claimFor("k", "a", storage.ModeAtomic)
				lock := mustLock(t, s, c)
				twin := make(chan storage.Lock, 1)
				name := testdb.Name("twin")
				go testdb.MarkWaiter(t.Context(), name, func(ctx context.Context) {
					twinClaim := c
					twinClaim.LockWait = 5 * time.Second
					l, _, err := seamtest.Split(s.Claim(ctx, twinClaim))
					if err != nil {
						t.Errorf("twin: %v", err)
					}
					twin <- l
				})
				awaitSQLiteBusy(t, name) // the twin waits for the claim's write lock
				if err := lock.Release(t.Context()); err != nil {
					t.Fatalf("Release: %v", err)
				}
				l := <-twin
				if l == nil {
					t.Fatal("the twin of a released claim got no lock")
				}
				if err := l.Complete(t.Context(), created); err != nil {
					t.Fatalf("twin's Complete: %v", err)
				}
			})
		})
	}
}

// lockSetting reads the session setting the store changes for a claim's lock wait.
func lockSetting(t testing.TB, db *gorm.DB, dialect string) string {
	t.Helper()
	q := map[string]string{
		"postgres": "SELECT current_setting('lock_timeout')",
		"mysql":    "SELECT CAST(@@SESSION.innodb_lock_wait_timeout AS CHAR)",
		"sqlite":   "PRAGMA busy_timeout",
	}[dialect]
	var v string
	if err := db.Raw(q).Row().Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}

// awaitSQLiteBusy waits until the goroutine marked name (testdb.MarkWaiter) waits in
// SQLite's busy handler for a lock another connection holds.
func awaitSQLiteBusy(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := testdb.AwaitSQLiteBusy(ctx, name); err != nil {
		t.Fatal(err)
	}
}
