package phasedtest

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
)

// failure is a failure injected once into one operation's first attempt.
type failure struct {
	at      string // the hook point
	panics  bool   // panic instead of returning an error
	fired   atomic.Bool
	resumed atomic.Bool // the attempt after the failure took over (op.Resumed)
}

// failureHook returns the hook that fires each operation's failure, by key.
func failureHook(failures map[string]*failure) hook {
	return func(_ context.Context, op *core.Operation, at string) error {
		f := failures[op.Key()]
		if f == nil {
			return nil
		}
		if at == atStarted && f.fired.Load() && op.Resumed() {
			f.resumed.Store(true)
		}
		if at != f.at || !f.fired.CompareAndSwap(false, true) {
			return nil
		}
		if f.panics {
			panic(fmt.Sprintf("injected panic at %s", at))
		}
		return fmt.Errorf("%w at %s", errInjected, at)
	}
}

// TestResumeFromEachRecoveryPoint injects a failure into a payment's first attempt at
// each point (right after the claim, inside charge_created after the provider call and
// after its write, and right after each phase committed), as a returned error (the handler answers 500) and as
// a panic (the framework's recovery answers 500), on each store and framework. The
// failed attempt gives its lease up at once: the retry, sent immediately with a lease of
// a minute, completes the payment exactly once (one provider charge, one payment, an
// original 201 naming them), taking over and skipping the phases that committed, or
// starting afresh when none had. Later retries replay the 201 byte for byte.
func TestResumeFromEachRecoveryPoint(t *testing.T) {
	t.Parallel()
	points := []string{atStarted, atProviderCalled, atChargeRecorded, atChargeCreated, atFinished}
	for _, k := range kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			be := newBackend(t, k)
			type tc struct {
				name            string
				fw              framework
				f               *failure
				account, key    string
				wantAfterFailed tally // what the failed attempt leaves (State, Point, Leased, counts)
				wantCalls       int   // provider calls in all
			}
			var cases []*tc
			failures := map[string]*failure{}
			for _, fw := range frameworks {
				for _, at := range points {
					for _, panics := range []bool{false, true} {
						c := &tc{fw: fw, f: &failure{at: at, panics: panics}, wantCalls: 1}
						c.account, c.key = operation()
						how := "error"
						if panics {
							how = "panic"
						}
						c.name = fmt.Sprintf("%s/%s/%s", fw, at, how)
						switch at {
						case atStarted: // nothing committed but the claim: the key is deleted
						case atProviderCalled, atChargeRecorded: // the provider charged; the phase rolled back, the key is deleted
							c.wantAfterFailed = tally{Charges: 1}
							c.wantCalls = 2 // the retry calls again, with the same derived key
						case atChargeCreated:
							c.wantAfterFailed = tally{Charges: 1, Recorded: 1, State: string(storage.StateStarted), Point: atChargeCreated}
						case atFinished:
							c.wantAfterFailed = tally{Charges: 1, Recorded: 1, Payments: 1, Outbox: 1, State: string(storage.StateStarted), Point: atFinished}
						}
						cases = append(cases, c)
						failures[c.key] = c.f
					}
				}
			}
			a := newApp(be, time.Minute, failureHook(failures))
			bases := map[framework]string{}
			for _, fw := range frameworks {
				bases[fw] = serve(t, a, fw)
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					if c.f.at == atChargeRecorded && c.f.panics {
					}
					base := bases[c.fw]
					r := mustPost(t, base, "/v1/payments", c.account, c.key, paymentBody)
					if r.Status != http.StatusInternalServerError || !c.f.fired.Load() {
						t.Fatalf("failed attempt: %v (failure fired: %v), want 500", r, c.f.fired.Load())
					}
					got := be.mustCount(t, c.account, c.key)
					want := c.wantAfterFailed
					if got.Charges != want.Charges || got.Recorded != want.Recorded || got.Payments != want.Payments || got.Outbox != want.Outbox ||
						got.State != want.State || got.Point != want.Point || got.Leased {
						t.Fatalf("after the failed attempt: %v; want %v, lease given up", got, want)
					}

					first := mustPost(t, base, "/v1/payments", c.account, c.key, paymentBody)
					done := be.mustCount(t, c.account, c.key)
					if err := checkDone(done, first); err != nil {
						t.Fatalf("retry: %v", err)
					}
					if done.Calls != c.wantCalls {
						t.Errorf("the provider was called %d times, want %d", done.Calls, c.wantCalls)
					}
					if wantResumed := want.State != ""; c.f.resumed.Load() != wantResumed {
						t.Errorf("the retry resumed (took over) = %v, want %v", c.f.resumed.Load(), wantResumed)
					}
					for range 2 {
						if err := checkReplay(first, mustPost(t, base, "/v1/payments", c.account, c.key, paymentBody)); err != nil {
							t.Error(err)
						}
					}
					if after := be.mustCount(t, c.account, c.key); after != done {
						t.Errorf("the replays changed the rows: %v, then %v", done, after)
					}
				})
			}
		})
	}
}
