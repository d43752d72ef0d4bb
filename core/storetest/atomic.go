package storetest

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core/storage"
)

// atomicTests run in ModeAtomic only: a twin waits for the holder's transaction.
var atomicTests = []test{
	{"InProgressWaitRunsOut", testWaitRunsOut},
	{"TwinSeesCompletion", testTwinSeesCompletion},
	{"TwinClaimsAfterRelease", testTwinClaimsAfterRelease},
	{"ReleaseAfterPhase", testAtomicReleaseAfterPhase},
	{"RenewWithoutLease", testRenewWithoutLease},
}

// shortWait is the lock wait of a twin expected to give up.
const shortWait = 200 * time.Millisecond

// twinWaits is how long a test watches a twin keep waiting for the holder's open
// transaction before the holder finishes. It is an assertion, not a head start: a twin
// that answers meanwhile fails the test. (A twin that has not reached the database's
// lock yet cannot be told from one waiting on it, so the watch is long enough for the
// claim to get there.)
const twinWaits = 200 * time.Millisecond

// testWaitRunsOut: a twin claiming while the holder's transaction is open gives up after
// its lock wait with ErrInProgress, and the holder is not disturbed.
func testWaitRunsOut(s *suite) {
	c := s.claim("k", "a")
	l := s.mustFresh(c)
	for _, body := range []string{"a", "b"} {
		twin := s.claim("k", body)
		twin.LockWait = shortWait
		o := s.do(twin)
		require.ErrorIs(s.t, o.err, storage.ErrInProgress, "a twin of an open transaction, once its lock wait runs out")
	}
	s.complete(l, created("1"))
	s.mustReplay(c, c, created("1"))
}

// twin claims c in a goroutine and returns it, waiting. If the subtest ends without
// collecting the outcome (it failed), a Lock the twin got is released then.
func (s *suite) twin(c storage.Claim) *twin {
	tw := &twin{done: make(chan struct{})}
	go func() {
		defer close(tw.done)
		tw.o = s.claimOnce(c)
	}()
	s.t.Cleanup(func() {
		<-tw.done
		if !tw.taken.Load() && tw.o.lock != nil {
			_ = tw.o.lock.Release(context.Background())
		}
	})
	return tw
}

// twin is a claim running in its own goroutine.
type twin struct {
	done  chan struct{}
	o     outcome
	taken atomic.Bool
}

// answered reports whether the twin's claim has returned.
func (tw *twin) answered() bool {
	select {
	case <-tw.done:
		return true
	default:
		return false
	}
}

// outcome waits for the twin's claim and returns what it got.
func (tw *twin) outcome() outcome {
	<-tw.done
	tw.taken.Store(true)
	return tw.o
}

// requireWaiting checks that the twins keep waiting while the holder's transaction is
// open.
func (s *suite) requireWaiting(twins ...*twin) {
	s.t.Helper()
	require.Never(s.t, func() bool {
		for _, tw := range twins {
			if tw.answered() {
				return true
			}
		}
		return false
	}, twinWaits, twinWaits/20, "a twin answered while the holder's transaction was open: it must wait for it")
}

// testTwinSeesCompletion: twins waiting while the holder completes get the completed
// record, whatever their fingerprint.
func testTwinSeesCompletion(s *suite) {
	c := s.claim("k", "a")
	l := s.mustFresh(c)
	same, other := s.claim("k", "a"), s.claim("k", "b")
	same.LockWait, other.LockWait = 5*time.Second, 5*time.Second
	twins := []*twin{s.twin(same), s.twin(other)}
	s.requireWaiting(twins...)
	s.complete(l, created("1"))
	for _, tw := range twins {
		o := tw.outcome()
		s.checkShape(o)
		require.NoError(s.t, o.err, "a twin waiting for a completion")
		if o.lock != nil {
			s.track(o.lock)
			require.FailNow(s.t, "a twin got a Lock on a key its holder completed")
		}
		s.checkRecord(o.rec, c, storage.StateCompleted)
		requireResponse(s.t, created("1"), o.rec.Response)
	}
}

// testTwinClaimsAfterRelease: a twin waiting while the holder rolls back claims the key.
func testTwinClaimsAfterRelease(s *suite) {
	c := s.claim("k", "a")
	l := s.mustFresh(c)
	retry := s.claim("k", "a")
	retry.LockWait = 5 * time.Second
	tw := s.twin(retry)
	s.requireWaiting(tw)
	require.NoError(s.t, l.Release(s.ctx), "Release")
	o := tw.outcome()
	s.checkShape(o)
	require.NoError(s.t, o.err, "a twin waiting for a rollback")
	require.NotNil(s.t, o.lock, "a twin of a rolled back claim must get the key, got a Record in state %v", recState(o.rec))
	tl := s.track(o.lock)
	require.False(s.t, tl.Resumed())
	require.Equal(s.t, storage.RecoveryStarted, tl.RecoveryPoint())
	s.complete(tl, created("2"))
	s.mustReplay(c, c, created("2"))
}

// testAtomicReleaseAfterPhase: in atomic mode phases commit with everything else, so a
// release rolls them back too and the key is gone.
func testAtomicReleaseAfterPhase(s *suite) {
	c := s.claim("k", "a")
	l := s.mustFresh(c)
	require.NoError(s.t, l.Phase(s.ctx, "charged", noop))
	require.NoError(s.t, l.Release(s.ctx), "Release")
	s.mustFresh(s.claim("k", "b"))
}

// testRenewWithoutLease: an atomic lock has no lease (its transaction holds the key), so
// Renew does nothing and succeeds, and the lock completes as usual.
func testRenewWithoutLease(s *suite) {
	c := s.claim("k", "a")
	l := s.mustFresh(c)
	require.NoError(s.t, l.Renew(s.ctx), "Renew of an atomic lock")
	s.complete(l, created("1"))
	s.mustReplay(c, c, created("1"))
}
