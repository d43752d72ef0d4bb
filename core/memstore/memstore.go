package memstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/idemkit/idem/core/storage"
)

// errLockEnded is returned by Phase and Complete on a lock that was already completed or
// released.
var errLockEnded = errors.New("memstore: lock already completed or released")

// Store is an in-memory storage.Store for tests and a single process. The zero value is
// not usable; call New. See the package documentation for what it does not protect.
type Store struct {
	now       func() time.Time
	retention time.Duration

	mu   sync.Mutex    // guards keys and every entry in it
	keys map[id]*entry // every key, expired ones included until deleted or replaced
}

// id names a key: the same key in two scopes is two keys.
type id struct{ scope, key string }

// entry is one stored key, in one allocation with what it keeps. Its fields are
// guarded by Store.mu.
type entry struct {
	// owner is the fencing token: a claim or takeover makes a new lock and puts it here,
	// and a lock may change the entry only while it is the owner. Complete, Release and
	// the entry leaving the map (deleted, or replaced by a claim past retention) set it
	// to nil.
	owner *lock

	// rec is the key as claims report it. While the key is started, its RecoveryPoint
	// and LockedUntil change in place and claims get copies. Complete makes it a
	// completed record that never changes again, so every replay shares it.
	rec    storage.Record
	resp   storage.Response // a completed key's, rec.Response once reported
	header []byte           // a completed key's header as Complete kept it, until reported
	fp     [32]byte         // rec.Fingerprint's memory, for a fingerprint of SHA-256's size
	first  lock             // the lock of the claim that made the entry (a takeover makes another)
}

// report returns the key as a claim or a lookup reports it: the shared record of a
// completed key, a copy of a started one's. The caller holds Store.mu.
func (e *entry) report() *storage.Record {
	if e.rec.State == storage.StateCompleted {
		if e.rec.Response == nil {
			// The first report of the key decodes the header Complete kept, as a database
			// store would read its column: most keys are never replayed.
			e.resp.Header, _ = storage.DecodeHeader(e.header) // its own encoding: no error
			e.rec.Response, e.header = &e.resp, nil
		}
		return &e.rec
	}
	rec := e.rec
	return &rec
}

// live reports whether e is a started key whose lease has not run out at now.
func (e *entry) live(now time.Time) bool {
	return e.rec.State == storage.StateStarted && now.Before(e.rec.LockedUntil)
}

// Option configures a Store.
type Option func(*Store)

// WithClock makes the store read the time from now instead of time.Now, so tests can
// move through leases and retention without sleeping. now must be safe for concurrent
// use. A nil now keeps time.Now. Records report the times now returned, as it returned
// them (location included).
func WithClock(now func() time.Time) Option {
	return func(s *Store) {
		if now != nil {
			s.now = now
		}
	}
}

// WithRetention sets how long a key is kept: an older key counts as absent to claims,
// and core.Sweeper deletes it. It is the one retention setting (the engine and the
// sweeper read it from the store). Default: storage.DefaultRetention (24h); a duration that is
// not positive keeps the default.
func WithRetention(d time.Duration) Option {
	return func(s *Store) {
		if d > 0 {
			s.retention = d
		}
	}
}

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{now: time.Now, retention: storage.DefaultRetention, keys: make(map[id]*entry)}
	for _, o := range opts {
		o(s)
	}
	return s
}

var (
	_ storage.Store       = (*Store)(nil)
	_ storage.KeyCounter  = (*Store)(nil)
	_ storage.Completable = (*Store)(nil)
)

// Retention reports how long keys are kept (WithRetention).
func (s *Store) Retention() time.Duration { return s.retention }

// SupportsAtomic reports false: the store has no transaction to share with the handler.
func (s *Store) SupportsAtomic() bool { return false }

// Len reports how many keys the store holds, expired ones included until DeleteExpired
// or a new claim replaces them.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

