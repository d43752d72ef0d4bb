package gormstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/gormstore"
)

var errProvider = errors.New("provider said no")

// TestPhased: in phased mode the handler's writes commit with the phase that makes them,
// or, outside phases, with the response; a failure or a lost lease keeps none of them.
func TestPhased(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			t.Run("RequestTxCommitsWithResponse", func(t *testing.T) {
				t.Parallel()
				db := withOrders(t, d.open(t))
				s := migrated(t, db)
				lock := mustLock(t, s, claimFor("k", "a", storage.ModePhased))
				ctx := lock.Context(t.Context())
				if err := gormstore.MustDB(ctx).Create(&order{Ref: "final"}).Error; err != nil {
					t.Fatalf("create: %v", err)
				}
				if n := countOrders(t, db, "final"); n != 0 {
					t.Fatalf("%d orders visible before Complete, want 0", n)
				}
				if err := lock.Complete(t.Context(), created); err != nil {
					t.Fatalf("Complete: %v", err)
				}
				if n := countOrders(t, db, "final"); n != 1 {
					t.Fatalf("%d orders after Complete, want 1", n)
				}
				if err := gormstore.MustDB(ctx).Create(&order{Ref: "late"}).Error; err == nil {
					t.Fatal("a write through the completed lock's context succeeded")
				}
				if tx, ok := gormstore.DBFromContext(ctx); !ok || tx.Error == nil {
					t.Fatal("DBFromContext on a completed lock's context returned a transaction without an error")
				}
			})
			t.Run("ReleaseRollsBackRequestTx", func(t *testing.T) {
				t.Parallel()
				db := withOrders(t, d.open(t))
				s := migrated(t, db)
				lock := mustLock(t, s, claimFor("k", "a", storage.ModePhased))
				if err := gormstore.MustDB(lock.Context(t.Context())).Create(&order{Ref: "final"}).Error; err != nil {
					t.Fatalf("create: %v", err)
				}
				if err := lock.Release(t.Context()); err != nil {
					t.Fatalf("Release: %v", err)
				}
				if n := countOrders(t, db, "final"); n != 0 {
					t.Fatalf("%d orders after Release, want 0", n)
				}
				mustLock(t, s, claimFor("k", "b", storage.ModePhased)) // no phase committed: the key is gone
			})
			t.Run("PhaseCommitsItsWrites", func(t *testing.T) {
				t.Parallel()
				db := withOrders(t, d.open(t))
				s := migrated(t, db)
				c := claimFor("k", "a", storage.ModePhased)
				lock := mustLock(t, s, c)
				ctx := lock.Context(t.Context())
				err := lock.Phase(ctx, "charged", func(ctx context.Context) error {
					return gormstore.MustDB(ctx).Create(&order{Ref: "charged"}).Error
				})
				if err != nil {
					t.Fatalf("Phase: %v", err)
				}
				if n := countOrders(t, db, "charged"); n != 1 {
					t.Fatalf("%d orders after the phase committed, want 1", n)
				}
				err = lock.Phase(ctx, "emailed", func(ctx context.Context) error {
					if err := gormstore.MustDB(ctx).Create(&order{Ref: "emailed"}).Error; err != nil {
						return err
					}
					return errProvider
				})
				if !errors.Is(err, errProvider) {
					t.Fatalf("failing Phase: %v, want its function's error", err)
				}
				if n := countOrders(t, db, "emailed"); n != 0 {
					t.Fatalf("%d orders from a failed phase, want 0", n)
				}
				if rec := mustRecord(t, s, c); rec.RecoveryPoint != "charged" {
					t.Fatalf("recovery point %q, want charged", rec.RecoveryPoint)
				}
				if err := lock.Release(t.Context()); err != nil {
					t.Fatalf("Release: %v", err)
				}
				resumed := mustLock(t, s, c)
				if !resumed.Resumed() || resumed.RecoveryPoint() != "charged" {
					t.Fatalf("retry after a released phase: taken over %v at %q, want true at charged",
						resumed.Resumed(), resumed.RecoveryPoint())
				}
			})
			t.Run("PhaseAfterOpenRequestTxIsRefused", func(t *testing.T) {
				t.Parallel()
				db := withOrders(t, d.open(t))
				s := migrated(t, db)
				lock := mustLock(t, s, claimFor("k", "a", storage.ModePhased))
				ctx := lock.Context(t.Context())
				if err := gormstore.MustDB(ctx).Create(&order{Ref: "before"}).Error; err != nil {
					t.Fatalf("create: %v", err)
				}
				err := lock.Phase(ctx, "charged", func(ctx context.Context) error {
					return gormstore.MustDB(ctx).Create(&order{Ref: "in-phase"}).Error
				})
				if !errors.Is(err, storage.ErrFinalTxOpen) {
					t.Fatalf("Phase after the request's transaction opened: %v, want storage.ErrFinalTxOpen", err)
				}
				if b, p := countOrders(t, db, "before"), countOrders(t, db, "in-phase"); b != 0 || p != 0 {
					t.Fatalf("after the refused phase: %d orders written before it and %d in it, want 0 and 0", b, p)
				}
				if err := gormstore.MustDB(ctx).Create(&order{Ref: "after"}).Error; err != nil {
					t.Fatalf("create after the phase: %v", err)
				}
				if err := lock.Complete(t.Context(), created); err != nil {
					t.Fatalf("Complete: %v", err)
				}
				if b, a := countOrders(t, db, "before"), countOrders(t, db, "after"); b != 1 || a != 1 {
					t.Fatalf("after Complete: %d orders written before the phase and %d after, want 1 and 1", b, a)
				}
			})
			t.Run("LostLeaseKeepsNothing", func(t *testing.T) {
				t.Parallel()
				db := withOrders(t, d.open(t))
				s := migrated(t, db)
				c := claimFor("k", "a", storage.ModePhased)
				c.Lease = 100 * time.Millisecond
				stale := mustLock(t, s, c)
				ctx := stale.Context(t.Context())
				c.Lease = 60 * time.Second
				fresh := takeOver(t, s, c)
				err := stale.Phase(ctx, "charged", func(ctx context.Context) error {
					if err := gormstore.MustDB(ctx).Create(&order{Ref: "stale-phase"}).Error; err != nil {
						return err // SQLite: the transaction's first statement already saw the lost lease
					}
					return nil
				})
				if !errors.Is(err, storage.ErrLeaseLost) {
					t.Fatalf("stale Phase: %v, want ErrLeaseLost", err)
				}
				if err := gormstore.MustDB(ctx).Create(&order{Ref: "stale-final"}).Error; err != nil && !errors.Is(err, storage.ErrLeaseLost) {
					t.Fatalf("stale write: %v", err)
				}
				if err := stale.Complete(t.Context(), created); !errors.Is(err, storage.ErrLeaseLost) {
					t.Fatalf("stale Complete: %v, want ErrLeaseLost", err)
				}
				if n := countOrders(t, db, ""); n != 0 {
					t.Fatalf("%d orders written by the stale worker, want 0", n)
				}
				if err := fresh.Complete(t.Context(), created); err != nil {
					t.Fatalf("fresh Complete: %v", err)
				}
			})
			t.Run("PhasesDoNotNest", func(t *testing.T) {
				t.Parallel()
				s := migrated(t, d.open(t))
				lock := mustLock(t, s, claimFor("k", "a", storage.ModePhased))
				err := lock.Phase(t.Context(), "outer", func(ctx context.Context) error {
					return lock.Phase(ctx, "inner", func(context.Context) error { return nil })
				})
				if err == nil {
					t.Fatal("a phase inside a phase succeeded")
				}
			})
		})
	}
}
