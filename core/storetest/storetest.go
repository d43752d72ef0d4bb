package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core/storage"
)

// Defaults of the claims the suite builds; subtests shorten them where a lease or a wait
// must run out.
const (
	defaultLease     = 60 * time.Second
	defaultLockWait  = 2 * time.Second
	defaultRetention = 24 * time.Hour

	// shortLease is the lease (or retention) of a claim whose expiry a subtest waits for;
	// pastLease is how long it waits (see letTimePass).
	shortLease = 150 * time.Millisecond
	pastLease  = 300 * time.Millisecond

	// clockSlack bounds how far the store's timestamps may stray from the test's clock.
	clockSlack = time.Minute

	// storeTimeout is the deadline the suite gives each store call beyond a claim's lock
	// wait, as the engine gives its StoreTimeout.
	storeTimeout = 10 * time.Second
)

// Run runs every conformance test as parallel subtests. newStore returns a fresh, empty
// store for one subtest (its own table/schema), so subtests do not see each other's keys.
// A store that shares a transaction with the handler, or whose database can stall, runs
// RunHarness instead, so the rules about those run too.
//
// Subtests are grouped by mode ("phased", and "atomic" when the store supports it) plus
// "store" for the mode-independent ones, so a failing case can be rerun alone with
// -run 'TestX/phased/Fencing'.
func Run(t *testing.T, newStore func(t *testing.T) storage.Store) {
	t.Helper()
	run(t, Harness{New: func(t *testing.T) Subject { return Subject{Store: newStore(t)} }})
}

// run runs the suite on the stores h makes.
func run(t *testing.T, h Harness) {
	t.Helper()
	first := h.New(t)
	require.NotNil(t, first.Store, "Harness.New returned no store")
	atomicOK := first.Store.SupportsAtomic()
	withTx := first.Tx != nil

	modeTests := func(mode storage.Mode) []test {
		tests := append([]test(nil), commonTests...)
		if mode == storage.ModeAtomic {
			tests = append(tests, atomicTests...)
		} else {
			tests = append(append(tests, phasedTests...), engineTests...)
			tests = append(tests, completerTests...)
		}
		if withTx {
			tests = append(tests, txTests...)
			if mode == storage.ModePhased {
				tests = append(tests, txPhasedTests...)
			}
		}
		return tests
	}
	modes := []storage.Mode{storage.ModePhased}
	if atomicOK {
		modes = append(modes, storage.ModeAtomic)
	}
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			for _, tc := range modeTests(mode) {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					sub := h.New(t)
					tc.run(newSuite(t, sub.Store, sub.Tx, mode))
				})
			}
			if h.LosingReplies != nil && mode == storage.ModePhased {
				for _, tc := range lostReplyTests {
					t.Run(tc.name, func(t *testing.T) {
						t.Parallel()
						store, loseNext := h.LosingReplies(t)
						s := newSuite(t, store, nil, mode)
						s.loseNext = loseNext
						tc.run(s)
					})
				}
			}
			if h.Stalling == nil {
				return
			}
			for _, tc := range stallTests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					store, stall := h.Stalling(t)
					s := newSuite(t, store, nil, mode)
					s.stall = stall
					tc.run(s)
				})
			}
		})
	}
	t.Run("store", func(t *testing.T) {
		t.Parallel()
		for _, tc := range append(storeTests[:len(storeTests):len(storeTests)], readTests(first.Store)...) {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.run(newSuite(t, h.New(t).Store, nil, storage.ModePhased))
			})
		}
		if !atomicOK {
			t.Run("UnsupportedMode", func(t *testing.T) {
				t.Parallel()
				testUnsupportedMode(newSuite(t, h.New(t).Store, nil, storage.ModeAtomic))
			})
		}
	})
}

// letTimePass waits for d of real time to pass. It is not synchronisation: nothing else
// runs meanwhile, and no goroutine is waited for. Time passing is the case itself (a lease
// or a retention running out), and a SQL store decides that by the database's clock
// (now()), which a test cannot move; so the waits are real, and short.
func letTimePass(d time.Duration) { time.Sleep(d) }

// test is one conformance case.
type test struct {
	name string
	run  func(s *suite)
}

// suite is what a case works with: its own test, store and mode, and the harness's hooks
// that case may use.
type suite struct {
	t     *testing.T
	store storage.Store
	mode  storage.Mode
	ctx   context.Context
	tx    *TxHooks               // nil unless the store shares a transaction (txTests)
	stall func() (resume func()) // the stallTests' store's, nil otherwise
	// loseNext is the lostReplyTests' store's, nil otherwise.
	loseNext func() (lost <-chan struct{})
}

