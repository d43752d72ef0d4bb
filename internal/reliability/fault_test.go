package reliability_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/core"
)

// cut is one moment at which a trial breaks the network between the store and
// PostgreSQL, and what the first client may get.
type cut struct {
	name string
	// arm prepares the cut for key; the returned function reports, after the first
	// reply, whether the cut happened.
	arm func(in *instance, key string) (fired func() bool)
	// first checks the first reply (the proxy is down or the connections are gone).
	first func(t *testing.T, in *instance, r reply, callsBefore int64)
}

// cuts are the moments of issue 9, in the order a request meets them.
var cuts = []cut{
	{
		name: "during the claim",
		arm: func(in *instance, key string) func() bool {
			p := in.tracer.arm(key, claimBatch, false, in.proxy.Down)
			return p.fired
		},
		first: func(t *testing.T, in *instance, r reply, before int64) {
			mustProblem(t, r, http.StatusServiceUnavailable, core.ProblemStoreUnavailable, true)
			if in.calls.Load() != before {
				t.Fatalf("the handler ran although the claim failed")
			}
		},
	},
	{
		name: "after the claim",
		arm: func(in *instance, key string) func() bool {
			done := make(chan struct{})
			in.setHooks(hooks{afterClaim: func(r *http.Request) {
				if core.OperationFrom(r.Context()).Key() == key {
					in.proxy.Down()
					close(done)
				}
			}})
			return closed(done)
		},
		first: func(t *testing.T, _ *instance, r reply, _ int64) {
			// The handler's INSERT fails on the cut connection: it answers 500 itself,
			// which is not stored, and the engine rolls back.
			if r.err != nil || r.status != http.StatusInternalServerError {
				t.Fatalf("got %v, want the handler's 500", r)
			}
		},
	},
	{
		name: "after the business write",
		arm: func(in *instance, key string) func() bool {
			done := make(chan struct{})
			in.setHooks(hooks{afterWrite: func(r *http.Request) int {
				if core.OperationFrom(r.Context()).Key() == key {
					in.proxy.Down()
					close(done)
				}
				return 0
			}})
			return closed(done)
		},
		first: notRecorded,
	},
	{
		name: "before COMMIT",
		arm: func(in *instance, key string) func() bool {
			return in.tracer.arm(key, completeBatch, false, in.proxy.Down).fired
		},
		first: notRecorded,
	},
	{
		// The server commits; its answer never reaches the client.
		name: "during COMMIT (acknowledgement lost)",
		arm: func(in *instance, key string) func() bool {
			fired := make(chan (<-chan struct{}), 1)
			p := in.tracer.arm(key, completeBatch, false, func() { fired <- in.proxy.CutOnCommandComplete("COMMIT") })
			return func() bool {
				if !p.fired() {
					return false
				}
				select {
				case <-<-fired:
					in.proxy.Down() // keep it down until the retry, as for the other cuts
					return true
				case <-time.After(10 * time.Second):
					return false
				}
			}
		},
		first: notRecorded,
	},
	{
		// The cut lands anywhere from before the batch is sent to after COMMIT is answered.
		name: "during COMMIT (random instant)",
		arm: func(in *instance, key string) func() bool {
			done := make(chan struct{})
			p := in.tracer.arm(key, completeBatch, false, func() {
				time.AfterFunc(time.Duration(rand.IntN(1500))*time.Microsecond, func() {
					in.proxy.Down()
					close(done)
				})
			})
			return func() bool {
				if !p.fired() {
					return false
				}
				select {
				case <-done:
					return true
				case <-time.After(10 * time.Second):
					return false
				}
			}
		},
		first: func(t *testing.T, _ *instance, r reply, _ int64) {
			if r.err != nil || (r.status != http.StatusCreated && r.status != http.StatusServiceUnavailable) {
				t.Fatalf("got %v, want 201 or 503", r)
			}
			if r.status == http.StatusServiceUnavailable {
				notRecorded(t, nil, r, 0)
			}
		},
	},
	{
		name: "after COMMIT",
		arm: func(in *instance, key string) func() bool {
			return in.tracer.arm(key, completeBatch, true, in.proxy.Down).fired
		},
		first: func(t *testing.T, _ *instance, r reply, _ int64) {
			if r.err != nil || r.status != http.StatusCreated || r.replayed() {
				t.Fatalf("got %v, want the original 201", r)
			}
		},
	},
}

func notRecorded(t *testing.T, _ *instance, r reply, _ int64) {
	t.Helper()
	mustProblem(t, r, http.StatusServiceUnavailable, core.ProblemNotRecorded, true)
}

// closed returns a function reporting whether ch is closed.
func closed(ch chan struct{}) func() bool {
	return func() bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
}

// tally counts what the trials of one cut saw.
type tally struct {
	attempted, acknowledged, duplicated, lost int
	first2xx, first5xx, replays, reruns       int
}

