package core

import (
	"context"
	"sync"
	"time"
)

// storeCtx is the context of one store call (Claim, Lookup, Complete, Release): its
// parent's values, the parent's cancellation unless detached, and a deadline. It lives in
// the operation's state (call.ctx, run.ctx) and allocates nothing until a store asks for Done:
// a store that only reads Err (memstore) costs a clock read, and one that selects on
// Done (a database driver) gets a channel and a timer then, as from context.WithTimeout.
// Every field but those under mu is set before the context is handed out.
type storeCtx struct {
	parent   context.Context
	deadline time.Time
	detached bool // the parent's cancellation and deadline do not apply (context.WithoutCancel)

	mu    sync.Mutex
	err   error         // set once: the deadline passed, the parent was cancelled, or the call ended
	done  chan struct{} // made by the first Done, closed when err is set
	timer *time.Timer   // the deadline's, once Done was asked for
	stop  func() bool   // stops watching the parent, once Done was asked for
}

// storeCtx returns a context for one store call of c, bounded by d: parent's values, and
// its cancellation unless detached. The caller ends it (end) when the call returns.
func (c *call) storeCtx(parent context.Context, d time.Duration, detached bool) *storeCtx {
	var sc *storeCtx
	switch {
	case !c.ctxUsed:
		sc, c.ctxUsed = &c.ctx, true
	case c.run != nil && !c.run.ctxUsed:
		sc, c.run.ctxUsed = &c.run.ctx, true
	default: // past the two calls most operations make (a claim's retries, a release after a failed completion, a twin's lookup)
		sc = new(storeCtx)
	}
	sc.parent, sc.deadline, sc.detached = parent, time.Now().Add(d), detached
	return sc
}

// Deadline returns the call's deadline, or the parent's when that is earlier.
func (sc *storeCtx) Deadline() (time.Time, bool) {
	if !sc.detached {
		if d, ok := sc.parent.Deadline(); ok && d.Before(sc.deadline) {
			return d, true
		}
	}
	return sc.deadline, true
}

// Value returns the parent's values. A detached context hides the parent's cancellation
// from context.Cause, as context.WithoutCancel's does.
func (sc *storeCtx) Value(key any) any {
	if sc.detached && key == cancelCtxKey {
		return nil
	}
	return sc.parent.Value(key)
}

// Err returns nil until the deadline passes, the parent is cancelled (unless detached)
// or the call ends, and then why, for ever.
func (sc *storeCtx) Err() error {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.check()
}

// check sets err when the parent's cancellation or the deadline have come, and returns
// it. The caller holds mu.
func (sc *storeCtx) check() error {
	if sc.err == nil {
		if !sc.detached && sc.parent.Err() != nil {
			sc.cancel(sc.parent.Err())
		} else if time.Until(sc.deadline) <= 0 { // the monotonic clock alone
			sc.cancel(context.DeadlineExceeded)
		}
	}
	return sc.err
}

// Done returns a channel closed when Err becomes non-nil; the first call starts the
// deadline's timer and watches the parent.
func (sc *storeCtx) Done() <-chan struct{} {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.done != nil {
		return sc.done
	}
	err := sc.check()
	sc.done = make(chan struct{})
	if err != nil {
		close(sc.done)
		return sc.done
	}
	sc.timer = time.AfterFunc(time.Until(sc.deadline), func() { sc.end(context.DeadlineExceeded) })
	if !sc.detached && sc.parent.Done() != nil {
		sc.stop = context.AfterFunc(sc.parent, func() { sc.end(sc.parent.Err()) })
	}
	return sc.done
}

// end cancels the context with err (the call returned: context.Canceled, as the cancel
// function of context.WithTimeout); once cancelled, it stays as it is.
func (sc *storeCtx) end(err error) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.cancel(err)
}

// cancel sets err, closes done and stops watching. The caller holds mu.
func (sc *storeCtx) cancel(err error) {
	if sc.err != nil {
		return
	}
	sc.err = err
	if sc.done != nil {
		close(sc.done)
	}
	if sc.timer != nil {
		sc.timer.Stop()
	}
	if sc.stop != nil {
		sc.stop()
	}
}

// cancelCtxKey is the key the context package asks a context's Value for when
// context.Cause looks for a cancelled parent's cause (its own, unexported). A detached
// storeCtx answers it with nil, so that Cause reports the store call's own error and not
// the cause of a parent whose cancellation does not apply.
var cancelCtxKey = func() any {
	var spy causeSpy
	_ = context.Cause(&spy)
	return spy.key
}()

// causeSpy records the key context.Cause asks for.
type causeSpy struct {
	context.Context
	key any
}

func (s *causeSpy) Err() error { return context.Canceled }

func (s *causeSpy) Value(key any) any {
	s.key = key
	return nil
}
