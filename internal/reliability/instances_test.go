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
)

// TestTwoInstancesRaceSameKeys: two application instances, each with its own engine,
// store and pool (as two processes would have), on one PostgreSQL, get 50 keys × 10
// requests split between them, all released at once. Every key runs its handler exactly
// once and has one order; every 2xx for a key is the same response; a 409 or 503, retried,
// ends in that response. At READ COMMITTED and at REPEATABLE READ.
func TestTwoInstancesRaceSameKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		iso      pgx.TxIsoLevel
		lockWait time.Duration // twins' wait before 409
		hold     time.Duration // how long a handler holds its key
	}{
		{"read committed", pgx.ReadCommitted, 0, 2 * time.Millisecond},
		{"repeatable read", pgx.RepeatableRead, 0, 2 * time.Millisecond},
		// Twins give up before the holder finishes: 409s, retried until the replay.
		{"read committed, short lock wait", pgx.ReadCommitted, 10 * time.Millisecond, 40 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const keys, per = 50, 10
			d := newDB(t)
			slow := func(*http.Request) int { time.Sleep(tc.hold); return 0 } // so twins overlap
			// A handler whose outcome was rolled back (its completion timed out on a loaded
			// machine, say) may run again on a retry: its order rolled back with it. Every
			// run beyond one per key must be such a release.
			var released atomic.Int64
			countReleases := core.HookFunc(func(_ context.Context, ev core.Event) {
				if ev.Outcome == core.OutcomeRolledBack {
					released.Add(1)
				}
			})
			instances := [2]*instance{}
			for i := range instances {
				instances[i] = newInstance(t, d, instanceConfig{direct: true, iso: tc.iso, poolSize: 8,
					cfg: core.Config{LockWait: tc.lockWait, Hooks: countReleases}})
				instances[i].setHooks(hooks{afterWrite: slow})
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
		})
	}
}
