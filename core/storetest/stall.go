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
// (Harness.Stalling): Complete and Release keep the deadline the engine puts in their
// context, which is never cancelled.
var stallTests = []test{
	{"CompleteBoundedByDeadline", testCompleteBounded},
	{"ReleaseBoundedByDeadline", testReleaseBounded},
}

// stallTimeout is the deadline the stall tests give Complete and Release, as the engine
// gives its StoreTimeout: short enough to wait out.
const stallTimeout = time.Second

// stallFailSafe is how long a stall test lets a call wait before it makes the database
// answer again: part of the scenario (a pause of a few seconds), not a time limit on the
// store. A call still waiting then is one that its deadline did not bound (a fixed bound
// of the store's own, say), and it then returns without the error the test requires.
const stallFailSafe = 4 * stallTimeout

// bounded is a context as the engine gives Complete and Release: never cancelled,
// with a deadline of stallTimeout.
func (s *suite) bounded() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(s.ctx), stallTimeout)
}

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
	require.Error(s.t, err, "%s against a database that stopped answering must give up at its deadline with an error", what)
	var ne net.Error
	timedOut := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
	require.True(s.t, timedOut, "%s against a stalled database: the error must say the bound ran out (context.DeadlineExceeded or a network timeout), got %v", what, err)
}

// testCompleteBounded: a Complete sent to a database that stops answering returns at its
// ctx's deadline with a timeout error, although its ctx is never cancelled (the engine's
// is not). Its outcome is then unknown (the command may still land once the database
// answers, as a paused server runs what it had received): after the Release the engine
// sends next, the key is either completed with this response or free again, never left
// in between.
func testCompleteBounded(s *suite) {
	c := s.claim("k", "a")
	l := s.mustFresh(c)
	err := s.whileStalled(func() error {
		ctx, cancel := s.bounded()
		defer cancel()
		return l.Complete(ctx, created("1"))
	})
	s.requireTimedOut(err, "Complete")
	ctx, cancel := s.bounded()
	_ = l.Release(ctx) // as the engine does after a failed Complete
	cancel()
	o := s.do(c)
	require.NoError(s.t, o.err, "Claim after the database answers again")
	if o.lock != nil {
		s.track(o.lock)
		require.False(s.t, o.lock.Resumed(), "after the Release, a key whose completion did not land is free")
		return
	}
	s.checkRecord(o.rec, c, storage.StateCompleted)
	requireResponse(s.t, created("1"), o.rec.Response)
}

// testReleaseBounded: a Release sent to a database that stops answering returns at its
// ctx's deadline with a timeout error, although its ctx is never cancelled.
func testReleaseBounded(s *suite) {
	c := s.claim("k", "a")
	l := s.mustFresh(c)
	if s.mode == storage.ModePhased {
		require.NoError(s.t, l.Phase(s.ctx, "charged", noop)) // Release then keeps the key: an UPDATE
	}
	err := s.whileStalled(func() error {
		ctx, cancel := s.bounded()
		defer cancel()
		return l.Release(ctx)
	})
	s.requireTimedOut(err, "Release")
}
