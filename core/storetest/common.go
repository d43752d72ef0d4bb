package storetest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core/storage"
)

// commonTests run in every mode the store supports.
var commonTests = []test{
	{"FreshClaim", testFreshClaim},
	{"CompleteThenReplay", testCompleteThenReplay},
	{"CompleteCopiesResponse", testCompleteCopiesResponse},
	{"MismatchOnCompleted", testMismatchOnCompleted},
	{"ReleaseWithoutPhase", testReleaseWithoutPhase},
	{"ReleaseAfterComplete", testReleaseAfterComplete},
	{"ReleaseTwice", testReleaseTwice},
	{"PhaseError", testPhaseError},
	{"PhaseSuccess", testPhaseSuccess},
	{"RetentionAsAbsent", testRetentionAsAbsent},
	{"ScopeIsolation", testScopeIsolation},
	{"Limits", testLimits},
	{"ConcurrentClaims", testConcurrentClaims},
}

// testFreshClaim: a key never seen is claimed with recovery point RecoveryStarted, not
// taken over, and the lock's context keeps the caller's values.
func testFreshClaim(s *suite) {
	c := s.claim("k", "a")
	l := s.mustFresh(c)
	s.requireMarked(l.Context(s.markedCtx()), "Lock.Context")
	s.complete(l, created("1"))
	s.mustReplay(c, c, created("1"))
}

// testCompleteThenReplay: a completed key is replayed with everything it was completed
// with, whatever the body holds.
func testCompleteThenReplay(s *suite) {
	binary := make([]byte, 0, 512)
	for i := range 256 {
		binary = append(binary, byte(i))
	}
	binary = append(binary, 0xff, 0xfe, 0xc3, 0x28, 0xa0, 0xa1, 0xe2, 0x28, 0xa1, 0x00, '\r', '\n', 0x00)
	large := make([]byte, 64<<10)
	for i := range large {
		large[i] = byte(i*7 + i>>8)
	}
	cases := []struct {
		name string
		resp *storage.Response
	}{
		{"json", created("42")},
		{"binary", &storage.Response{
			Status: http.StatusOK,
			Header: http.Header{
				"Content-Type": {"application/octet-stream"},
				"Link":         {`</a>; rel="next"`, `</b>; rel="prev"`},
				"Etag":         {`"v1"`},
			},
			Body: binary,
		}},
		{"empty-nil-header", &storage.Response{Status: http.StatusNoContent}},
		{"empty-body", &storage.Response{Status: http.StatusAccepted, Header: http.Header{}, Body: []byte{}}},
		{"client-error", &storage.Response{
			Status: http.StatusUnprocessableEntity,
			Header: http.Header{"Content-Type": {"application/problem+json"}},
			Body:   []byte(`{"type":"about:blank","title":"invalid amount","status":422}`),
		}},
		{"large", &storage.Response{Status: http.StatusOK, Body: large}},
		{"utf8", &storage.Response{
			Status: http.StatusCreated,
			Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
			Body:   []byte("commande reçue ✓ 注文 🎉"),
		}},
	}
	for _, tc := range cases {
		c := s.claim(tc.name, "body of "+tc.name)
		c.Method, c.Path = http.MethodPatch, "/orders/"+tc.name
		l := s.mustFresh(c)
		s.complete(l, tc.resp)
		s.mustReplay(c, c, tc.resp)
		s.mustReplay(c, c, tc.resp) // a replay changes nothing
	}
}

// testCompleteCopiesResponse: changing the response passed to Complete afterwards does
// not change what is stored.
func testCompleteCopiesResponse(s *suite) {
	want := created("7")
	passed := cloneResponse(want)
	c := s.claim("k", "a")
	l := s.mustFresh(c)
	require.NoError(s.t, l.Complete(s.ctx, passed))

	passed.Status = http.StatusTeapot
	passed.Body[0] = 'X'
	passed.Body = append(passed.Body[:0], "overwritten"...)
	passed.Header["Location"][0] = "/elsewhere"
	passed.Header.Set("Set-Cookie", "session=stolen")
	passed.Header.Del("Content-Type")

	s.mustReplay(c, c, want)
}

// testMismatchOnCompleted: the same key with a different fingerprint gets the completed
// record (the engine answers 422 from its fingerprint).
func testMismatchOnCompleted(s *suite) {
	c := s.claim("k", "amount=10")
	s.complete(s.mustFresh(c), created("1"))
	other := s.claim("k", "amount=99")
	rec := s.mustReplay(other, c, created("1"))
	requireOtherFingerprint(s.t, other.Fingerprint, rec)
}

