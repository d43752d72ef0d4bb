package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/internal/httpfault"
)

// The size of TestClientThroughFaults: logical requests sent at once, half orders, half
// payments, and the payments sent twice at once (a double click).
const (
	faultRequests = 36
	faultTwins    = 6
	faultDelay    = 50 * time.Millisecond
)

// faultPlans are the proxy's faults for a key's first sends, in turn (then it forwards),
// one plan per logical request by its index. A Delay forwards: the plan ends with it.
var faultPlans = [][]httpfault.Fault{
	{},
	{httpfault.ResetBefore},
	{httpfault.DropAnswer},
	{httpfault.Delay},
	{httpfault.ResetBefore, httpfault.DropAnswer},
	{httpfault.ResetBefore, httpfault.DropAnswer, httpfault.ResetBefore, httpfault.Delay},
}

// drops reports whether plan drops an answer the server sent: then the logical request's
// final answer must be the replay.
func drops(plan []httpfault.Fault) bool { return slices.Contains(plan, httpfault.DropAnswer) }

// sends is how many sends of a key reach the proxy under plan: its faults up to the
// first that forwards, then a forward if none did.
func sends(plan []httpfault.Fault) int {
	for i, f := range plan {
		if f == httpfault.Forward || f == httpfault.Delay {
			return i + 1
		}
	}
	return len(plan) + 1
}

// clientCall is one call of a logical request through idemclient and what it got.
type clientCall struct {
	path, key, body string
	plan            []httpfault.Fault
	status          int
	header          http.Header
	answer          []byte
	res             idemclient.Result
	err             error
}