func newSuite(t *testing.T, store storage.Store, tx *TxHooks, mode storage.Mode) *suite {
	require.NotNil(t, store, "newStore returned nil")
	return &suite{t: t, store: store, mode: mode, ctx: t.Context(), tx: tx}
}

// scope is the scope of every claim the suite builds unless a case says otherwise.
const scope = "storetest"

// claim builds a claim in the suite's mode for a key unique to the subtest, with the
// fingerprint of body and sensible defaults.
func (s *suite) claim(key, body string) storage.Claim {
	return storage.Claim{
		Scope:       scope,
		Key:         keyFor(s.t, key),
		Fingerprint: fingerprint(body),
		Method:      http.MethodPost,
		Path:        "/orders",
		Mode:        s.mode,
		Lease:       defaultLease,
		LockWait:    defaultLockWait,
		Retention:   defaultRetention,
	}
}

// keyFor derives a key from the subtest's name, hashed when too long for a 255-character
// key column.
func keyFor(t *testing.T, suffix string) string {
	k := t.Name() + "/" + suffix
	if len(k) > 200 {
		sum := sha256.Sum256([]byte(k))
		k = hex.EncodeToString(sum[:]) + "/" + suffix
	}
	return k
}

// fingerprint is a 32-byte SHA-256, the size the engine hands stores.
func fingerprint(body string) []byte {
	sum := sha256.Sum256([]byte("POST /orders\n" + body))
	return sum[:]
}

// outcome is what one Claim returned, for goroutines that may not fail the test themselves.
type outcome struct {
	c       storage.Claim // what was claimed
	verdict storage.Verdict
	lock    storage.Lock
	rec     *storage.Record
	err     error
}

// claimOnce claims c once, as the engine does: with a deadline in ctx.
func (s *suite) claimOnce(c storage.Claim) outcome {
	ctx, cancel := context.WithTimeout(s.ctx, c.LockWait+storeTimeout)
	defer cancel()
	claimed, err := s.store.Claim(ctx, c)
	return outcome{c, claimed.Verdict, claimed.Lock, claimed.Record, err}
}

// do claims and checks the result's shape.
func (s *suite) do(c storage.Claim) outcome {
	s.t.Helper()
	o := s.claimOnce(c)
	s.checkShape(o)
	return o
}

// checkShape holds a claim's result to its shape: on success exactly one of lock and
// record, with the verdict that says which (VerdictAbsent or VerdictTakeOver, as the lock
// reports Resumed, with a lock; the verdict Decide gives the record, time left out, with
// a record); on error neither.
func (s *suite) checkShape(o outcome) {
	s.t.Helper()
	if o.err != nil {
		require.Nil(s.t, o.lock, "Claim returned a Lock together with error %v", o.err)
		require.Nil(s.t, o.rec, "Claim returned a Record together with error %v", o.err)
		return
	}
	if o.lock != nil {
		require.Nil(s.t, o.rec, "Claim returned both a Lock and a Record; when err is nil it must return exactly one")
		want := storage.VerdictAbsent
		if o.lock.Resumed() {
			want = storage.VerdictTakeOver
		}
		require.Equal(s.t, want, o.verdict, "the verdict of a claim that returned a Lock (Resumed %v)", o.lock.Resumed())
		return
	}
	require.NotNil(s.t, o.rec, "Claim returned neither a Lock, a Record nor an error")
	require.Equal(s.t, storage.Decide(o.rec, o.c, time.Time{}), o.verdict,
		"the verdict of a claim that returned a Record (state %v) must be Decide's on it", o.rec.State)
}

// mustLock claims c and requires a Lock. The lock is released when the subtest ends
// unless the subtest completed or released it.
func (s *suite) mustLock(c storage.Claim) *held {
	s.t.Helper()
	o := s.do(c)
	require.NoError(s.t, o.err, "Claim")
	require.NotNil(s.t, o.lock, "Claim returned a Record (state %v), want a Lock", recState(o.rec))
	return s.track(o.lock)
}

// mustFresh claims c and requires a Lock on a fresh key: not taken over, recovery point
// RecoveryStarted.
func (s *suite) mustFresh(c storage.Claim) *held {
	s.t.Helper()
	l := s.mustLock(c)
	require.False(s.t, l.Resumed(), "a fresh claim must not report Resumed")
	require.Equal(s.t, storage.RecoveryStarted, l.RecoveryPoint(), "recovery point of a fresh claim")
	return l
}

// mustRecord claims c and requires a Record.
func (s *suite) mustRecord(c storage.Claim) *storage.Record {
	s.t.Helper()
	o := s.do(c)
	require.NoError(s.t, o.err, "Claim")
	if o.lock != nil {
		s.track(o.lock)
		require.FailNow(s.t, "Claim returned a Lock, want a Record",
			"taken over: %v, recovery point %q", o.lock.Resumed(), o.lock.RecoveryPoint())
	}
	return o.rec
}

