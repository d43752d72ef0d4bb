package storetest

import (
	"context"
	"errors"
	"net"
	"os"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core/storage"
)

// stallTests run in every mode the store supports, on a store whose database can stall
// (Harness.Stalling): the bound storage.Claim.Timeout puts on Complete and Release.
var stallTests = []test{
	{"CompleteBoundedByTimeout", testCompleteBounded},
	{"ReleaseBoundedByTimeout", testReleaseBounded},
}

// stallTimeout is the Claim.Timeout of the stall tests' claims: long enough for the
// claim itself on a loaded machine, short enough to wait out.
const stallTimeout = time.Second

// stallFailSafe is how long a stall test lets a call wait before it makes the database
// answer again: part of the scenario (a pause of a few seconds), not a time limit on the
// store. A call still waiting then is one that Claim.Timeout did not bound (a fixed bound
// of the store's own, say), and it then returns without the error the test requires.
const stallFailSafe = 4 * stallTimeout

// whileStalled runs call while the database is stalled and returns its error. If call
// has not returned after stallFailSafe, the database answers again and call's error is
// whatever it then returns.
func (s *suite) whileStalled(call func() error) error {
	s.t.Helper()
	resume := s.stall()
	defer resume()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return err
	case <-time.After(stallFailSafe):
		resume()
		return <-done
	}
}

// requireTimedOut checks that err reports a bound that ran out: context.DeadlineExceeded
// (a context deadline) or a network timeout (a connection deadline).
func (s *suite) requireTimedOut(err error, what string) {
	s.t.Helper()
	require.Error(s.t, err, "%s against a database that stopped answering must give up after Claim.Timeout with an error", what)
	var ne net.Error
	timedOut := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
	require.True(s.t, timedOut, "%s against a stalled database: the error must say the bound ran out (context.DeadlineExceeded or a network timeout), got %v", what, err)
}

// testCompleteBounded: a Complete sent to a database that stops answering returns after
// Claim.Timeout with a timeout error, although its ctx is never cancelled (the engine's
// is not). Its outcome is then unknown (the command may still land once the database
// answers, as a paused server runs what it had received): after the Release the engine
// sends next, the key is either completed with this response or free again, never left
// in between.
func testCompleteBounded(s *suite) {
	c := s.claim("k", "a")
	c.Timeout = stallTimeout
	l := s.mustFresh(c)
	err := s.whileStalled(func() error { return l.Complete(context.WithoutCancel(s.ctx), created("1")) })
	s.requireTimedOut(err, "Complete")
	_ = l.Release(context.WithoutCancel(s.ctx)) // as the engine does after a failed Complete
	again := c
	again.Timeout = 0 // the store reconnects first: not the bound under test
	o := s.do(again)
	require.NoError(s.t, o.err, "Claim after the database answers again")
	if o.lock != nil {
		s.track(o.lock)
		require.False(s.t, o.lock.Resumed(), "after the Release, a key whose completion did not land is free")
		return
	}
	s.checkRecord(o.rec, c, storage.StateCompleted)
	requireResponse(s.t, created("1"), o.rec.Response)
}

// testReleaseBounded: a Release sent to a database that stops answering returns after
// Claim.Timeout with a timeout error, although its ctx is never cancelled.
func testReleaseBounded(s *suite) {
	c := s.claim("k", "a")
	c.Timeout = stallTimeout
	l := s.mustFresh(c)
	if s.mode == storage.ModePhased {
		require.NoError(s.t, l.Phase(s.ctx, "charged", noop)) // Release then keeps the key: an UPDATE
	}
	err := s.whileStalled(func() error { return l.Release(context.WithoutCancel(s.ctx)) })
	s.requireTimedOut(err, "Release")
}