// testReleaseWithoutPhase: a failed attempt that recorded no phase gives the key up
// entirely; the next claim, even with another fingerprint, gets a fresh lock.
func testReleaseWithoutPhase(s *suite) {
	c := s.claim("k", "a")
	l := s.mustFresh(c)
	require.NoError(s.t, l.Release(s.ctx), "Release")

	other := s.claim("k", "b")
	l2 := s.mustFresh(other)
	s.complete(l2, created("2"))
	s.mustReplay(c, other, created("2"))
}

// testReleaseAfterComplete: Release after a successful Complete does not undo it, whatever
// it returns.
func testReleaseAfterComplete(s *suite) {
	c := s.claim("k", "a")
	l := s.mustFresh(c)
	s.complete(l, created("1"))
	_ = l.Lock.Release(s.ctx)
	s.mustReplay(c, c, created("1"))
	s.mustReplay(s.claim("k", "b"), c, created("1"))
}

// testReleaseTwice: a lock released once and released again changes nothing the second
// time and reports success (nil): the key stays free, or held by whoever claimed it in
// between. So does a Release after a successful Complete, called twice: nil both times,
// and the recorded response stays.
func testReleaseTwice(s *suite) {
	c := s.claim("k", "a")
	l := s.mustFresh(c)
	require.NoError(s.t, l.Release(s.ctx), "Release")
	require.NoError(s.t, l.Lock.Release(s.ctx), "Release again")
	other := s.claim("k", "b")
	l2 := s.mustFresh(other)
	require.NoError(s.t, l.Lock.Release(s.ctx), "Release a third time, while another lock holds the key")
	if s.mode == storage.ModePhased {
		s.mustStarted(other, other, storage.RecoveryStarted)
	}
	s.complete(l2, created("2"))
	s.mustReplay(c, other, created("2"))

	done := s.claim("done", "a")
	l3 := s.mustFresh(done)
	s.complete(l3, created("3"))
	require.NoError(s.t, l3.Lock.Release(s.ctx), "Release after a successful Complete")
	require.NoError(s.t, l3.Lock.Release(s.ctx), "Release again after a successful Complete")
	s.mustReplay(done, done, created("3"))
}

// testPhaseError: a phase whose function fails returns that error and records nothing;
// releasing afterwards gives the key up as if no phase had run.
func testPhaseError(s *suite) {
	c := s.claim("k", "a")
	l := s.mustFresh(c)
	calls := 0
	err := l.Phase(s.ctx, "charged", func(ctx context.Context) error {
		calls++
		return fmt.Errorf("provider said no: %w", errBoom)
	})
	require.ErrorIs(s.t, err, errBoom, "Phase must return the error of its function")
	require.Equal(s.t, 1, calls, "Phase must run its function once")
	if s.mode == storage.ModePhased {
		s.mustStarted(c, c, storage.RecoveryStarted)
	}
	require.NoError(s.t, l.Release(s.ctx), "Release")
	s.mustFresh(s.claim("k", "b"))
}

// testPhaseSuccess: a phase runs its function once with the caller's context values and,
// in phased mode, records its point.
func testPhaseSuccess(s *suite) {
	c := s.claim("k", "a")
	l := s.mustFresh(c)
	for _, point := range []string{"charged", "emailed"} {
		var got context.Context
		calls := 0
		err := l.Phase(s.markedCtx(), point, func(ctx context.Context) error {
			calls++
			got = ctx
			return nil
		})
		require.NoError(s.t, err, "Phase %q", point)
		require.Equal(s.t, 1, calls, "Phase must run its function once")
		s.requireMarked(got, "the context Phase hands its function")
		if s.mode == storage.ModePhased {
			s.mustStarted(c, c, point)
		}
	}
	s.complete(l, created("1"))
	s.mustReplay(c, c, created("1"))
}

// testRetentionAsAbsent: a completed key older than the claim's retention counts as
// absent: the claim gets a fresh lock and its completion replaces the old record.
func testRetentionAsAbsent(s *suite) {
	c := s.claim("k", "a")
	s.complete(s.mustFresh(c), created("old"))
	letTimePass(pastLease)

	stillKept := s.claim("k", "a")
	stillKept.Retention = defaultRetention
	s.mustReplay(stillKept, c, created("old"))

	again := s.claim("k", "b")
	again.Retention = shortLease
	l := s.mustFresh(again)
	s.complete(l, created("new"))
	s.mustReplay(s.claim("k", "a"), again, created("new"))
}

