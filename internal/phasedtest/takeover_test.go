package phasedtest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
)

// TestTakeoverRace: worker A commits charge_created and stalls, cut off from the store
// (its lease renewals fail, as in a network partition), until its lease (2s) has run out.
// Two retries, B and C, then race to take the key over: exactly one wins (its handler
// runs, resumed) and the other gets 409 + Retry-After, since the winner's fresh lease is
// live. A then wakes up: its finished phase fails with storage.ErrLeaseLost, A is answered
// 409, and nothing changes: no payment row, the key still at charge_created and leased to
// the winner. The winner completes the payment once, without calling the provider again,
// and later retries replay it.
func TestTakeoverRace(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	fws := map[kind]framework{kindPgx: netHTTP, kindGormPostgres: ginFW, kindGormSQLite: echoFW}
	for _, k := range kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			shared := newBackend(t, k)
			be := *shared
			be.store = partitioned{shared.store} // A's renewals cannot reach it
			account, key := operation()
			stalled, winner := newGate(), newGate()
			a := newApp(&be, lease, func(ctx context.Context, op *core.Operation, at string) error {
				switch {
				case at == atChargeCreated && !op.Resumed():
					return stalled.hold(ctx)
				case at == atStarted && op.Resumed():
					return winner.hold(ctx)
				}
				return nil
			})
			staleErr := make(chan error, 1)
			a.onError = func(op *core.Operation, err error) {
				if !op.Resumed() {
					staleErr <- err
				}
			}
			base := serve(t, a, fws[k])

			doneA := postAsync(base, "/v1/payments", account, key, paymentBody)
			wait(t, stalled.entered, "worker A's charge_created phase")
			be.awaitLeaseEnd(t, account, key) // A's lease, renewed by its phase, runs out

			go1 := make(chan struct{})
			var racers [2]<-chan result
			var ready sync.WaitGroup
			for i := range racers {
				c := make(chan result, 1)
				racers[i] = c
				ready.Add(1)
				go func() {
					ready.Done()
					<-go1
					r, err := post(context.Background(), base, "/v1/payments", account, key, paymentBody)
					c <- result{r, err}
				}()
			}
			ready.Wait()
			close(go1)

			// The loser answers at once; the winner is held in its handler.
			var loser result
			winnerDone := racers[1]
			select {
			case loser = <-racers[0]:
			case loser = <-racers[1]:
				winnerDone = racers[0]
			case <-time.After(waitTimeout):
				t.Fatal("neither racer answered")
			}
			if loser.err != nil {
				t.Fatalf("loser: %v", loser.err)
			}
			if err := checkInProgress(loser.r); err != nil {
				t.Fatalf("loser: %v", err)
			}
			wait(t, winner.entered, "the winner's resumed handler")
			if len(winner.entered) != 0 {
				t.Fatal("both racers took the key over")
			}

			// A's next phase fails: the lease is the winner's. Nothing of it commits.
			stalled.open()
			resA := wait(t, doneA, "worker A's answer")
			if resA.err != nil {
				t.Fatalf("worker A: %v", resA.err)
			}
			if err := wait(t, staleErr, "worker A's error"); !errors.Is(err, storage.ErrLeaseLost) {
				t.Errorf("worker A's finished phase failed with %v, want storage.ErrLeaseLost", err)
			}
			if err := checkInProgress(resA.r); err != nil {
				t.Errorf("worker A: %v", err)
			}
			tl := be.mustCount(t, account, key)
			if tl.Payments != 0 || tl.Outbox != 0 || tl.Recorded != 1 || tl.Charges != 1 || tl.State != string(storage.StateStarted) ||
				tl.Point != atChargeCreated || !tl.Leased {
				t.Fatalf("after the stale worker's phase: %v; want its payment rolled back, the key at charge_created, leased to the winner", tl)
			}

			winner.open()
			resW := wait(t, winnerDone, "the winner's answer")
			if resW.err != nil {
				t.Fatalf("winner: %v", resW.err)
			}
			tl = be.mustCount(t, account, key)
			if err := checkDone(tl, resW.r); err != nil {
				t.Fatalf("winner: %v", err)
			}
			if tl.Calls != 1 {
				t.Errorf("provider calls %d, want 1: the winner resumed after charge_created", tl.Calls)
			}
			if err := checkReplay(resW.r, mustPost(t, base, "/v1/payments", account, key, paymentBody)); err != nil {
				t.Error(err)
			}
			if len(winner.entered) != 0 {
				t.Error("a handler ran again after the winner completed")
			}
		})
	}
}

// partitioned is a store whose fresh claims' locks cannot renew their lease: their Renew
// fails as a network partition would (not ErrLeaseLost), while everything else, takeovers'
// renewals included, goes through. It stands for a worker cut off from the store.
type partitioned struct{ storage.Store }

func (p partitioned) Claim(ctx context.Context, c storage.Claim) (storage.Claimed, error) {
	claimed, err := p.Store.Claim(ctx, c)
	lock, rec := claimed.Lock, claimed.Record
	if lock != nil && !lock.Resumed() {
		lock = cutOff{lock}
	}
	return storage.Claimed{Verdict: claimed.Verdict, Lock: lock, Record: rec}, err
}

type cutOff struct{ storage.Lock }

func (cutOff) Renew(context.Context) error {
	return errors.New("phasedtest: the worker is cut off from the store")
}