// TestFaultTrials cuts the network between pgxstore and PostgreSQL at each moment of a
// request in turn (IDEM_FAULT_TRIALS trials, default 100), then brings it back and retries
// with the same key until the answer is final. Every trial must end with exactly one
// order, every 2xx the client got must name that order, and a retry after a commit the
// client never heard of must replay it without running the handler again.
func TestFaultTrials(t *testing.T) {
	t.Parallel()
	trials := envInt(t, "IDEM_FAULT_TRIALS", 100)
	d := newDB(t)
	in := newInstance(t, d, instanceConfig{poolSize: 2})

	per := make([]tally, len(cuts))
	start := time.Now()
	for i := range trials {
		ci := i % len(cuts)
		c := cuts[ci]
		key := fmt.Sprintf("trial-%05d", i)
		scope := "acct-" + fmt.Sprint(i%3)
		body := jsonBody(i)
		tl := &per[ci]
		tl.attempted++

		in.setHooks(hooks{})
		fired := c.arm(in, key)
		callsBefore := in.calls.Load()
		first := in.post(scope, key, "", body)
		if !fired() {
			t.Fatalf("trial %d (%s): the cut never happened; first reply %v", i, c.name, first)
		}
		in.tracer.disarm()
		in.setHooks(hooks{})
		c.first(t, in, first, callsBefore)
		in.proxy.Up()

		callsAfterFirst := in.calls.Load()
		replies := append([]reply{first}, in.retryUntilDone(scope, key, "", body, 30)...)
		last := replies[len(replies)-1]
		if last.err != nil || last.status != http.StatusCreated {
			t.Fatalf("trial %d (%s): the retries never got a 201: %v", i, c.name, replies)
		}
		if last.replayed() {
			tl.replays++
		}
		if in.calls.Load() > callsAfterFirst {
			tl.reruns++
		}

		n := d.orders(scope, key)
		switch {
		case n > 1:
			tl.duplicated++
			t.Errorf("trial %d (%s): %d orders for one key", i, c.name, n)
		case n == 0:
			tl.lost++
			t.Errorf("trial %d (%s): no order although the client got %v", i, c.name, last)
		}
		// Every 2xx names the one order, byte for byte the same answer.
		acked := false
		for _, r := range replies {
			if r.err != nil || r.status/100 != 2 {
				continue
			}
			if !acked {
				acked = true
				tl.acknowledged++
			}
			o := r.order(t)
			if !sameBody(r, last) || o.Key != key || o.Scope != scope {
				t.Errorf("trial %d (%s): 2xx answers differ: %s vs %s", i, c.name, r.body, last.body)
			}
			if d.count(`SELECT count(*) FROM orders WHERE id = $1 AND idem_key = $2`, o.ID, key) != 1 {
				tl.lost++
				t.Errorf("trial %d (%s): acknowledged order %d is not in the table", i, c.name, o.ID)
			}
		}
		if first.status/100 == 2 {
			tl.first2xx++
		} else {
			tl.first5xx++
		}
		// A commit the client never heard of is replayed, not run again.
		if c.name == "during COMMIT (acknowledgement lost)" && (!last.replayed() || in.calls.Load() != callsAfterFirst) {
			t.Errorf("trial %d (%s): the committed request ran again instead of replaying: %v", i, c.name, last)
		}
		if t.Failed() {
			t.FailNow()
		}
	}

	var total tally
	var lines []string
	for ci, tl := range per {
		total.attempted += tl.attempted
		total.acknowledged += tl.acknowledged
		total.duplicated += tl.duplicated
		total.lost += tl.lost
		lines = append(lines, fmt.Sprintf("  %-38s attempted=%d first:2xx=%d/5xx=%d retry:replayed=%d handler-rerun=%d",
			cuts[ci].name, tl.attempted, tl.first2xx, tl.first5xx, tl.replays, tl.reruns))
	}
	accepted, refused, cutConns := in.proxy.Stats()
	t.Logf("attempted=%d acknowledged=%d duplicated=%d lost=%d (%v; proxy: %d connections accepted, %d refused, %d cut)\n%s",
		total.attempted, total.acknowledged, total.duplicated, total.lost, time.Since(start).Round(time.Millisecond),
		accepted, refused, cutConns, strings.Join(lines, "\n"))
	if total.duplicated != 0 || total.lost != 0 {
		t.Fatalf("duplicated=%d lost=%d, want 0 and 0", total.duplicated, total.lost)
	}
	if total.acknowledged != total.attempted {
		t.Fatalf("%d of %d trials never got a 2xx", total.attempted-total.acknowledged, total.attempted)
	}
	// The table agrees: one order per key, one completed key per trial.
	if n := d.count(`SELECT count(*) FROM (SELECT 1 FROM orders GROUP BY scope, idem_key HAVING count(*) > 1) dup`); n != 0 {
		t.Fatalf("%d keys have more than one order", n)
	}
	if n := d.count(`SELECT count(*) FROM idempotency_keys WHERE state = 'completed'`); n != trials {
		t.Fatalf("%d completed keys, want %d", n, trials)
	}
}