// testScopeIsolation: the same key in two scopes names two operations.
func testScopeIsolation(s *suite) {
	a, b := s.claim("k", "same"), s.claim("k", "same")
	a.Scope, b.Scope = "tenant-a", "tenant-b"
	la := s.mustFresh(a)
	if s.mode == storage.ModeAtomic {
		// One goroutine holding two write transactions would deadlock a single-writer
		// database (SQLite) on itself; two scopes are still two keys if taken in turn.
		s.complete(la, created("a"))
	}
	lb := s.mustFresh(b)
	if s.mode == storage.ModePhased {
		s.complete(la, created("a"))
		s.mustStarted(b, b, storage.RecoveryStarted)
	}
	s.complete(lb, created("b"))
	s.mustReplay(a, a, created("a"))
	s.mustReplay(b, b, created("b"))

	c := s.claim("k", "same")
	c.Scope = "tenant-c"
	s.mustFresh(c)
}

// concurrentClaimers is how many goroutines claim one key at once.
const concurrentClaimers = 200

// testConcurrentClaims: many goroutines claiming one key at once get exactly one Lock;
// the others a Record (or ErrInProgress when an atomic wait runs out, or ErrTransient).
// Once the winner completes, every claim replays.
func testConcurrentClaims(s *suite) {
	c := s.claim("k", "a")
	if s.mode == storage.ModeAtomic {
		c.LockWait = 10 * defaultLockWait
	}
	resp := created("1")
	start := make(chan struct{})
	results := make([]outcome, concurrentClaimers)
	completeErrs := make([]error, concurrentClaimers)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			<-start
			results[i] = s.claimOnce(c)
			// An atomic twin waits for the winner's transaction: the winner must finish
			// while the others wait. A phased winner holds on until all have answered.
			if lock := results[i].lock; lock != nil && s.mode == storage.ModeAtomic {
				completeErrs[i] = lock.Complete(s.ctx, cloneResponse(resp))
			}
		})
	}
	close(start)
	wg.Wait()

	var winner *held
	locks, records, inProgress, transient := 0, 0, 0, 0
	var winnerErr error
	for i, o := range results {
		s.checkShape(o)
		switch {
		case o.lock != nil:
			locks++
			winner, winnerErr = s.track(o.lock), completeErrs[i]
			if s.mode == storage.ModeAtomic && winnerErr == nil {
				winner.ended.Store(true)
			}
		case o.rec != nil:
			records++
			s.checkRecord(o.rec, c, o.rec.State)
		case errors.Is(o.err, storage.ErrInProgress) && s.mode == storage.ModeAtomic:
			inProgress++
		case errors.Is(o.err, storage.ErrTransient):
			transient++
		default:
			require.FailNow(s.t, "unexpected claim error", "%v", o.err)
		}
	}
	require.Equal(s.t, 1, locks, "exactly one of %d concurrent claims must win (records %d, in progress %d, transient %d)",
		concurrentClaimers, records, inProgress, transient)
	s.t.Logf("%d claimers: 1 lock, %d records, %d in progress, %d transient", concurrentClaimers, records, inProgress, transient)

	if s.mode == storage.ModeAtomic {
		require.NoError(s.t, winnerErr, "winner's Complete")
		for _, o := range results {
			if o.rec != nil {
				require.Equal(s.t, storage.StateCompleted, o.rec.State, "an atomic twin sees only the committed record")
				requireResponse(s.t, resp, o.rec.Response)
			}
		}
	} else {
		for _, o := range results {
			if o.rec != nil {
				require.Equal(s.t, storage.StateStarted, o.rec.State, "the winner holds the key")
			}
		}
		s.complete(winner, resp)
	}

	var replays sync.WaitGroup
	replayed := make([]outcome, 20)
	for i := range replayed {
		replays.Go(func() {
			replayed[i] = s.claimOnce(c)
		})
	}
	replays.Wait()
	for _, o := range replayed {
		s.checkShape(o)
		require.NoError(s.t, o.err, "claim after completion")
		if o.lock != nil {
			s.track(o.lock)
			require.FailNow(s.t, "a claim after completion got a Lock")
		}
		s.checkRecord(o.rec, c, storage.StateCompleted)
		requireResponse(s.t, resp, o.rec.Response)
	}
}
