package storetest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/core/storetest"
)

// TestReferenceAtomic runs the whole suite, atomic subtests included, against refStore: a
// small in-memory model of a store with transactions, so the atomic cases are proven to
// pass against correct behaviour before a database store meets them.
func TestReferenceAtomic(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storage.Store { return newRefStore() })
}

// refStore adds atomic mode to memstore: an atomic claim holds a per-key slot, standing for
// the row lock of an open transaction; a twin waits for the slot up to its LockWait.
// Completion records the response; a release deletes the key, phases included.
type refStore struct {
	*memstore.Store
	mu      sync.Mutex
	pending map[[2]string]chan struct{}
}

func newRefStore() *refStore {
	return &refStore{Store: memstore.New(), pending: make(map[[2]string]chan struct{})}
}

func (s *refStore) SupportsAtomic() bool { return true }

func (s *refStore) Claim(ctx context.Context, c storage.Claim) (storage.Claimed, error) {
	if c.Mode != storage.ModeAtomic {
		return s.Store.Claim(ctx, c)
	}
	k := [2]string{c.Scope, c.Key}
	wait := c.LockWait
	if wait <= 0 {
		wait = 2 * time.Second
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		busy, ok := s.pending[k]
		if !ok {
			s.pending[k] = make(chan struct{})
			s.mu.Unlock()
			break
		}
		s.mu.Unlock()
		select {
		case <-busy:
		case <-timer.C:
			return storage.Claimed{}, fmt.Errorf("ref: lock wait: %w", storage.ErrInProgress)
		case <-ctx.Done():
			return storage.Claimed{}, ctx.Err()
		}
	}
	c.Mode = storage.ModePhased
	claimed, err := s.Store.Claim(ctx, c)
	lock, rec := claimed.Lock, claimed.Record
	if lock == nil {
		s.free(k)
		return storage.Claimed{Verdict: claimed.Verdict, Record: rec}, err
	}
	return storage.Claimed{Verdict: claimed.Verdict, Lock: &refLock{Lock: lock, s: s, k: k}}, nil
}

func (s *refStore) free(k [2]string) {
	s.mu.Lock()
	close(s.pending[k])
	delete(s.pending, k)
	s.mu.Unlock()
}

// Lookup hides a key an atomic claim holds: its transaction has not committed.
func (s *refStore) Lookup(ctx context.Context, scope, key string) (*storage.Record, time.Time, error) {
	s.mu.Lock()
	_, pending := s.pending[[2]string{scope, key}]
	s.mu.Unlock()
	if pending {
		return nil, time.Time{}, fmt.Errorf("ref: %w", storage.ErrNotFound)
	}
	return s.Store.Lookup(ctx, scope, key)
}

type refLock struct {
	storage.Lock
	s     *refStore
	k     [2]string
	ended bool
}

// Phase runs fn in the "transaction": nothing is recorded until Complete.
func (l *refLock) Phase(ctx context.Context, _ string, fn func(context.Context) error) error {
	return fn(ctx)
}

func (l *refLock) Complete(ctx context.Context, r *storage.Response) error {
	if l.ended {
		return errors.New("ref: lock ended")
	}
	l.ended = true
	defer l.s.free(l.k)
	if err := l.Lock.Complete(ctx, r); err != nil {
		_ = l.Lock.Release(ctx)
		return err
	}
	return nil
}

func (l *refLock) Release(ctx context.Context) error {
	if l.ended {
		return nil
	}
	l.ended = true
	defer l.s.free(l.k)
	return l.Lock.Release(ctx)
}

// brokenEnv names the flaw TestBrokenStoreChild gives its store.
const brokenEnv = "STORETEST_BROKEN"

