package phasedtest

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/core"
)

// TestParallelDuplicates sends 20 copies of one payment at once, on each store (each
// framework with each LeaseWait across the stores), while the first attempt's handler
// takes 300ms. Exactly one handler runs: one
// provider charge, one payment, one original 201. Every other copy gets a replay of that
// 201 or a 409 + Retry-After; with LeaseWait longer than the handler, every copy waits
// for the lease and gets the replay.
func TestParallelDuplicates(t *testing.T) {
	t.Parallel()
	const copies = 20
	for ki, k := range kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			be := newBackend(t, k)
			for wi, leaseWait := range []time.Duration{0, 10 * time.Second} {
				var mu sync.Mutex
				runs := map[string]int{} // handler runs by key
				a := newApp(be, time.Minute, func(_ context.Context, op *core.Operation, at string) error {
					if at == atStarted {
						mu.Lock()
						runs[op.Key()]++
						mu.Unlock()
						time.Sleep(300 * time.Millisecond)
					}
					return nil
				})
				a.leaseWait = leaseWait
				fw := frameworks[(ki+wi)%len(frameworks)]
				t.Run(fmt.Sprintf("%s/LeaseWait=%v", fw, leaseWait), func(t *testing.T) {
					base := serve(t, a, fw)
					account, key := operation()
					start := make(chan struct{})
					results := make([]result, copies)
					var wg sync.WaitGroup
					for i := range copies {
						wg.Add(1)
						go func() {
							defer wg.Done()
							<-start
							results[i].r, results[i].err = post(context.Background(), base, "/v1/payments", account, key, paymentBody)
						}()
					}
					close(start)
					wg.Wait()

					var first *reply
					var replays, conflicts []*reply
					for _, res := range results {
						switch {
						case res.err != nil:
							t.Fatalf("a copy got no response: %v", res.err)
						case res.r.Status == http.StatusCreated && !res.r.replayed():
							if first != nil {
								t.Fatalf("two original 201s: %v and %v", first, res.r)
							}
							first = res.r
						case res.r.Status == http.StatusCreated:
							replays = append(replays, res.r)
						default:
							if err := checkInProgress(res.r); err != nil {
								t.Errorf("a copy got %v", err)
							}
							conflicts = append(conflicts, res.r)
						}
					}
					if first == nil {
						t.Fatalf("no original 201 among %d replays and %d conflicts", len(replays), len(conflicts))
					}
					for _, r := range replays {
						if err := checkReplay(first, r); err != nil {
							t.Error(err)
						}
					}
					if leaseWait > 0 && len(conflicts) > 0 {
						t.Errorf("%d copies got 409 although LeaseWait (%v) outlasts the handler", len(conflicts), leaseWait)
					}
					tl := be.mustCount(t, account, key)
					if err := checkDone(tl, first); err != nil {
						t.Error(err)
					}
					mu.Lock()
					n := runs[key]
					mu.Unlock()
					if n != 1 || tl.Calls != 1 {
						t.Errorf("the handler ran %d times and called the provider %d times, want once", n, tl.Calls)
					}
					t.Logf("1 original, %d replays, %d conflicts", len(replays), len(conflicts))
				})
			}
		})
	}
}
