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
// tick; the lease may then run out, and the fenced commits are what tell. It runs on the
// engine's schedule (renewals), so an operation shorter than Lease/3 costs no renewal, no
// goroutine, no timer and no context. In atomic mode there is no lease to renew (a crash rolls the claim back), but
// the state is kept the same way.
type lease struct {
	lock   storage.Lock
	every  time.Duration   // 0: nothing to renew
	parent context.Context // gives the renewals its values, not its cancellation
	e      *Engine         // its StoreTimeout bounds each renewal; its Logger hears of a loss
	c      *call

	mu      sync.Mutex
	lostErr error              // wraps ErrLeaseLost once the key is known to be another worker's
	cancel  context.CancelFunc // ends the renewal in flight: stop cuts it short
	stopped bool

	// The engine's renewals (under its mu): when the next renewal is due, and the list.
	due        time.Time
	next, prev *lease
	listed     bool
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
	e.renewals.add(l, time.Now())
}

// renew is one renewal, in a goroutine of its own: it renews the lease, bounded by the
// store timeout, and schedules the next, unless stopped or the lease is lost.
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
		l.e.renewals.add(l, time.Now())
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
	if l.every > 0 {
		l.e.renewals.remove(l)
	}
	if l.cancel != nil {
		l.cancel()
	}
}

// renewals is an engine's schedule of lease renewals: the leases of its running
// operations in one list, in the order they are due (all have the same period, so a
// lease added is due last), and one timer, set for the first. An operation adds its
// lease when its work starts and removes it when the work returns: a list link each way
// and no timer or closure of its own, so an operation shorter than Lease/3 allocates
// nothing for its lease. A lease that comes due is renewed in a goroutine of its own
// (a slow store delays no other renewal), which adds it again.
//
// The timer belongs to the synctest bubble (testing/synctest) that made it: an Engine
// whose operations renew in more than one bubble renews only in that one, so a test
// that relies on renewals makes its Engine inside its bubble.
type renewals struct {
	mu          sync.Mutex
	first, last *lease
	timer       *time.Timer // made by the first lease added; set for first's due time when armed
	armed       bool
}

// add schedules l's next renewal, l.every after now. The caller holds l.mu or owns l.
func (r *renewals) add(l *lease, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l.due, l.next, l.prev, l.listed = now.Add(l.every), nil, r.last, true
	if r.last != nil {
		r.last.next = l
	} else {
		r.first = l
	}
	r.last = l
	if !r.armed {
		r.arm(l.every)
	}
}

// remove takes l off the schedule, if it is on it.
func (r *renewals) remove(l *lease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unlink(l)
}

// unlink takes l off the list. The caller holds mu.
func (r *renewals) unlink(l *lease) {
	if !l.listed {
		return
	}
	if l.prev != nil {
		l.prev.next = l.next
	} else {
		r.first = l.next
	}
	if l.next != nil {
		l.next.prev = l.prev
	} else {
		r.last = l.prev
	}
	l.next, l.prev, l.listed = nil, nil, false
}

// arm sets the timer to fire in d. The caller holds mu.
func (r *renewals) arm(d time.Duration) {
	if r.timer == nil {
		r.timer = time.AfterFunc(d, r.fire)
	} else {
		r.timer.Reset(d)
	}
	r.armed = true
}

// fire renews every lease that is due, and sets the timer for the next one.
func (r *renewals) fire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.armed = false
	now := time.Now()
	for r.first != nil && !r.first.due.After(now) {
		l := r.first
		r.unlink(l)
		go l.renew()
	}
	if r.first != nil {
		r.arm(r.first.due.Sub(now))
	}
}
