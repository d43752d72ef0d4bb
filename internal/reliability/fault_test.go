package reliability_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/internal/reliability"
	"github.com/idemkit/idem/pgxstore"
)

// cut is one moment at which a trial breaks the network between the store and the
// database, and what the first client may get.
type cut struct {
	name string
	// arm prepares the cut for key; the returned function reports, after the first
	// reply, whether the cut happened (waiting a bounded time for it).
	arm func(key string) (fired func() bool)
	// first checks the first reply (the proxy is down or the connections are gone); ran
	// reports whether the handler ran for it.
	first func(t *testing.T, r reply, ran bool)
	// replayOnly: the server committed and the client never heard of it, so the retry
	// must replay without running the handler again.
	replayOnly bool
	// completes: the first request gets as far as sending the completion (the cut is at
	// or after it), so the trial checks which form of completion the store sent.
	completes bool
}

// step is a store statement (or pgx batch) for a trial's key, as the application's
// observer names it: the form of the atomic claim and of its completion.
type step int

const (
	claimRowFirst  step = iota + 1 // the claim INSERTs the started key row
	claimLocked                    // the claim takes the key's advisory lock and looks it up (single write)
	completeUpdate                 // the completion UPDATEs the key row to completed
	completeInsert                 // the completion INSERTs the completed key row (single write)
)

// form is which atomic claim an application's store makes.
type form int

const (
	rowFirst    form = iota + 1 // the started key row first, updated to completed
	singleWrite                 // advisory lock + lookup, the completed row inserted before COMMIT
)

func (s step) String() string {
	switch s {
	case claimRowFirst:
		return "claim:insert-started"
	case claimLocked:
		return "claim:advisory-lock+lookup"
	case completeUpdate:
		return "complete:update"
	case completeInsert:
		return "complete:insert-completed"
	}
	return fmt.Sprintf("step(%d)", int(s))
}

func (f form) String() string {
	if f == singleWrite {
		return "single write"
	}
	return "row first"
}

// claimStep and completeStep are the statements of the claim and the completion in form f.
func (f form) claimStep() step {
	if f == singleWrite {
		return claimLocked
	}
	return claimRowFirst
}

func (f form) completeStep() step {
	if f == singleWrite {
		return completeInsert
	}
	return completeUpdate
}