// Claim implements storage.Store. It runs ModePhased; any other mode fails with an error
// wrapping storage.ErrUnsupportedMode.
//
// A replaying claim (the key is completed) returns the store's own *storage.Record, the
// same one to every replay of the key, built by Complete: callers must not mutate it. A
// started key is reported as a fresh copy whose Fingerprint is shared with the store.
func (s *Store) Claim(ctx context.Context, c storage.Claim) (storage.Claimed, error) {
	if c.Mode != storage.ModePhased {
		return storage.Claimed{}, fmt.Errorf("memstore: mode %d (%s): %w: memstore has no transaction to share, use ModePhased",
			c.Mode, c.Mode, storage.ErrUnsupportedMode)
	}
	if err := ctx.Err(); err != nil {
		return storage.Claimed{}, fmt.Errorf("memstore: claim: %w", err)
	}
	k := id{c.Scope, c.Key}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	e := s.keys[k]
	var held *storage.Record
	if e != nil {
		held = &e.rec
	}
	switch v := storage.Decide(held, c, now); v {
	case storage.VerdictAbsent:
		if e != nil {
			e.owner = nil // fences out a lock of the key it replaces
		}
		e = &entry{rec: storage.Record{Scope: c.Scope, Key: c.Key, Method: c.Method, Path: c.Path,
			State: storage.StateStarted, RecoveryPoint: storage.RecoveryStarted, CreatedAt: now, Request: keptRequest(c.Request)}}
		if c.Fingerprint != nil {
			e.rec.Fingerprint = append(e.fp[:0], c.Fingerprint...)
		}
		s.keys[k] = e
		return storage.Claimed{Verdict: v, Lock: s.take(&e.first, e, now, c.Lease, false)}, nil
	case storage.VerdictTakeOver: // fences the old lock out
		return storage.Claimed{Verdict: v, Lock: s.take(new(lock), e, now, c.Lease, true)}, nil
	default:
		return storage.Claimed{Verdict: v, Record: e.report()}, nil
	}
}

// take makes l, a new lock, the owner of e, with a lease from now. The caller holds s.mu.
func (s *Store) take(l *lock, e *entry, now time.Time, lease time.Duration, takenOver bool) *lock {
	*l = lock{s: s, e: e, lease: lease, claimedPoint: e.rec.RecoveryPoint, takenOver: takenOver}
	e.owner = l
	e.rec.LockedUntil = now.Add(lease)
	return l
}

