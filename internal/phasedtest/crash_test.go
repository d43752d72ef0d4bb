package phasedtest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/core/storage"
)

// boundaries are the points a crash child exits at: right after the claim committed,
// inside charge_created after the provider charged (nothing of the phase committed),
// inside it after its write (uncommitted), right after charge_created committed, right
// after finished committed but before the response was recorded, and right after the
// response was recorded but before the client got it.
var boundaries = []string{atStarted, atProviderCalled, atChargeRecorded, atChargeCreated, atFinished, atRecorded}

const (
	// envTrials sets the crash trials per boundary and store. Default: defaultTrials.
	envTrials     = "PHASEDTEST_TRIALS"
	defaultTrials = 3
	// crashLease is the lease of the crash children: a retry takes over once it passed.
	crashLease = time.Second
	// crashConcurrency bounds the trials running at once (each runs one child at a time).
	crashConcurrency = 6
)

// trialsPerBoundary reads envTrials.
func trialsPerBoundary(t testing.TB) int {
	t.Helper()
	s := os.Getenv(envTrials)
	if s == "" {
		return defaultTrials
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 1000 {
		t.Fatalf("%s=%q: want a number of trials from 1 to 1000", envTrials, s)
	}
	return n
}

// trial is one crash and its recovery.
type trial struct {
	kind     kind
	boundary string
	fw       framework
	tl       tally // the rows once the retry completed
	done     bool  // the operation completed: a 201, replayed identically, and its rows
	conflict int   // 409 answers while the crashed attempt's lease was live
	err      error // what went wrong, if anything
}

func (tr *trial) name() string { return fmt.Sprintf("%s/%s/%s", tr.kind, tr.boundary, tr.fw) }

// duplicates counts the side effects made more than once.
func (tr *trial) duplicates() int {
	return max(tr.tl.Charges-1, 0) + max(tr.tl.Recorded-1, 0) + max(tr.tl.Payments-1, 0) + max(tr.tl.Outbox-1, 0)
}

// TestCrashRecovery crashes a payment at each boundary, in a child server that exits
// with status 3 right there (no response, no rollback, no release), then serves the
// retries from a fresh child: 409 + Retry-After while the crashed attempt's lease (1s) is
// live, then a takeover that resumes from the recorded point and completes the payment
// once, replayed identically afterwards (after a crash between recording and sending the
// response, the first retry already gets the replay). PHASEDTEST_TRIALS trials per boundary and store
// (default 3), spread over net/http, Gin and Echo; it logs
// trials=… boundaries=… duplicates=… lost=… and requires no duplicate and no lost payment.
func TestCrashRecovery(t *testing.T) {
	t.Parallel()
	n := trialsPerBoundary(t)
	var trials []*trial
	backends := map[kind]*backend{}
	for _, k := range kinds {
		backends[k] = newBackend(t, k)
		for _, b := range boundaries {
			for i := range n {
				trials = append(trials, &trial{kind: k, boundary: b, fw: frameworks[i%len(frameworks)]})
			}
		}
	}

	sem := make(chan struct{}, crashConcurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for _, tr := range trials {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			crashTrial(t, backends[tr.kind], tr)
		}()
	}
	wg.Wait()

	duplicates, lost, conflicts := 0, 0, 0
	for _, tr := range trials {
		duplicates += tr.duplicates()
		conflicts += tr.conflict
		if !tr.done {
			lost++
		}
		if tr.err != nil {
			t.Errorf("%s: %v", tr.name(), tr.err)
		}
	}
	t.Logf("trials=%d boundaries=%d stores=%d frameworks=%d duplicates=%d lost=%d (409s while a lease was live: %d) in %v",
		len(trials), len(boundaries), len(kinds), len(frameworks), duplicates, lost, conflicts, time.Since(start).Round(time.Millisecond))
	if duplicates != 0 || lost != 0 {
		t.Errorf("duplicates=%d lost=%d, want 0 and 0", duplicates, lost)
	}
}

// crashTrial runs one trial: a child that crashes at tr.boundary, then a fresh child that
// serves the retries. It records what happened in tr; it runs on a goroutine of its own,
// so it reports through tr.err, never t.Fatal.
func crashTrial(t *testing.T, be *backend, tr *trial) {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	defer func() { tr.err = errors.Join(errs...) }()
	ctx := context.Background()
	account, key := operation()

	crashed, err := startChild(t, be.spec, childOptions{fw: tr.fw, lease: crashLease, crashAfter: tr.boundary})
	if err != nil {
		fail("crash child: %w", err)
		return
	}
	sent := time.Now()
	if r, err := post(ctx, crashed.url, "/v1/payments", account, key, paymentBody); err == nil {
		fail("the crash child answered %v instead of exiting at %s", r, tr.boundary)
	}
	code, err := crashed.exitCode(waitTimeout)
	if err != nil || code != crashStatus {
		fail("crash child: exit status %d (%v), want %d; stderr: %s", code, err, crashStatus, crashed.stderr.String())
		return
	}
	if err := crashed.raced(); err != nil {
		fail("%w", err)
	}

	// What the crash left: the claim and every phase that committed, nothing else, and a
	// lease still running.
	left, err := be.count(ctx, account, key)
	if err != nil {
		fail("count after the crash: %w", err)
		return
	}
	want := tally{State: string(storage.StateStarted), Point: storage.RecoveryStarted, Leased: true, Charges: 1}
	wantCalls := 1
	switch tr.boundary {
	case atStarted:
		want.Charges = 0
	case atProviderCalled, atChargeRecorded:
		wantCalls = 2 // the retry runs charge_created again; the provider returns its charge
	case atChargeCreated:
		want.Point, want.Recorded = atChargeCreated, 1
	case atFinished:
		want.Point, want.Recorded, want.Payments, want.Outbox = atFinished, 1, 1, 1
	case atRecorded:
		want = tally{State: string(storage.StateCompleted), Point: atFinished, Charges: 1, Recorded: 1, Payments: 1, Outbox: 1}
	}
	if left.State != want.State || left.Point != want.Point || left.Leased != want.Leased ||
		left.Charges != want.Charges || left.Recorded != want.Recorded || left.Payments != want.Payments || left.Outbox != want.Outbox {
		fail("after the crash: %v, want %v", left, want)
	}

	fresh, err := startChild(t, be.spec, childOptions{fw: tr.fw, lease: crashLease})
	if err != nil {
		fail("fresh child: %w", err)
		return
	}
	defer func() {
		fresh.stop()
		if err := fresh.raced(); err != nil {
			fail("%w", err)
		}
	}()
	var first *reply
	deadline := time.Now().Add(crashLease + waitTimeout)
	for first == nil && time.Now().Before(deadline) {
		r, err := post(ctx, fresh.url, "/v1/payments", account, key, paymentBody)
		arrived := time.Now()
		switch {
		case err != nil:
			fail("retry: %w", err)
			return
		case r.Status == http.StatusConflict:
			if err := checkInProgress(r); err != nil {
				fail("retry: %w", err)
				return
			}
			tr.conflict++
			time.Sleep(100 * time.Millisecond) // the client's back-off: it retries until the lease runs out
		case r.Status == http.StatusCreated && tr.boundary == atRecorded:
			// The response was recorded before the crash: the retry gets it replayed.
			if !r.replayed() {
				fail("retry after the response was recorded: %v, want a replay", r)
			}
			first = r
		case r.Status == http.StatusCreated:
			// The claim committed after sent, so its lease ran at least until sent+lease:
			// an answer that arrived before then cannot come from a takeover.
			if early := sent.Add(crashLease).Sub(arrived); early > 50*time.Millisecond {
				fail("taken over %v before the crashed attempt's lease could have run out", early)
			}
			first = r
		default:
			fail("retry: %v, want 409 while the lease is live, then 201", r)
			return
		}
	}
	if first == nil {
		fail("no 201 within %v of the crash", crashLease+waitTimeout)
		return
	}
	replay, err := post(ctx, fresh.url, "/v1/payments", account, key, paymentBody)
	if err != nil {
		fail("replay: %w", err)
		return
	}
	if err := checkReplay(first, replay); err != nil {
		fail("%w", err)
	}
	if tr.tl, err = be.count(ctx, account, key); err != nil {
		fail("count: %w", err)
		return
	}
	completing := first
	if tr.boundary == atRecorded {
		completing = nil // a replay, checked above
		if err := checkNames(tr.tl, first); err != nil {
			fail("%w", err)
		}
	}
	if err := checkDone(tr.tl, completing); err != nil {
		fail("%w", err)
	}
	if tr.tl.Calls != wantCalls {
		fail("provider calls %d, want %d", tr.tl.Calls, wantCalls)
	}
	tr.done = tr.tl.State == string(storage.StateCompleted) && tr.tl.Payments > 0 && tr.tl.Charges > 0 &&
		first.Status == http.StatusCreated && strings.Contains(string(first.Body), tr.tl.ChargeID)
}
