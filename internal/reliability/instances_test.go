package reliability_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgxstore"
)

// TestTwoInstancesRaceSameKeys: two application instances, each with its own engine,
// store and pool (as two processes would have), on one PostgreSQL, get 50 keys × 10
// requests split between them, all released at once. Every key runs its handler exactly
// once and has one order; every 2xx for a key is the same response; a 409 or 503, retried,
// ends in that response. At READ COMMITTED and at REPEATABLE READ.
//
// The first run of a key's handler keeps the key until a twin waits for it (the database
// shows a backend blocked by the holder's) or, with the short lock wait, until a twin has
// given up (409): twins overlap because the holder waits for them, not because of a
// pause. At most holdsPerInstance holders wait at once on an instance, so its pool always
// has connections for the twins (holders waiting on every connection would wait for
// twins that cannot reach the database).
func TestTwoInstancesRaceSameKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		iso      pgx.TxIsoLevel
		lockWait time.Duration // twins' wait before 409; 0: the default
	}{
		{"read committed", pgx.ReadCommitted, 0},
		{"repeatable read", pgx.RepeatableRead, 0},
		// Twins give up before the holder finishes: 409s, retried until the replay.
		{"read committed, short lock wait", pgx.ReadCommitted, 10 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const keys, per = 50, 10
			const poolSize, holdsPerInstance = 8, 4
			d := newDB(t)
			gaveUp := map[string]*signal{} // a twin of the key got 409; read-only once built
			for k := range keys {
				gaveUp[fmt.Sprintf("race-%02d", k)] = newSignal()
			}
			// A handler whose outcome was rolled back (its completion timed out on a loaded
			// machine, say) may run again on a retry: its order rolled back with it. Every
			// run beyond one per key must be such a release.
			var released atomic.Int64
			observe := core.HookFunc(func(_ context.Context, ev core.Event) {
				switch ev.Outcome {
				case core.OutcomeRolledBack:
					released.Add(1)
				case core.OutcomeConflict:
					if s, ok := gaveUp[ev.Key]; ok {
						s.fire()
					}
				}
			})
			var heldOnce sync.Map // keys whose first run has come
			var held atomic.Int64 // keys whose holder saw a twin wait for it
			hold := func(holds chan struct{}) func(r *http.Request) int {
				return func(r *http.Request) int {
					ctx := r.Context()
					key := core.MustOperation(ctx).Key()
					if _, again := heldOnce.LoadOrStore(key, true); again {
						return 0 // a run after a release: its twins may be done
					}
					select {
					case holds <- struct{}{}:
						defer func() { <-holds }()
					default:
						return 0 // holdsPerInstance holders wait already
					}
					ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
					defer cancel()
					var err error
					if tc.lockWait > 0 {
						err = gaveUp[key].wait(ctx)
					} else {
						var pid int32
						if err = pgxstore.MustTx(ctx).QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err == nil {
							err = testdb.AwaitBlockedBy(ctx, pid, 1)
						}
					}
					if err != nil {
						t.Errorf("%s: no twin came to wait for the holder: %v", key, err)
						return 0
					}
					held.Add(1)
					return 0
				}
			}
			instances := [2]*instance{}
			for i := range instances {
				instances[i] = newInstance(t, d, instanceConfig{direct: true, iso: tc.iso, poolSize: poolSize,
					cfg: core.Config{LockWait: tc.lockWait, Hooks: observe}})
				instances[i].setHooks(hooks{afterWrite: hold(make(chan struct{}, holdsPerInstance))})
			}

			var mu sync.Mutex
			firstStatuses := map[int]int{}
			replies := make([][]reply, keys)
			for k := range replies {
				replies[k] = make([]reply, per)
			}
			start := make(chan struct{})
			var wg sync.WaitGroup
			for k := range keys {
				for j := range per {
					wg.Add(1)
					go func() {
						defer wg.Done()
						in := instances[(k+j)%2]
						key := fmt.Sprintf("race-%02d", k)
						<-start
						r := in.post("acct", key, "", jsonBody(k))
						mu.Lock()
						firstStatuses[r.status]++
						mu.Unlock()
						if r.err == nil && (r.status == http.StatusConflict || r.status >= 500) {
							rs := in.retryUntilDone("acct", key, "", jsonBody(k), 50)
							r = rs[len(rs)-1]
						}
						replies[k][j] = r
					}()
				}
			}
			close(start)
			wg.Wait()

			statuses := map[int]int{}
			for k := range keys {
				key := fmt.Sprintf("race-%02d", k)
				var first *reply
				for j := range per {
					r := &replies[k][j]
					statuses[r.status]++
					if r.err != nil || r.status != http.StatusCreated {
						t.Errorf("%s request %d: %v", key, j, *r)
						continue
					}
					if first == nil {
						first = r
					} else if !sameBody(*r, *first) {
						t.Errorf("%s: two different 201s: %s / %s", key, first.body, r.body)
					}
				}
				if n := d.orders("acct", key); n != 1 {
					t.Errorf("%s: %d orders, want 1", key, n)
				}
			}
			runs := instances[0].calls.Load() + instances[1].calls.Load()
			t.Logf("%d keys × %d requests over 2 instances: first answers %v, after retries %v; handler runs %d + %d, %d rolled back",
				keys, per, firstStatuses, statuses, instances[0].calls.Load(), instances[1].calls.Load(), released.Load())
			if runs != keys+released.Load() {
				t.Fatalf("handlers ran %d times for %d keys with %d rolled back: a run that committed twice", runs, keys, released.Load())
			}
			if instances[0].calls.Load() == 0 || instances[1].calls.Load() == 0 {
				t.Fatalf("one instance never won a key: the race did not span both")
			}
			t.Logf("%d keys held until a twin waited for them", held.Load())
			if held.Load() == 0 {
				t.Fatal("no key's twin ever waited for its holder: the race never overlapped")
			}
		})
	}
}