// Lookup implements storage.Store: the record of key in scope, expired or not, and the
// store's clock. A completed key's record is the one replays share: callers must not
// mutate it. No record: an error wrapping storage.ErrNotFound.
func (s *Store) Lookup(ctx context.Context, scope, key string) (*storage.Record, time.Time, error) {
	if err := ctx.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("memstore: lookup: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	e := s.keys[id{scope, key}]
	if e == nil {
		return nil, now, fmt.Errorf("memstore: key %q in scope %q: %w", key, scope, storage.ErrNotFound)
	}
	return e.report(), now, nil
}

// CountKeys implements storage.KeyCounter. Oldest is a copy of the oldest key's record.
func (s *Store) CountKeys(ctx context.Context) (*storage.KeyCounts, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: count keys: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	kc := &storage.KeyCounts{Now: now}
	var oldest *entry
	for _, e := range s.keys {
		live := e.live(now)
		if e.rec.State == storage.StateCompleted {
			kc.Completed++
		} else {
			kc.Started++
			if live {
				kc.Live++
			}
		}
		if now.Sub(e.rec.CreatedAt) > s.retention {
			kc.Expired++
			if live {
				kc.ExpiredLive++
			}
		}
		if oldest == nil || e.rec.CreatedAt.Before(oldest.rec.CreatedAt) {
			oldest = e
		}
	}
	if oldest != nil {
		rec := *oldest.report()
		kc.Oldest = &rec
	}
	return kc, nil
}

// DeleteExpired implements storage.Store: it deletes at most limit keys created before
// before, oldest first, skipping keys whose lease is live, and reports how many it
// deleted. A limit of zero or less deletes nothing.
func (s *Store) DeleteExpired(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memstore: delete expired: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var found []id
	for k, e := range s.keys {
		if e.rec.CreatedAt.Before(before) && !e.live(now) {
			found = append(found, k)
		}
	}
	slices.SortFunc(found, func(a, b id) int { return s.keys[a].rec.CreatedAt.Compare(s.keys[b].rec.CreatedAt) })
	found = found[:min(limit, len(found))]
	for _, k := range found {
		s.keys[k].owner = nil
		delete(s.keys, k)
	}
	return len(found), nil
}

// lock is a Lock on one entry. Its identity is its fencing token (entry.owner).
type lock struct {
	s            *Store
	e            *entry
	lease        time.Duration
	claimedPoint string // the recovery point when the lock was obtained
	takenOver    bool
	ended        bool // the lock's own, used by its one goroutine
}

// held reports whether l still owns its key: no takeover replaced l, the key is still in
// the map, and l has not completed or released it. The caller holds the store's mutex.
func (l *lock) held() bool { return l.e.owner == l }

// Context returns ctx unchanged: the store has no transaction to share.
func (l *lock) Context(ctx context.Context) context.Context { return ctx }

// RecoveryPoint is the recovery point when the lock was obtained.
func (l *lock) RecoveryPoint() string { return l.claimedPoint }

// Resumed reports whether the lock took over an expired lease.
func (l *lock) Resumed() bool { return l.takenOver }

// Phase checks the lease, runs fn with ctx, then records point and renews the lease if
// the lock still holds the key. fn's side effects are not rolled back when the lease was
// lost while it ran: Phase then returns an error wrapping storage.ErrLeaseLost.
func (l *lock) Phase(ctx context.Context, point string, fn func(ctx context.Context) error) error {
	if l.ended {
		return errLockEnded
	}
	l.s.mu.Lock()
	held := l.held()
	l.s.mu.Unlock()
	if !held {
		return fmt.Errorf("memstore: phase %q not run: %w", point, storage.ErrLeaseLost)
	}
	if fn != nil {
		if err := fn(ctx); err != nil {
			return err
		}
	}
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if !l.held() {
		return fmt.Errorf("memstore: phase %q ran but was not recorded: %w", point, storage.ErrLeaseLost)
	}
	l.e.rec.RecoveryPoint = point
	l.e.rec.LockedUntil = l.s.now().Add(l.lease)
	return nil
}

// Renew extends the lease by the claim's lease from now while the lock still holds the
// key, and returns an error wrapping storage.ErrLeaseLost otherwise (after Complete or
// Release too). It may run on another goroutine than the lock's other methods.
func (l *lock) Renew(context.Context) error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if !l.held() {
		return fmt.Errorf("memstore: renew: %w", storage.ErrLeaseLost)
	}
	l.e.rec.LockedUntil = l.s.now().Add(l.lease)
	return nil
}

// Complete records a copy of r as the key's response and ends the lock; r's header and
// body are not kept. The header is kept encoded (storage.EncodeHeader, as database stores
// keep it) until a replay or a lookup reports the key.
func (l *lock) Complete(ctx context.Context, r *storage.Response) error {
	if l.ended {
		return errLockEnded
	}
	if r == nil {
		return errors.New("memstore: complete: nil response")
	}
	header, body := storage.EncodeHeader(r.Header), bytes.Clone(r.Body)
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if !l.held() {
		return fmt.Errorf("memstore: complete: %w", storage.ErrLeaseLost)
	}
	// Claims handed out copies of the started record; from now on every replay shares it.
	e := l.e
	e.resp, e.header = storage.Response{Status: r.Status, Body: body}, header
	e.rec.State = storage.StateCompleted
	e.rec.LockedUntil, e.rec.CompletedAt = time.Time{}, l.s.now()
	e.rec.Request = nil // kept for the Completer only while the operation is unfinished
	e.owner = nil
	l.ended = true
	return nil
}

// Release gives the key up: it deletes it when no phase was recorded, or else ends the
// lease at once and keeps the recovery point, so the next claim takes over. After
// Complete or Release it is a no-op.
func (l *lock) Release(ctx context.Context) error {
	if l.ended {
		return nil
	}
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if !l.held() {
		return fmt.Errorf("memstore: release: %w", storage.ErrLeaseLost)
	}
	if l.e.rec.RecoveryPoint == storage.RecoveryStarted {
		delete(l.s.keys, id{l.e.rec.Scope, l.e.rec.Key})
	} else {
		l.e.rec.LockedUntil = l.s.now()
	}
	l.e.owner = nil // nothing of this lock's, a late renewal included, changes the key now
	l.ended = true
	return nil
}
