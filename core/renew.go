package core

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/idemkit/idem/core/storage"
)

// lease is an operation's hold on its key, and the one place the engine knows it lost
// it: a phase's fenced commit or a renewal that found the key taken over records it
// (lose), and the engine reads it (lost) before each phase's function runs, after the
// function (so that its phase commits nothing), and before the outcome is recorded.
//
// In phased mode it also renews the lease while the operation's work runs: every Lease/3
// it calls Lock.Renew (fenced by the lease token, as every write), so a phase that
// outlives the lease (a slow provider call) does not let a retry take the key over. A
// renewal that fails otherwise (the database did not answer) is tried again at the next
// tick; the lease may then run out, and the fenced commits are what tell. It runs on a
// timer, so an operation shorter than Lease/3 costs no renewal, no goroutine and no
// context. In atomic mode there is no lease to renew (a crash rolls the claim back), but
// the state is kept the same way.
type lease struct {
	lock   storage.Lock
	every  time.Duration   // 0: nothing to renew
	parent context.Context // gives the renewals its values, not its cancellation
	e      *Engine         // its StoreTimeout bounds each renewal; its Logger hears of a loss
	c      *call

	mu      sync.Mutex
	lostErr error // wraps ErrLeaseLost once the key is known to be another worker's
	timer   *time.Timer
	cancel  context.CancelFunc // ends the renewal in flight: stop cuts it short
	stopped bool
}

// start begins renewing lock's lease of length d (0: nothing to renew) for c until stop.
// parent gives the renewals its values, not its cancellation: a client that hangs up does
// not end the lease of the work still running.
func (l *lease) start(parent context.Context, e *Engine, c *call, lock storage.Lock, d time.Duration) {
	l.lock, l.parent, l.e, l.c = lock, parent, e, c
	if d <= 0 {
		return
	}
	l.every = max(d/3, time.Millisecond)
	l.mu.Lock() // the first tick reads l.timer
	l.timer = time.AfterFunc(l.every, l.renew)
	l.mu.Unlock()
}

// renew is one tick: it renews the lease, bounded by the store timeout, and schedules the
// next tick, unless stopped or the lease is lost.
func (l *lease) renew() {
	l.mu.Lock()
	if l.stopped || l.lostErr != nil {
		l.mu.Unlock()
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(l.parent), l.e.cfg.StoreTimeout)
	l.cancel = cancel
	l.mu.Unlock()
	err := l.lock.Renew(ctx)
	cancel()
	if errors.Is(err, storage.ErrLeaseLost) {
		l.lose(err)
		l.e.cfg.Logger.LogAttrs(l.parent, slog.LevelInfo, "idem: a lease renewal found the key taken over by another worker; no further phase of this operation runs",
			l.e.attrs(l.c, err)...)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.stopped {
		l.timer.Reset(l.every)
	}
}

// lose records that the key was taken over, err wrapping ErrLeaseLost; the first
// record stays.
func (l *lease) lose(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lostErr == nil {
		l.lostErr = err
	}
}

// lost returns an error wrapping ErrLeaseLost once the key is known to be another
// worker's, nil until then.
func (l *lease) lost() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lostErr
}

// stop ends the renewals once the operation's work has returned, before its outcome is
// recorded or its key released. A renewal in flight is cut short (its context cancelled)
// but not waited for: it may wait for a lock that only the operation's completion
// releases (SQLite's write lock, held by the request's final transaction). It may
// therefore still land while Complete or Release runs, and the Lock contract makes that
// harmless: a completed or released key's lease is not renewed.
func (l *lease) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	if l.timer != nil {
		l.timer.Stop()
	}
	if l.cancel != nil {
		l.cancel()
	}
}