// pgxCuts are the moments of issue 9 for pgxstore, in the order a request meets them,
// placed by the store's batches as in's tracer sees them.
func pgxCuts(in *instance) []cut {
	return []cut{
		{
			name: "during the claim",
			arm:  func(key string) func() bool { return in.tracer.arm(key, claimBatch, false, in.proxy.Down).fired },
			first: func(t *testing.T, r reply, ran bool) {
				mustProblem(t, r, http.StatusServiceUnavailable, core.ProblemStoreUnavailable, true)
				if ran {
					t.Fatalf("the handler ran although the claim failed")
				}
			},
		},
		downInHandler(in.proxy, in.setHooks, false),
		downInHandler(in.proxy, in.setHooks, true),
		{
			name:      "before COMMIT",
			arm:       func(key string) func() bool { return in.tracer.arm(key, completeBatch, false, in.proxy.Down).fired },
			first:     notRecorded,
			completes: true,
		},
		{
			// The server commits; its answer never reaches the client.
			name: "during COMMIT (acknowledgement lost)",
			arm: func(key string) func() bool {
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
			first:      notRecorded,
			replayOnly: true,
			completes:  true,
		},
		{
			// The cut lands anywhere from before the batch is sent to after COMMIT is answered.
			name: "during COMMIT (random instant)",
			arm: func(key string) func() bool {
				done := make(chan struct{})
				p := in.tracer.arm(key, completeBatch, false, func() { downSoon(in.proxy, done) })
				return func() bool { return p.fired() && waitClosed(done) }
			},
			first:     createdOrNotRecorded,
			completes: true,
		},
		{
			name:      "after COMMIT",
			arm:       func(key string) func() bool { return in.tracer.arm(key, completeBatch, true, in.proxy.Down).fired },
			first:     originalCreated,
			completes: true,
		},
	}
}

// wireCuts are the same moments placed by what p sees on the wire, whatever SQL the store
// sends: the claim is the first statement that names the key, COMMIT is the command
// itself (PostgreSQL's Query "commit", MySQL's COM_QUERY "COMMIT"). setHooks sets the
// application's handler hooks.
func wireCuts(p *reliability.Proxy, setHooks func(hooks)) []cut {
	return []cut{
		{
			name: "during the claim",
			arm:  func(key string) func() bool { return closedWithin(p.CutOnClientBytes([]byte(key))) },
			first: func(t *testing.T, r reply, ran bool) {
				mustProblem(t, r, http.StatusServiceUnavailable, core.ProblemStoreUnavailable, true)
				if ran {
					t.Fatalf("the handler ran although the claim failed")
				}
			},
		},
		downInHandler(p, setHooks, false),
		downInHandler(p, setHooks, true),
		{
			// The completion is written; COMMIT never reaches the server.
			name:      "before COMMIT",
			arm:       func(string) func() bool { return closedWithin(p.CutAt("COMMIT", reliability.BeforeCommand)) },
			first:     notRecorded,
			completes: true,
		},
		{
			// The server commits; its answer never reaches the client.
			name:       "during COMMIT (acknowledgement lost)",
			arm:        func(string) func() bool { return closedWithin(p.CutAt("COMMIT", reliability.BeforeReply)) },
			first:      notRecorded,
			replayOnly: true,
			completes:  true,
		},
		{
			// The cut lands anywhere from COMMIT's sending to after its answer.
			name: "during COMMIT (random instant)",
			arm: func(string) func() bool {
				sent, done := p.CutAt("COMMIT", reliability.Sent), make(chan struct{})
				go func() {
					select {
					case <-sent:
						downSoon(p, done)
					case <-time.After(30 * time.Second):
					}
				}()
				return closedWithin(done)
			},
			first:     createdOrNotRecorded,
			completes: true,
		},
		{
			// The client has COMMIT's answer; then the network goes.
			name:      "after COMMIT",
			arm:       func(string) func() bool { return closedWithin(p.CutAt("COMMIT", reliability.AfterReply)) },
			first:     originalCreated,
			completes: true,
		},
	}
}

// downInHandler takes p down from the handler: right after the claim, or after the
// business write.
func downInHandler(p *reliability.Proxy, setHooks func(hooks), afterWrite bool) cut {
	c := cut{name: "after the claim", first: func(t *testing.T, r reply, _ bool) {
		// The handler's INSERT fails on the cut connection: it answers 500 itself, which
		// is not stored, and the engine rolls back.
		if r.err != nil || r.status != http.StatusInternalServerError {
			t.Fatalf("got %v, want the handler's 500", r)
		}
	}}
	if afterWrite {
		// The handler answers 201; the completion is sent on the cut connection.
		c = cut{name: "after the business write", first: notRecorded, completes: true}
	}
	c.arm = func(key string) func() bool {
		done := make(chan struct{})
		act := func(r *http.Request) {
			if core.MustOperation(r.Context()).Key() == key {
				p.Down()
				close(done)
			}
		}
		if afterWrite {
			setHooks(hooks{afterWrite: func(r *http.Request) int { act(r); return 0 }})
		} else {
			setHooks(hooks{afterClaim: act})
		}
		return closed(done)
	}
	return c
}

// downSoon takes p down after a random instant of up to 1.5ms, then closes done.
func downSoon(p *reliability.Proxy, done chan struct{}) {
	time.AfterFunc(time.Duration(rand.IntN(1500))*time.Microsecond, func() {
		p.Down()
		close(done)
	})
}

func notRecorded(t *testing.T, r reply, _ bool) {
	t.Helper()
	mustProblem(t, r, http.StatusServiceUnavailable, core.ProblemNotRecorded, true)
}

func createdOrNotRecorded(t *testing.T, r reply, _ bool) {
	t.Helper()
	if r.err != nil || (r.status != http.StatusCreated && r.status != http.StatusServiceUnavailable) {
		t.Fatalf("got %v, want 201 or 503", r)
	}
	if r.status == http.StatusServiceUnavailable {
		notRecorded(t, r, false)
	}
}

func originalCreated(t *testing.T, r reply, _ bool) {
	t.Helper()
	if r.err != nil || r.status != http.StatusCreated || r.replayed() {
		t.Fatalf("got %v, want the original 201", r)
	}
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

// closedWithin returns a function reporting whether ch closes within 10s.
func closedWithin[C ~<-chan struct{} | ~chan struct{}](ch C) func() bool {
	return func() bool { return waitClosed(ch) }
}

func waitClosed[C ~<-chan struct{} | ~chan struct{}](ch C) bool {
	select {
	case <-ch:
		return true
	case <-time.After(10 * time.Second):
		return false
	}
}

// tally counts what the trials of one cut saw.
type tally struct {
	attempted, acknowledged, duplicated, lost int
	first2xx, first5xx, replays, reruns       int
	// exercised counts the trials whose first request sent the form's claim (and, for a
	// cut at or after the completion, the form's completion) before the cut: the trials
	// that tested the moment in the application's form.
	exercised int
	elapsed   time.Duration
}

// add counts o's trials and their outcomes into t (for the totals line).
func (t *tally) add(o tally) {
	t.attempted += o.attempted
	t.acknowledged += o.acknowledged
	t.duplicated += o.duplicated
	t.lost += o.lost
}

// trialApp is an application under fault trials, with what the trials read of its
// database (straight, not through the proxy).
type trialApp struct {
	name  string // store × database, for the summary
	ep    *endpoint
	proxy *reliability.Proxy
	calls func() int64 // handler runs so far
	cuts  []cut
	// orders counts the key's orders; orderOf reports whether order id is key's.
	orders  func(scope, key string) int
	orderOf func(id int64, key string) bool
	// duplicateKeys counts keys with more than one order; completedKeys the completed keys.
	duplicateKeys, completedKeys func() int
	reset                        func()        // clears the handler's hooks
	log                          func() string // the engine's last log lines, if kept
	// form is the store's atomic claim; steps returns (and forgets) the store statements
	// sent for a key so far, as the application's observer names them.
	form  form
	steps func(key string) []step
}

func (app trialApp) logLines() string {
	if app.log == nil {
		return "(not kept)"
	}
	return app.log()
}

// runFaultTrials cuts the network at each of app's moments in turn (trials trials), then
// brings it back and retries with the same key until the answer is final. Every trial
// must end with exactly one order, every 2xx the client got must name that order, and a
// retry after a commit the client never heard of must replay it without running the
// handler again. It logs one summary line for app and returns the totals.
func runFaultTrials(t *testing.T, app trialApp, trials int) tally {
	t.Helper()
	require.GreaterOrEqual(t, trials, len(app.cuts), "every moment needs a trial")
	require.NotNil(t, app.steps, "%s: no observer of the store's statements", app.name)
	per := make([]tally, len(app.cuts))
	start := time.Now()
	for i := range trials {
		ci := i % len(app.cuts)
		c := app.cuts[ci]
		key := fmt.Sprintf("trial-%05d", i)
		scope := "acct-" + fmt.Sprint(i%3)
		body := jsonBody(i)
		tl := &per[ci]
		tl.attempted++
		began := time.Now()

		app.reset()
		fired := c.arm(key)
		callsBefore := app.calls()
		first := app.ep.post(scope, key, "", body)
		if !fired() {
			t.Fatalf("trial %d (%s): the cut never happened; first reply %v", i, c.name, first)
		}
		app.proxy.Disarm()
		app.reset()
		c.first(t, first, app.calls() != callsBefore)
		app.proxy.Up()
		if sent := app.steps(key); slices.Contains(sent, app.form.claimStep()) &&
			(!c.completes || slices.Contains(sent, app.form.completeStep())) {
			tl.exercised++
		} else {
			t.Errorf("trial %d (%s): the first request sent %v, not the %s claim and completion", i, c.name, sent, app.form)
		}

		callsAfterFirst := app.calls()
		replies := append([]reply{first}, app.ep.retryUntilDone(scope, key, "", body, 30)...)
		last := replies[len(replies)-1]
		if last.err != nil || last.status != http.StatusCreated {
			t.Fatalf("trial %d (%s): the retries never got a 201: %v\nthe engine's last log lines:\n%s", i, c.name, replies, app.logLines())
		}
		if last.replayed() {
			tl.replays++
		}
		if app.calls() > callsAfterFirst {
			tl.reruns++
		}

		n := app.orders(scope, key)
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
			if !app.orderOf(o.ID, key) {
				tl.lost++
				t.Errorf("trial %d (%s): acknowledged order %d is not in the table", i, c.name, o.ID)
			}
		}
		if first.status/100 == 2 {
			tl.first2xx++
		} else {
			tl.first5xx++
		}
		if c.replayOnly && (!last.replayed() || app.calls() != callsAfterFirst) {
			t.Errorf("trial %d (%s): the committed request ran again instead of replaying: %v", i, c.name, last)
		}
		if t.Failed() {
			t.FailNow()
		}
		tl.elapsed += time.Since(began)
	}

	var total tally
	var lines []string
	for ci, tl := range per {
		total.add(tl)
		lines = append(lines, fmt.Sprintf("  %-38s attempted=%d exercised=%d first:2xx=%d/5xx=%d retry:replayed=%d handler-rerun=%d (%v a trial)",
			app.cuts[ci].name, tl.attempted, tl.exercised, tl.first2xx, tl.first5xx, tl.replays, tl.reruns,
			(tl.elapsed/time.Duration(max(tl.attempted, 1))).Round(time.Millisecond)))
	}
	accepted, refused, cutConns := app.proxy.Stats()
	t.Logf("%s, %s: attempted=%d acknowledged=%d duplicated=%d lost=%d (%v; proxy: %d connections accepted, %d refused, %d cut)\n%s",
		app.name, app.form, total.attempted, total.acknowledged, total.duplicated, total.lost, time.Since(start).Round(time.Millisecond),
		accepted, refused, cutConns, strings.Join(lines, "\n"))
	if total.duplicated != 0 || total.lost != 0 {
		t.Fatalf("duplicated=%d lost=%d, want 0 and 0", total.duplicated, total.lost)
	}
	for ci, tl := range per {
		// Each moment was cut in the application's form of the claim, in every trial.
		require.Positive(t, tl.exercised, "%s: no trial exercised %q in the %s form", app.name, app.cuts[ci].name, app.form)
		require.Equal(t, tl.attempted, tl.exercised, "%s: %q", app.name, app.cuts[ci].name)
	}
	if total.acknowledged != total.attempted {
		t.Fatalf("%d of %d trials never got a 2xx", total.attempted-total.acknowledged, total.attempted)
	}
	// The table agrees: one order per key, one completed key per trial.
	if n := app.duplicateKeys(); n != 0 {
		t.Fatalf("%d keys have more than one order", n)
	}
	if n := app.completedKeys(); n != trials {
		t.Fatalf("%d completed keys, want %d", n, trials)
	}
	return total
}

// TestFaultTrials cuts the network between pgxstore and PostgreSQL at each moment of a
// request in turn, in both forms of the atomic claim (the started key row first, and the
// single write: advisory lock + lookup, the completed row inserted before COMMIT):
// IDEM_FAULT_TRIALS trials each (default 100); see runFaultTrials for what every trial
// must show.
func TestFaultTrials(t *testing.T) {
	t.Parallel()
	trials := envInt(t, "IDEM_FAULT_TRIALS", 100)
	for _, tc := range []struct {
		form form
		opts []pgxstore.Option
	}{
		{singleWrite, nil}, // the default
		{rowFirst, []pgxstore.Option{pgxstore.WithClaimRowFirst()}},
	} {
		t.Run(tc.form.String(), func(t *testing.T) {
			t.Parallel()
			d := newDB(t)
			in := newInstance(t, d, instanceConfig{poolSize: 2, opts: tc.opts})
			runFaultTrials(t, trialApp{
				name:  "pgxstore × PostgreSQL",
				ep:    in.endpoint,
				proxy: in.proxy,
				calls: in.calls.Load,
				cuts:  pgxCuts(in),
				reset: func() { in.tracer.disarm(); in.setHooks(hooks{}) },
				form:  tc.form,
				steps: in.tracer.steps,
				orders: func(scope, key string) int {
					return d.orders(scope, key)
				},
				orderOf: func(id int64, key string) bool {
					return d.count(`SELECT count(*) FROM orders WHERE id = $1 AND idem_key = $2`, id, key) == 1
				},
				duplicateKeys: func() int {
					return d.count(`SELECT count(*) FROM (SELECT 1 FROM orders GROUP BY scope, idem_key HAVING count(*) > 1) dup`)
				},
				completedKeys: func() int { return d.count(`SELECT count(*) FROM idempotency_keys WHERE state = 'completed'`) },
			}, trials)
		})
	}
}

// TestGormFaultTrials runs the fault trials on gormstore, between it and PostgreSQL in
// both forms of the atomic claim (the started key row first, and the single write:
// advisory lock + lookup, the completed row inserted before COMMIT) and between it and
// MariaDB, with the cuts placed on the wire (wireCuts): IDEM_FAULT_TRIALS trials each
// (default 100).
func TestGormFaultTrials(t *testing.T) {
	t.Parallel()
	trials := envInt(t, "IDEM_FAULT_TRIALS", 100)
	for _, tc := range []struct {
		dialect gormDialect
		form    form
		opts    []gormstore.Option
	}{
		{onPostgres, singleWrite, nil}, // the default
		{onPostgres, rowFirst, []gormstore.Option{gormstore.WithClaimRowFirst()}},
		{onMariaDB, rowFirst, nil},
	} {
		t.Run(tc.dialect.String()+" "+tc.form.String(), func(t *testing.T) {
			t.Parallel()
			a := newGormApp(t, newGormDB(t, tc.dialect), gormAppConfig{poolSize: 2, opts: tc.opts})
			app := a.trialApp()
			app.form = tc.form
			runFaultTrials(t, app, trials)
		})
	}
}
