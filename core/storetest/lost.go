package storetest

import (
	"context"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core/storage"
)

// lostReplyTests run in phased mode on a store whose connection can lose a reply
// (Harness.LosingReplies): what Release does when a write of the lock's landed but its
// caller was told of an error.
var lostReplyTests = []test{
	{"ReleaseAfterLostCompleteReply", testReleaseAfterLostCompleteReply},
	{"LostReleaseReply", testLostReleaseReply},
}

// lose arms the store's connection to lose the next reply and returns a check, to call
// once the call whose reply was lost returned, that the harness did lose it.
func (s *suite) lose() (requireLost func()) {
	lost := s.loseNext()
	return func() {
		s.t.Helper()
		select {
		case <-lost:
		case <-time.After(storeTimeout):
			require.FailNow(s.t, "Harness.LosingReplies lost no reply: the rule was not exercised")
		}
	}
}

// engineCtx is a context as the engine gives Complete and Release: never cancelled,
// bounded by its store timeout.
func (s *suite) engineCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(s.ctx), storeTimeout)
}

// testReleaseAfterLostCompleteReply: a phased Complete whose completion commits but whose
// reply is lost returns an error (or nil, where the driver resends it and the store
// recognises its own completion); the engine then calls Release, as after any failed
// Complete. That Release must not report ErrLeaseLost (nobody took the key over: the work
// committed) and must change nothing: a later claim replays the recorded response.
func testReleaseAfterLostCompleteReply(s *suite) {
	c := s.claim("k", "a")
	l := s.mustFresh(c)
	requireLost := s.lose()
	ctx, cancel := s.engineCtx()
	defer cancel()
	err := l.Complete(ctx, cloneResponse(created("1")))
	requireLost()
	require.NoError(s.t, l.Lock.Release(ctx), "Release after a Complete whose reply was lost (Complete returned %v)", err)
	s.mustReplay(c, c, created("1"))
	s.mustReplay(s.claim("k", "b"), c, created("1"))
}

// testLostReleaseReply: a Release that landed but whose reply was lost reports success,
// not ErrLeaseLost, whether the driver sent it again or the caller calls Release again
// after the error; and the key is released: deleted when no phase committed (a claim
// with another fingerprint gets a fresh lock), otherwise free to take over at once,
// resuming from the committed phase.
func testLostReleaseReply(s *suite) {
	for _, progress := range []bool{false, true} {
		name := "fresh"
		if progress {
			name = "after-phase"
		}
		c := s.claim(name, "a")
		l := s.mustFresh(c)
		if progress {
			require.NoError(s.t, l.Phase(s.ctx, "charged", noop), "Phase")
		}
		requireLost := s.lose()
		ctx, cancel := s.engineCtx()
		err := l.Release(ctx)
		requireLost()
		if err != nil {
			require.NotErrorIs(s.t, err, storage.ErrLeaseLost, "%s: a Release that landed but whose reply was lost", name)
			require.NoError(s.t, l.Release(ctx), "%s: Release called again after its reply was lost (first: %v)", name, err)
		}
		cancel()
		if !progress {
			s.mustFresh(s.claim(name, "b"))
			continue
		}
		l2 := s.mustLock(c)
		require.True(s.t, l2.Resumed(), "%s: the claim after the Release must take over", name)
		require.Equal(s.t, "charged", l2.RecoveryPoint(), "%s: the recovery point the Release kept", name)
	}
}