// TestSuiteCatchesBrokenStores runs the suite, in a child process, against stores with
// one flaw each and checks that each subtest meant to catch the flaw fails, and fails at
// the assertion meant to catch it (its message), not by accident: not through a panic,
// nor some other assertion.
func TestSuiteCatchesBrokenStores(t *testing.T) {
	t.Parallel()
	cases := []struct {
		flaw string
		want map[string]string // subtest under phased/ → the message of the assertion that must fail
	}{
		{"second-winner", map[string]string{
			"ConcurrentClaims": "exactly one of 200 concurrent claims must win",
			"InProgress":       "Claim returned a Lock, want a Record",
			"TakeoverRace":     "exactly one of 16 claimers must take the expired lease over",
		}},
		{"keeps-response", map[string]string{"CompleteCopiesResponse": "status of the stored response"}},
		{"no-retention", map[string]string{
			"RetentionAsAbsent":       "Claim returned a Record (state completed), want a Lock",
			"RetentionOnExpiredLease": "a fresh claim must not report Resumed",
		}},
		{"no-fencing", map[string]string{"Fencing": "Phase of a lock whose lease was taken over"}},
		{"folds-keys", map[string]string{"Limits": "Claim returned a Record (state completed), want a Lock"}},
		{"no-renewal", map[string]string{
			"RenewExtendsLease":   "Claim returned a Lock, want a Record",
			"LongPhaseKeepsLease": "a twin while the phase runs (renewed lease): status",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.flaw, func(t *testing.T) {
			t.Parallel()
			var names []string
			for name := range tc.want {
				names = append(names, name+"$")
			}
			run := "^TestBrokenStoreChild$/^phased$/^(" + strings.Join(names, "|") + ")"
			// One test at a time: -v prints a parallel test's failure report line by line,
			// and another test's lines could land inside it.
			cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.v", "-test.count=1", "-test.parallel=1")
			cmd.Env = append(os.Environ(), brokenEnv+"="+tc.flaw)
			out, err := cmd.CombinedOutput()
			require.Error(t, err, "the suite passed a store with flaw %q:\n%s", tc.flaw, out)
			assert.NotContains(t, string(out), "panic:", "the suite must catch the flaw with an assertion, not by crashing")
			failed := failures(string(out))
			for name, msg := range tc.want {
				sub := "TestBrokenStoreChild/phased/" + name
				assert.Contains(t, string(out), "--- FAIL: "+sub+" ", "subtest %s did not catch flaw %q:\n%s", name, tc.flaw, out)
				assert.Contains(t, failed[sub], msg, "subtest %s failed, but not at the assertion meant to catch flaw %q:\n%s", name, tc.flaw, out)
			}
		})
	}
}

// failureRE matches a testify failure report: what failed (its Error), in which test,
// and the assertion's message if it has one.
var failureRE = regexp.MustCompile(`(?ms)^\s+Error:\s+(.*?)\n\s+Test:\s+(\S+)$(?:\n\s+Messages:\s+([^\n]*))?`)

// failures maps each test that failed an assertion in out to what the failure reports
// said (error and message).
func failures(out string) map[string]string {
	m := make(map[string]string)
	for _, g := range failureRE.FindAllStringSubmatch(out, -1) {
		m[g[2]] += g[1] + "\n" + g[3] + "\n"
	}
	return m
}

// TestBrokenStoreChild is the child process of TestSuiteCatchesBrokenStores; without
// STORETEST_BROKEN it does nothing.
func TestBrokenStoreChild(t *testing.T) {
	flaw := os.Getenv(brokenEnv)
	if flaw == "" {
		return
	}
	storetest.Run(t, func(t *testing.T) storage.Store { return &brokenStore{Store: memstore.New(), flaw: flaw} })
}

// brokenStore is memstore with one flaw.
type brokenStore struct {
	*memstore.Store
	flaw string
	mu   sync.Mutex
	kept map[[2]string]*storage.Response
}

func (s *brokenStore) Claim(ctx context.Context, c storage.Claim) (storage.Claimed, error) {
	switch s.flaw {
	case "no-retention":
		c.Retention = 0
	case "folds-keys": // a case-insensitive, space-padded column (MariaDB's utf8mb4 VARCHAR)
		c.Scope, c.Key = strings.ToLower(strings.TrimRight(c.Scope, " ")), strings.ToLower(strings.TrimRight(c.Key, " "))
	}
	claimed, err := s.Store.Claim(ctx, c)
	lock, rec := claimed.Lock, claimed.Record
	k := [2]string{c.Scope, c.Key}
	switch {
	case s.flaw == "second-winner" && rec != nil && rec.State == storage.StateStarted:
		return storage.Claimed{Verdict: storage.VerdictAbsent, Lock: fakeLock{}}, nil
	case s.flaw == "keeps-response" && rec != nil && rec.Response != nil:
		s.mu.Lock()
		defer s.mu.Unlock()
		if r := s.kept[k]; r != nil {
			cp := *rec
			cp.Response = r
			return storage.Claimed{Verdict: claimed.Verdict, Record: &cp}, nil
		}
	case lock != nil && s.flaw == "keeps-response":
		return storage.Claimed{Verdict: claimed.Verdict, Lock: &keepingLock{Lock: lock, s: s, k: k}}, nil
	case lock != nil && s.flaw == "no-fencing":
		return storage.Claimed{Verdict: claimed.Verdict, Lock: unfencedLock{lock}}, nil
	case lock != nil && s.flaw == "no-renewal":
		return storage.Claimed{Verdict: claimed.Verdict, Lock: unrenewedLock{lock}}, nil
	}
	return storage.Claimed{Verdict: claimed.Verdict, Lock: lock, Record: rec}, err
}

// Lookup, with the flaw "lookup-no-lease", reports every lease as ended.
func (s *brokenStore) Lookup(ctx context.Context, scope, key string) (*storage.Record, time.Time, error) {
	rec, now, err := s.Store.Lookup(ctx, scope, key)
	if s.flaw == "lookup-no-lease" && rec != nil {
		cp := *rec
		cp.LockedUntil = time.Time{}
		rec = &cp
	}
	return rec, now, err
}

// TestSuiteCatchesBrokenLookups is TestSuiteCatchesBrokenStores for the read tests: a
// Lookup that loses the lease fails them at the assertions meant to catch it.
func TestSuiteCatchesBrokenLookups(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenStoreChild$/^store$/^(Lookup|LookupDecidesAsClaim)$",
		"-test.v", "-test.count=1", "-test.parallel=1")
	cmd.Env = append(os.Environ(), brokenEnv+"=lookup-no-lease")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the suite passed a Lookup that loses leases:\n%s", out)
	assert.NotContains(t, string(out), "panic:")
	failed := failures(string(out))
	assert.Contains(t, failed["TestBrokenStoreChild/store/Lookup"], "the lease of a fresh claim is live at Lookup's now", "%s", out)
	assert.Contains(t, failed["TestBrokenStoreChild/store/LookupDecidesAsClaim"], "a live lease: Decide must say in progress", "%s", out)
}

