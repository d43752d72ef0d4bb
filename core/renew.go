package core

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idemkit/idem/core/storage"
)

// renewal keeps a phased lock's lease alive while the operation's work runs: every
// Lease/3 it calls Lock.Renew (fenced by the lease token, as every write), so a phase
// that outlives the lease (a slow provider call) does not let a retry take the key over.
// A renewal that finds the lease taken over stops and remembers it, so the worker learns
// it before its next phase commits (Operation.Phase) and before it records its outcome.
// A renewal that fails otherwise (the database did not answer) is tried again at the
// next tick; the lease may then run out, and the fenced commits are what tell.
//
// It runs on a timer, so an operation shorter than Lease/3 costs no renewal, no goroutine
// and no context.
type renewal struct {
	lock   storage.Lock
	every  time.Duration
	parent context.Context // gives the renewals its values, not its cancellation

	mu      sync.Mutex
	timer   *time.Timer
	ctx     context.Context    // the renewals', made by the first tick
	cancel  context.CancelFunc // ends ctx: stop cuts a renewal in flight short
	stopped bool
	lostErr error // wraps storage.ErrLeaseLost once a renewal found the lease taken over
}

// startRenewal starts renewing lock's lease of length lease until stop. parent gives the
// renewals its values, not its cancellation: a client that hangs up does not end the
// lease of the work still running.
func startRenewal(parent context.Context, lock storage.Lock, lease time.Duration) *renewal {
	r := &renewal{lock: lock, every: max(lease/3, time.Millisecond), parent: parent}
	r.mu.Lock() // the first tick reads r.timer
	r.timer = time.AfterFunc(r.every, r.renew)
	r.mu.Unlock()
	return r
}

// renew is one tick: it renews the lease and schedules the next tick, unless stopped or
// the lease is lost.
func (r *renewal) renew() {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	if r.ctx == nil {
		r.ctx, r.cancel = context.WithCancel(context.WithoutCancel(r.parent))
	}
	ctx := r.ctx
	r.mu.Unlock()
	err := r.lock.Renew(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case errors.Is(err, storage.ErrLeaseLost):
		r.lostErr = err
	case !r.stopped:
		r.timer.Reset(r.every)
	}
}

// lost returns an error wrapping storage.ErrLeaseLost once a renewal found the lease taken over,
// nil until then.
func (r *renewal) lost() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lostErr
}

// stop ends the renewals and returns what lost returns. A renewal in flight is cut short
// (its context cancelled) but not waited for: it may wait for a lock that only the
// operation's completion releases (SQLite's write lock, held by the request's final
// transaction). It may therefore still land while Complete or Release runs, and the
// Lock contract makes that harmless: a completed or released key's lease is not renewed.
func (r *renewal) stop() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	r.timer.Stop()
	if r.cancel != nil {
		r.cancel()
	}
	return r.lostErr
}
