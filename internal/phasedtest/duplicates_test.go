package phasedtest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
)

// TestParallelDuplicates sends 20 copies of one payment at once, on each store (each
// framework with each LeaseWait across the stores), while the first attempt's handler
// holds until every other copy has found its lease live. Exactly one handler runs: one
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
				watched := *be
				leases := watchLeases(be.store, copies)
				watched.store = leases
				a := newApp(&watched, time.Minute, func(ctx context.Context, op *core.Operation, at string) error {
					if at != atStarted {
						return nil
					}
					mu.Lock()
					runs[op.Key()]++
					mu.Unlock()
					for n := range copies - 1 { // the others found the lease live: answered 409, or waiting
						select {
						case <-leases.found:
						case <-ctx.Done():
							return context.Cause(ctx)
						case <-time.After(waitTimeout):
							t.Errorf("only %d of the %d other copies found the lease live within %v", n, copies-1, waitTimeout)
							return errInjected
						}
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
					if leaseWait == 0 && len(conflicts) != copies-1 {
						t.Errorf("%d copies got 409, want all %d: each found the lease live, and LeaseWait is 0", len(conflicts), copies-1)
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

// leaseWatch is a store that tells when a request finds a key held by another: a claim
// that reports the key started, or in progress (SQLite's write lock ran out).
type leaseWatch struct {
	storage.Store
	mu   sync.Mutex
	seen map[context.Context]bool // the requests that found a key held; a request's claims (LeaseWait's polls) share its context
	// found receives once for each request that finds a key held.
	found chan struct{}
}

// watchLeases wraps s for a test of up to n requests.
func watchLeases(s storage.Store, n int) *leaseWatch {
	return &leaseWatch{Store: s, seen: map[context.Context]bool{}, found: make(chan struct{}, n)}
}

func (w *leaseWatch) Claim(ctx context.Context, c storage.Claim) (storage.Claimed, error) {
	claimed, err := w.Store.Claim(ctx, c)
	lock, rec := claimed.Lock, claimed.Record
	if (err == nil && rec != nil && rec.State == storage.StateStarted) || errors.Is(err, storage.ErrInProgress) {
		w.mu.Lock()
		first := !w.seen[ctx]
		w.seen[ctx] = true
		w.mu.Unlock()
		if first {
			select {
			case w.found <- struct{}{}:
			default:
			}
		}
	}
	return storage.Claimed{Verdict: claimed.Verdict, Lock: lock, Record: rec}, err
}