// mustStarted claims c and requires the record of a started key whose lease is live.
func (s *suite) mustStarted(c storage.Claim, want storage.Claim, point string) *storage.Record {
	s.t.Helper()
	rec := s.mustRecord(c)
	s.checkRecord(rec, want, storage.StateStarted)
	require.Equal(s.t, point, rec.RecoveryPoint, "recovery point")
	require.True(s.t, rec.LockedUntil.After(time.Now()),
		"LockedUntil %v of a live lease must be in the future", rec.LockedUntil)
	require.True(s.t, rec.LockedUntil.Before(time.Now().Add(want.Lease+clockSlack)),
		"LockedUntil %v is further away than the lease %v", rec.LockedUntil, want.Lease)
	require.Nil(s.t, rec.Response, "a started record has no response")
	return rec
}

// mustReplay claims c and requires the completed record of want holding resp.
func (s *suite) mustReplay(c storage.Claim, want storage.Claim, resp *storage.Response) *storage.Record {
	s.t.Helper()
	rec := s.mustRecord(c)
	s.checkRecord(rec, want, storage.StateCompleted)
	require.False(s.t, rec.CompletedAt.IsZero(), "CompletedAt of a completed record")
	requireResponse(s.t, resp, rec.Response)
	return rec
}

// checkRecord checks the fields a record carries from the claim that created it.
func (s *suite) checkRecord(rec *storage.Record, want storage.Claim, state storage.State) {
	s.t.Helper()
	require.NotNil(s.t, rec)
	require.Equal(s.t, state, rec.State, "state")
	require.Equal(s.t, want.Scope, rec.Scope, "scope")
	require.Equal(s.t, want.Key, rec.Key, "key")
	require.Equal(s.t, want.Fingerprint, rec.Fingerprint, "fingerprint")
	require.Equal(s.t, want.Method, rec.Method, "method")
	require.Equal(s.t, want.Path, rec.Path, "path")
	require.WithinDuration(s.t, time.Now(), rec.CreatedAt, clockSlack, "CreatedAt must be about now")
}

func recState(rec *storage.Record) any {
	if rec == nil {
		return nil
	}
	return rec.State
}

// held wraps a Lock so the subtest releases it at the end if the case did not complete
// or release it (an atomic lock holds a transaction that would block dropping the
// subtest's table).
type held struct {
	storage.Lock
	ended atomic.Bool
}

func (s *suite) track(l storage.Lock) *held {
	h := &held{Lock: l}
	s.t.Cleanup(func() {
		if !h.ended.Load() {
			_ = h.Lock.Release(context.Background())
		}
	})
	return h
}

// Complete calls the lock's Complete and remembers success.
func (h *held) Complete(ctx context.Context, r *storage.Response) error {
	err := h.Lock.Complete(ctx, r)
	if err == nil {
		h.ended.Store(true)
	}
	return err
}

// Release calls the lock's Release and remembers success.
func (h *held) Release(ctx context.Context) error {
	err := h.Lock.Release(ctx)
	if err == nil {
		h.ended.Store(true)
	}
	return err
}

// complete completes l with a copy of r and requires success.
func (s *suite) complete(l *held, r *storage.Response) {
	s.t.Helper()
	require.NoError(s.t, l.Complete(s.ctx, cloneResponse(r)), "Complete")
}

func cloneResponse(r *storage.Response) *storage.Response {
	return &storage.Response{Status: r.Status, Header: r.Header.Clone(), Body: bytes.Clone(r.Body)}
}

// created is a response as a handler creating an order answers.
func created(id string) *storage.Response {
	return &storage.Response{
		Status: http.StatusCreated,
		Header: http.Header{
			"Content-Type": {"application/json"},
			"Location":     {"/orders/" + id},
		},
		Body: []byte(`{"id":"` + id + `","status":"created"}`),
	}
}

// ctxKey marks contexts, to check that a store passes the caller's values on.
type ctxKey struct{}

func (s *suite) markedCtx() context.Context {
	return context.WithValue(s.ctx, ctxKey{}, s.t.Name())
}

func (s *suite) requireMarked(ctx context.Context, what string) {
	s.t.Helper()
	require.NotNil(s.t, ctx, "%s returned a nil context", what)
	require.Equal(s.t, s.t.Name(), ctx.Value(ctxKey{}), "%s must keep the caller's context values", what)
}

// errBoom is what failing phases return.
var errBoom = errors.New("storetest: phase failed")