// TestClientThroughFaults runs idemclient.Transport against the example servers behind a
// loopback proxy that resets connections before forwarding, drops the server's answer
// after it arrived, and delays requests, with many logical requests (orders and
// payments, some payments double-clicked) in parallel. Every one must end with a 201;
// each must have made exactly one order, or one payment with one provider charge; each
// whose answer was dropped must end with the replay (Idempotent-Replayed: true), each
// whose answers were not dropped with the original; and of a double click, exactly one
// call gets the original.
func TestClientThroughFaults(t *testing.T) {
	for _, c := range []struct {
		app string
		st  storage
	}{{"gin-orders", sqlite}, {"echo-orders", postgresPgx}} {
		t.Run(c.app+"/"+c.st.name, func(t *testing.T) {
			t.Parallel()
			dir, env := c.st.setup(t)
			s := start(t, c.app, dir, env)
			account := newAccount()

			var calls []*clientCall
			plans := map[string][]httpfault.Fault{}
			for i := range faultRequests {
				call := &clientCall{key: newKey(), plan: faultPlans[i%len(faultPlans)], path: "/v1/orders",
					body: fmt.Sprintf(`{"item":"client %d","quantity":1}`, i)}
				if i%2 == 1 {
					call.path, call.body = "/v1/payments", fmt.Sprintf(`{"amount_cents":%d,"currency":"EUR"}`, 1000+i)
				}
				plans[call.key] = call.plan
				calls = append(calls, call)
			}
			for i := range faultTwins { // a payment sent twice at once, no fault planned
				first := &clientCall{key: newKey(), path: "/v1/payments", body: fmt.Sprintf(`{"amount_cents":%d,"currency":"EUR"}`, 5000+i)}
				twin := *first
				calls = append(calls, first, &twin)
			}

			p, err := httpfault.Start(s.url, faultDelay, func(r *http.Request, seen int) httpfault.Fault {
				plan := plans[r.Header.Get("Idempotency-Key")]
				if seen < len(plan) {
					return plan[seen]
				}
				return httpfault.Forward
			})
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, p.Close()) })

			var mu sync.Mutex
			var retries []idemclient.RetryInfo
			base := &http.Transport{MaxIdleConnsPerHost: faultRequests}
			t.Cleanup(base.CloseIdleConnections)
			client := &http.Client{Transport: &idemclient.Transport{
				Base:           base,
				MaxAttempts:    10,
				MaxElapsed:     time.Minute,
				InitialBackoff: 20 * time.Millisecond,
				MaxBackoff:     time.Second,
				OnRetry: func(i idemclient.RetryInfo) {
					mu.Lock()
					retries = append(retries, i)
					mu.Unlock()
				},
			}}

			var wg sync.WaitGroup
			for _, call := range calls {
				wg.Go(func() { call.send(t.Context(), client, p.URL(), account) })
			}
			wg.Wait()

			for _, call := range calls {
				require.NoError(t, call.err, "%s %s", call.path, call.key)
				require.Equal(t, http.StatusCreated, call.status, "%s %s: %s", call.path, call.key, call.answer)
				assert.Equal(t, call.key, call.res.Key, "the key WithKey gave")
				assert.Equal(t, call.header.Get("Idempotent-Replayed") == "true", call.res.Replayed)
				assert.GreaterOrEqual(t, p.Seen(call.key), sends(call.plan), "%s: every planned fault was met", call.key)
				if call.plan != nil {
					assert.Equal(t, drops(call.plan), call.res.Replayed, "%s %s (plan %v): replayed", call.path, call.key, call.plan)
				}
			}
			for _, f := range []httpfault.Fault{httpfault.ResetBefore, httpfault.DropAnswer, httpfault.Delay, httpfault.Forward} {
				assert.Positive(t, p.Count(f), "the proxy applied %v", f)
			}

			// Exactly one business row per logical request, the one its answer names.
			orders := map[string][]killRow{} // item → orders
			for _, raw := range list(t, s.get(t, "/v1/orders", account), "orders") {
				o := decodeRow(t, raw)
				orders[o.Item] = append(orders[o.Item], o)
			}
			charges := map[string][]killRow{} // derived key → provider charges
			for _, raw := range list(t, s.get(t, "/v1/provider/charges", account), "charges") {
				ch := decodeRow(t, raw)
				charges[ch.IdempotencyKey] = append(charges[ch.IdempotencyKey], ch)
			}
			payments := map[string][]killRow{} // charge id → payments
			for _, raw := range list(t, s.get(t, "/v1/payments", account), "payments") {
				pm := decodeRow(t, raw)
				payments[pm.ChargeID] = append(payments[pm.ChargeID], pm)
			}
			originals := map[string]int{} // key → 201s that were not replays
			for _, call := range calls {
				if !call.res.Replayed {
					originals[call.key]++
				}
				if call.path == "/v1/orders" {
					item := str(t, []byte(call.body), "item")
					require.Len(t, orders[item], 1, "orders for %s", item)
					assert.Equal(t, orders[item][0].ID, str(t, call.answer, "id"))
					continue
				}
				chs := charges[call.key+":charge"]
				require.Len(t, chs, 1, "provider charges for %s", call.key)
				require.Len(t, payments[chs[0].ID], 1, "payments for %s", call.key)
				assert.Equal(t, payments[chs[0].ID][0].ID, str(t, call.answer, "id"))
			}
			assert.Len(t, orders, faultRequests/2, "no order belongs to no logical request")
			assert.Len(t, charges, faultRequests/2+faultTwins)
			assert.Len(t, payments, faultRequests/2+faultTwins)
			for _, call := range calls {
				// The one original answer is lost when the proxy dropped it.
				want := 1
				if drops(call.plan) {
					want = 0
				}
				assert.Equal(t, want, originals[call.key], "%s (plan %v): original answers seen", call.key, call.plan)
			}

			// A server's Retry-After (idem's in-progress, a busy database) was waited as sent.
			mu.Lock()
			defer mu.Unlock()
			byStatus := map[int]int{} // retries after each status, 0 for a transport error
			for _, r := range retries {
				byStatus[r.Status]++
				if r.Status == http.StatusConflict || r.Status == http.StatusServiceUnavailable {
					assert.True(t, r.RetryAfter, "%d without Retry-After", r.Status)
					assert.Equal(t, time.Second, r.Wait, "the server's Retry-After")
				}
			}
			t.Logf("%d calls, retries by idemclient after %v (status: count); proxy: %d forwarded, %d reset, %d answers dropped, %d delayed",
				len(calls), byStatus, p.Count(httpfault.Forward), p.Count(httpfault.ResetBefore),
				p.Count(httpfault.DropAnswer), p.Count(httpfault.Delay))
		})
	}
}

// send makes the call through client to the proxy at url as account, with its key.
func (c *clientCall) send(ctx context.Context, client *http.Client, url, account string) {
	ctx, cancel := context.WithTimeout(idemclient.WithResult(idemclient.WithKey(ctx, c.key), &c.res), 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+c.path, strings.NewReader(c.body))
	if err != nil {
		c.err = err
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Account-ID", account)
	resp, err := client.Do(req)
	if err != nil {
		c.err = err
		return
	}
	defer resp.Body.Close()
	c.status, c.header = resp.StatusCode, resp.Header
	c.answer, c.err = io.ReadAll(resp.Body)
}
