package phasedtest

import (
	"context"
	"testing"
	"time"
)

// TestPanicInsidePhaseEndsItsTransaction: a handler that panics inside a phase, after
// writing in the phase's transaction, leaves no transaction behind: the store's
// connections all come back to its pool, no session holds a lock on the test's tables,
// and the retry completes the payment once. Each store runs on pools of its own, so
// their connections can be counted.
func TestPanicInsidePhaseEndsItsTransaction(t *testing.T) {
	t.Parallel()
	for _, k := range kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			p := sharedPools(t) // the provider's pool (aux)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var leaked func() bool // reports (and cleans up after) a leak, for the pool's cleanup
			switch k {
			case kindPgx:
				pool, err := openPool(ctx, 2)
				if err != nil {
					t.Fatalf("PostgreSQL: %v; %s", err, startPostgres)
				}
				// pgxpool's Close waits for every acquired connection: after a leak it would
				// never return, so the pool is then abandoned (its sessions terminated).
				t.Cleanup(func() {
					if !leaked() {
						pool.Close()
					}
				})
				p.store = pool
			case kindGormPostgres:
				db, err := openGormPG(2)
				if err != nil {
					t.Fatalf("PostgreSQL through GORM: %v; %s", err, startPostgres)
				}
				t.Cleanup(func() {
					if sqlDB, err := db.DB(); err == nil {
						_ = sqlDB.Close()
					}
				})
				p.gormPG = db
			}
			be := newBackendOn(t, k, p)
			leaked = func() bool { return be.inUse() > 0 }

			account, key := operation()
			f := &failure{at: atChargeRecorded, panics: true}
			a := newApp(be, time.Minute, failureHook(map[string]*failure{key: f}))
			base := serve(t, a, netHTTP)

			if r := mustPost(t, base, "/v1/payments", account, key, paymentBody); r.Status != 500 || !f.fired.Load() {
				t.Fatalf("the attempt that panics: %v, want 500", r)
			}
			deadline := time.Now().Add(3 * time.Second)
			for be.inUse() > 0 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond) // polling the pool
			}
			if n := be.inUse(); n > 0 {
				t.Errorf("%d of the store's connections still in use after the request ended: the phase's transaction was never ended", n)
			}
			if k != kindGormSQLite {
				requireNoLockHolders(t, be.spec.Schema)
			}

			first := mustPost(t, base, "/v1/payments", account, key, paymentBody)
			tl := be.mustCount(t, account, key)
			if err := checkDone(tl, first); err != nil {
				t.Fatalf("retry: %v", err)
			}
			if tl.Calls != 2 {
				t.Errorf("provider calls %d, want 2 (the phase that panicked did not commit; the retry called again with the same key)", tl.Calls)
			}
		})
	}
}