// fakeLock claims to hold a key it does not hold.
type fakeLock struct{}

func (fakeLock) Context(ctx context.Context) context.Context { return ctx }
func (fakeLock) RecoveryPoint() string                       { return storage.RecoveryStarted }
func (fakeLock) Resumed() bool                               { return false }
func (fakeLock) Renew(context.Context) error                 { return nil }
func (fakeLock) Phase(ctx context.Context, _ string, fn func(context.Context) error) error {
	return fn(ctx)
}
func (fakeLock) Complete(context.Context, *storage.Response) error { return nil }
func (fakeLock) Release(context.Context) error                     { return nil }

// keepingLock stores the caller's response itself instead of a copy.
type keepingLock struct {
	storage.Lock
	s *brokenStore
	k [2]string
}

func (l *keepingLock) Complete(ctx context.Context, r *storage.Response) error {
	if err := l.Lock.Complete(ctx, r); err != nil {
		return err
	}
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if l.s.kept == nil {
		l.s.kept = make(map[[2]string]*storage.Response)
	}
	l.s.kept[l.k] = r
	return nil
}

// unfencedLock reports success when its lease was lost.
type unfencedLock struct{ storage.Lock }

func (l unfencedLock) Phase(ctx context.Context, p string, fn func(context.Context) error) error {
	if err := l.Lock.Phase(ctx, p, fn); !errors.Is(err, storage.ErrLeaseLost) {
		return err
	}
	return nil
}

func (l unfencedLock) Complete(ctx context.Context, r *storage.Response) error {
	if err := l.Lock.Complete(ctx, r); !errors.Is(err, storage.ErrLeaseLost) {
		return err
	}
	return nil
}

func (l unfencedLock) Release(ctx context.Context) error {
	if err := l.Lock.Release(ctx); !errors.Is(err, storage.ErrLeaseLost) {
		return err
	}
	return nil
}

// unrenewedLock reports success for a renewal it never made.
type unrenewedLock struct{ storage.Lock }

func (unrenewedLock) Renew(context.Context) error { return nil }
