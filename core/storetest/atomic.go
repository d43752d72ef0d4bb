package storetest

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/core/storage"
)

// atomicTests run in ModeAtomic only: a twin waits for the holder's transaction.
var atomicTests = []test{
	{"InProgressWaitRunsOut", testWaitRunsOut},
	{"TwinSeesCompletion", testTwinSeesCompletion},
	{"TwinClaimsAfterRelease", testTwinClaimsAfterRelease},
	{"ReleaseAfterPhase", testAtomicReleaseAfterPhase},
}

// shortWait is the lock wait of a twin expected to give up.
const shortWait = 200 * time.Millisecond

// twinHeadStart is how long a test lets a twin start waiting before the holder finishes.
const twinHeadStart = 100 * time.Millisecond

// testWaitRunsOut: a twin claiming while the holder's transaction is open gives up after
// its lock wait with ErrInProgress, and the holder is not disturbed.
func testWaitRunsOut(s *suite) {
	c := s.claim("k", "a")
	l := s.mustFresh(c)
	for _, body := range []string{"a", "b"} {
		twin := s.claim("k", body)
		twin.LockWait = shortWait
		o := s.do(twin)
		mustErrorIs(s.t, o.err, storage.ErrInProgress, "a twin of an open transaction, once its lock wait runs out")
	}
	s.complete(l, created("1"))
	s.mustReplay(c, c, created("1"))
}

// twin claims c in a goroutine; wait hands back what it got. If the subtest ends
// without waiting (it failed), a Lock the twin got is released then.
func (s *suite) twin(c storage.Claim) (wait func() outcome) {
	done := make(chan struct{})
	var o outcome
	var taken atomic.Bool
	go func() {
		defer close(done)
		o.lock, o.rec, o.err = s.store.Claim(s.ctx, c)
	}()
	s.t.Cleanup(func() {
		<-done
		if !taken.Load() && o.lock != nil {
			_ = o.lock.Release(context.Background())
		}
	})
	return func() outcome {
		<-done
		taken.Store(true)
		return o
	}
}

// testTwinSeesCompletion: twins waiting while the holder completes get the completed
// record, whatever their fingerprint.
func testTwinSeesCompletion(s *suite) {
	c := s.claim("k", "a")
	l := s.mustFresh(c)
	same, other := s.claim("k", "a"), s.claim("k", "b")
	same.LockWait, other.LockWait = 5*time.Second, 5*time.Second
	gotSame, gotOther := s.twin(same), s.twin(other)
	time.Sleep(twinHeadStart)
	s.complete(l, created("1"))
	for _, wait := range []func() outcome{gotSame, gotOther} {
		o := wait()
		s.checkShape(o)
		mustNoError(s.t, o.err, "a twin waiting for a completion")
		if o.lock != nil {
			s.track(o.lock)
			s.t.Fatal("a twin got a Lock on a key its holder completed")
		}
		s.checkRecord(o.rec, c, storage.StateCompleted)
		requireResponse(s.t, created("1"), o.rec.Response)
	}
}

// testTwinClaimsAfterRelease: a twin waiting while the holder rolls back claims the key.
func testTwinClaimsAfterRelease(s *suite) {
	c := s.claim("k", "a")
	l := s.mustFresh(c)
	twin := s.claim("k", "a")
	twin.LockWait = 5 * time.Second
	got := s.twin(twin)
	time.Sleep(twinHeadStart)
	mustNoError(s.t, l.Release(s.ctx), "Release")
	o := got()
	s.checkShape(o)
	mustNoError(s.t, o.err, "a twin waiting for a rollback")
	mustNotNil(s.t, o.lock, "a twin of a rolled back claim must get the key, got a Record in state %v", recState(o.rec))
	tl := s.track(o.lock)
	mustFalse(s.t, tl.TakenOver())
	mustEqual(s.t, storage.RecoveryStarted, tl.RecoveryPoint())
	s.complete(tl, created("2"))
	s.mustReplay(c, c, created("2"))
}

// testAtomicReleaseAfterPhase: in atomic mode phases commit with everything else, so a
// release rolls them back too and the key is gone.
func testAtomicReleaseAfterPhase(s *suite) {
	c := s.claim("k", "a")
	l := s.mustFresh(c)
	mustNoError(s.t, l.Phase(s.ctx, "charged", noop))
	mustNoError(s.t, l.Release(s.ctx), "Release")
	s.mustFresh(s.claim("k", "b"))
}
