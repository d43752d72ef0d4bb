package phasedtest

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
)

// TestRouteOptIn: on net/http, Gin and Echo a route opts in to phased mode by mounting a
// middleware instance of its own with core.ModePhased, beside a route that keeps the
// atomic default, on one router and one store. While the handlers run (held at a gate),
// another connection sees the phased route's claim committed (started, leased) and sees
// nothing of the atomic route's claim or row; once they finish, both are committed.
func TestRouteOptIn(t *testing.T) {
	t.Parallel()
	for _, k := range kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			be := newBackend(t, k)
			// A gate per request, keyed by idempotency key, made before anything is served.
			type pair struct{ payAccount, payKey, orderAccount, orderKey string }
			ops := map[framework]pair{}
			gates := map[string]*gate{}
			for _, fw := range frameworks {
				var p pair
				p.payAccount, p.payKey = operation()
				p.orderAccount, p.orderKey = operation()
				ops[fw] = p
				gates[p.payKey], gates[p.orderKey] = newGate(), newGate()
			}
			a := newApp(be, time.Minute, func(ctx context.Context, op *core.Operation, at string) error {
				if at == atStarted || at == atOrderWritten {
					return gates[op.Key()].hold(ctx)
				}
				return nil
			})
			// One framework after the other: on SQLite the atomic request holds the write
			// lock while its handler is held.
			for _, fw := range frameworks {
				t.Run(string(fw), func(t *testing.T) {
					base := serve(t, a, fw)
					ctx := context.Background()
					p := ops[fw]
					payGate, orderGate := gates[p.payKey], gates[p.orderKey]

					// Phased: the claim is committed before the handler runs.
					account, key := p.payAccount, p.payKey
					done := postAsync(base, "/v1/payments", account, key, paymentBody)
					wait(t, payGate.entered, "the payment handler")
					tl, err := be.count(ctx, account, key)
					if err != nil {
						t.Fatal(err)
					}
					if tl.State != string(storage.StateStarted) || tl.Point != storage.RecoveryStarted || !tl.Leased {
						t.Errorf("while the phased handler runs, another connection sees key %q at %q (leased %v); want started, leased",
							tl.State, tl.Point, tl.Leased)
					}
					payGate.open()
					res := wait(t, done, "the payment response")
					if res.err != nil {
						t.Fatalf("payment: %v", res.err)
					}
					if err := checkDone(be.mustCount(t, account, key), res.r); err != nil {
						t.Errorf("payment: %v", err)
					}

					// Atomic: nothing is visible until the request's transaction commits.
					account, key = p.orderAccount, p.orderKey
					done = postAsync(base, "/v1/orders", account, key, `{"amount_cents": 300}`)
					wait(t, orderGate.entered, "the order handler")
					orders, keys, err := be.orders(ctx, account)
					if err != nil {
						t.Fatal(err)
					}
					if orders != 0 || keys != 0 {
						t.Errorf("while the atomic handler runs, another connection sees %d orders and %d keys; want none", orders, keys)
					}
					orderGate.open()
					res = wait(t, done, "the order response")
					if res.err != nil {
						t.Fatalf("order: %v", res.err)
					}
					if res.r.Status != http.StatusCreated || res.r.replayed() {
						t.Fatalf("order: %v, want an original 201", res.r)
					}
					if orders, keys, err = be.orders(ctx, account); err != nil || orders != 1 || keys != 1 {
						t.Errorf("after the atomic request: %d orders, %d keys (%v); want 1 and 1", orders, keys, err)
					}
					if err := checkReplay(res.r, mustPost(t, base, "/v1/orders", account, key, `{"amount_cents": 300}`)); err != nil {
						t.Errorf("order: %v", err)
					}
				})
			}
		})
	}
}
