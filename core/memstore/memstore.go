package memstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/idemkit/idem/core/storage"
)

// numShards is how many independently locked maps hold the keys.
const numShards = 64

// errLockEnded is returned by Phase and Complete on a lock that was already completed or
// released.
var errLockEnded = errors.New("memstore: lock already completed or released")

// Store is an in-memory storage.Store for tests and a single process. The zero value is
// not usable; call New. See the package documentation for what it does not protect.
type Store struct {
	now       func() time.Time
	retention time.Duration
	seed      maphash.Seed
	shards    [numShards]shard
}

// shard is one part of the key space: a map and the mutex that guards it and every
// record in it.
type shard struct {
	mu   sync.Mutex
	keys map[id]*record
}

// id names a key: the same key in two scopes is two keys.
type id struct{ scope, key string }

// record is one stored key. It keeps what a claim reports and, once completed, the
// response, in as few bytes and pointers as stay readable: times as Unix nanoseconds, the
// response's header and body in one byte slab (see newResponse), and the lock only
// while the key is started. All fields are guarded by the shard's mutex, except that a
// completed key's replayed record and what it points to are never changed once a replay
// has been handed it.
type record struct {
	// owner is the fencing token: a claim or takeover makes a new lock and puts it here,
	// and a lock may change the record only while it is the owner. Complete and a record
	// leaving its shard's map (deleted, or replaced by a claim past retention) set it to
	// nil.
	owner *lock

	fp     []byte   // the claim's fingerprint, in fpRoom when it fits
	fpRoom [32]byte // room for a SHA-256 fingerprint

	method, path string
	point        string // the recovery point

	created     int64 // Unix nanoseconds
	lockedUntil int64 // Unix nanoseconds: the lease's end while started, 0 once completed
	completedAt int64 // Unix nanoseconds, 0 until completed

	status   int
	response []byte // the completed response's header and body (newResponse); nil while started

	// replayed is the completed key as replays get it, built by the first one: most
	// keys are never replayed, and a record with its header map costs five allocations
	// and ~500 bytes a key.
	replayed *storage.Record
}

// keep copies fp as bytes.Clone does (nil stays nil), into r.fpRoom when it fits.
func (r *record) keep(fp []byte) []byte {
	if fp == nil {
		return nil
	}
	return append(r.fpRoom[:0:len(r.fpRoom)], fp...)
}

// unixTime is the time of Unix nanoseconds ns, and the zero time for 0.
func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// report returns the record as a claim of key k reports it.
func (r *record) report(k id) storage.Record {
	state := storage.StateStarted
	if r.completed() {
		state = storage.StateCompleted
	}
	return storage.Record{Scope: k.scope, Key: k.key, Fingerprint: r.fp, Method: r.method, Path: r.path,
		State: state, RecoveryPoint: r.point, LockedUntil: unixTime(r.lockedUntil),
		CreatedAt: time.Unix(0, r.created), CompletedAt: unixTime(r.completedAt)}
}

// replay returns the completed key k's record, building it for the first replay. The
// caller holds the shard's mutex.
func (r *record) replay(k id) *storage.Record {
	if r.replayed == nil {
		type replayed struct {
			rec  storage.Record
			resp storage.Response
		}
		rp := &replayed{rec: r.report(k), resp: readResponse(r.status, r.response)}
		rp.rec.Response = &rp.resp
		r.replayed = &rp.rec
	}
	return r.replayed
}

// live reports whether r is a started key whose lease has not run out at now.
func (r *record) live(now int64) bool { return !r.completed() && now < r.lockedUntil }

// completed reports whether r's key has a recorded response.
func (r *record) completed() bool { return r.response != nil }

// started returns a snapshot of the started key k. The caller holds the shard's mutex.
func (r *record) started(k id) *storage.Record {
	snap := r.report(k)
	return &snap
}

// Option configures a Store.
type Option func(*Store)

// WithClock makes the store read the time from now instead of time.Now, so tests can
// move through leases and retention without sleeping. now must be safe for concurrent
// use. A nil now keeps time.Now. The store keeps times as Unix nanoseconds: records
// report the same instants in the local time zone, and now must stay within the years
// 1678 to 2262.
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
	s := &Store{now: time.Now, retention: storage.DefaultRetention, seed: maphash.MakeSeed()}
	for _, o := range opts {
		o(s)
	}
	for i := range s.shards {
		s.shards[i].keys = make(map[id]*record)
	}
	return s
}

var (
	_ storage.Store      = (*Store)(nil)
	_ storage.Lookuper   = (*Store)(nil)
	_ storage.KeyCounter = (*Store)(nil)
)

// shard returns the shard of key k.
func (s *Store) shard(k id) *shard {
	return &s.shards[maphash.Comparable(s.seed, k)%numShards]
}

// Retention reports how long keys are kept (WithRetention).
func (s *Store) Retention() time.Duration { return s.retention }

// SupportsAtomic reports false: the store has no transaction to share with the handler.
func (s *Store) SupportsAtomic() bool { return false }

// Len reports how many keys the store holds, expired ones included until DeleteExpired
// or a new claim replaces them.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.keys)
		sh.mu.Unlock()
	}
	return n
}

// Claim implements storage.Store. It runs ModePhased; any other mode fails with an error
// wrapping storage.ErrUnsupportedMode.
//
// A replaying claim (the key is completed) returns the store's own *storage.Record, the
// same one to every replay of the key: callers must not mutate it. The first replay of a
// key builds that record from the stored response (five allocations, the header map's
// two included); later ones allocate nothing.
// A started key is reported as a fresh snapshot whose Fingerprint is shared with the
// store.
func (s *Store) Claim(ctx context.Context, c storage.Claim) (storage.Lock, *storage.Record, error) {
	if c.Mode != storage.ModePhased {
		return nil, nil, fmt.Errorf("memstore: mode %d (%s): %w: memstore has no transaction to share, use ModePhased",
			c.Mode, c.Mode, storage.ErrUnsupportedMode)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("memstore: claim: %w", err)
	}
	lease := c.Lease
	k := id{c.Scope, c.Key}
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	clock := s.now()
	now := clock.UnixNano()
	r := sh.keys[k]
	var held *storage.Record
	if r != nil {
		rep := r.report(k)
		held = &rep
	}
	switch storage.Decide(held, c, clock) {
	case storage.VerdictAbsent:
		if r != nil {
			r.owner = nil // fences out a lock of the key it replaces
		}
		r = &record{method: c.Method, path: c.Path, point: storage.RecoveryStarted, created: now}
		r.fp = r.keep(c.Fingerprint)
		sh.keys[k] = r
		return s.take(sh, k, r, now, lease, false), nil, nil
	case storage.VerdictTakeOver: // fences the old lock out
		return s.take(sh, k, r, now, lease, true), nil, nil
	default:
		return nil, r.reported(k), nil
	}
}

// reported returns the record of key k as a claim or a lookup reports it: the shared
// replay record of a completed key, a snapshot of a started one. The caller holds the
// shard's mutex.
func (r *record) reported(k id) *storage.Record {
	if r.completed() {
		return r.replay(k)
	}
	return r.started(k)
}

// Lookup implements storage.Lookuper: the record of key in scope, expired or not, and the
// store's clock. A completed key's record is the one replays share: callers must not
// mutate it. No record: an error wrapping storage.ErrNotFound.
func (s *Store) Lookup(ctx context.Context, scope, key string) (*storage.Record, time.Time, error) {
	if err := ctx.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("memstore: lookup: %w", err)
	}
	k := id{scope, key}
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now()
	r := sh.keys[k]
	if r == nil {
		return nil, now, fmt.Errorf("memstore: key %q in scope %q: %w", key, scope, storage.ErrNotFound)
	}
	return r.reported(k), now, nil
}

// CountKeys implements storage.KeyCounter, one shard at a time: keys claimed or completed
// meanwhile in a shard already counted are not seen.
func (s *Store) CountKeys(ctx context.Context) (*storage.KeyCounts, error) {
	clock := s.now()
	now := clock.UnixNano()
	kc := &storage.KeyCounts{Now: clock}
	var oldest storage.Record
	for i := range s.shards {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("memstore: count keys: %w", err)
		}
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, r := range sh.keys {
			live := r.live(now)
			if r.completed() {
				kc.Completed++
			} else {
				kc.Started++
				if live {
					kc.Live++
				}
			}
			if time.Duration(now-r.created) > s.retention {
				kc.Expired++
				if live {
					kc.ExpiredLive++
				}
			}
			if kc.Oldest == nil || r.created < oldest.CreatedAt.UnixNano() {
				oldest = r.report(k)
				kc.Oldest = &oldest
			}
		}
		sh.mu.Unlock()
	}
	return kc, nil
}

// take makes a new lock the owner of r, key k, with a fresh lease. The caller holds sh's
// mutex.
func (s *Store) take(sh *shard, k id, r *record, now int64, lease time.Duration, takenOver bool) *lock {
	l := &lock{s: s, sh: sh, k: k, r: r, lease: lease, claimedPoint: r.point, takenOver: takenOver}
	r.owner = l
	r.lockedUntil = now + int64(lease)
	return l
}

// DeleteExpired implements storage.Store: it deletes at most limit keys created before
// before, oldest first, skipping keys whose lease is live, and reports how many it
// deleted. A limit of zero or less deletes nothing.
func (s *Store) DeleteExpired(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	type candidate struct {
		sh      *shard
		k       id
		r       *record
		created int64
	}
	var found []candidate
	now := s.now().UnixNano()
	for i := range s.shards {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("memstore: delete expired: %w", err)
		}
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, r := range sh.keys {
			if time.Unix(0, r.created).Before(before) && !r.live(now) {
				found = append(found, candidate{sh, k, r, r.created})
			}
		}
		sh.mu.Unlock()
	}
	slices.SortFunc(found, func(a, b candidate) int { return cmp.Compare(a.created, b.created) })
	deleted := 0
	now = s.now().UnixNano()
	for _, c := range found[:min(limit, len(found))] {
		c.sh.mu.Lock()
		// Between the two locks the key may have been replaced or claimed again.
		if c.sh.keys[c.k] == c.r && !c.r.live(now) {
			delete(c.sh.keys, c.k)
			c.r.owner = nil
			deleted++
		}
		c.sh.mu.Unlock()
	}
	return deleted, nil
}

// lock is a Lock on one record. Its identity is its fencing token (record.owner).
type lock struct {
	s            *Store
	sh           *shard
	k            id
	r            *record
	lease        time.Duration
	claimedPoint string // the recovery point when the lock was obtained
	takenOver    bool
	ended        bool // the lock's own, used by its one goroutine
}

// held reports whether l still owns its key: no takeover replaced l, and the record is
// still in its shard's map. The caller holds the shard's mutex.
func (l *lock) held() bool { return l.r.owner == l }

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
	l.sh.mu.Lock()
	held := l.held()
	l.sh.mu.Unlock()
	if !held {
		return fmt.Errorf("memstore: phase %q not run: %w", point, storage.ErrLeaseLost)
	}
	if fn != nil {
		if err := fn(ctx); err != nil {
			return err
		}
	}
	l.sh.mu.Lock()
	defer l.sh.mu.Unlock()
	if !l.held() {
		return fmt.Errorf("memstore: phase %q ran but was not recorded: %w", point, storage.ErrLeaseLost)
	}
	l.r.point = point
	l.r.lockedUntil = l.s.now().UnixNano() + int64(l.lease)
	return nil
}

// Renew extends the lease by the claim's lease from now while the lock still holds the
// key, and returns an error wrapping storage.ErrLeaseLost otherwise. It may run on another
// goroutine than the lock's other methods.
func (l *lock) Renew(context.Context) error {
	l.sh.mu.Lock()
	defer l.sh.mu.Unlock()
	if !l.held() {
		return fmt.Errorf("memstore: renew: %w", storage.ErrLeaseLost)
	}
	l.r.lockedUntil = l.s.now().UnixNano() + int64(l.lease)
	return nil
}

// Complete records a copy of r as the key's response and ends the lock; r's header and
// body are not kept.
func (l *lock) Complete(ctx context.Context, r *storage.Response) error {
	if l.ended {
		return errLockEnded
	}
	if r == nil {
		return errors.New("memstore: complete: nil response")
	}
	response := newResponse(r.Header, r.Body)
	l.sh.mu.Lock()
	defer l.sh.mu.Unlock()
	if !l.held() {
		return fmt.Errorf("memstore: complete: %w", storage.ErrLeaseLost)
	}
	rec := l.r
	rec.status, rec.response = r.Status, response
	rec.lockedUntil, rec.completedAt = 0, l.s.now().UnixNano()
	rec.owner = nil
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
	l.sh.mu.Lock()
	defer l.sh.mu.Unlock()
	if !l.held() {
		return fmt.Errorf("memstore: release: %w", storage.ErrLeaseLost)
	}
	if l.r.point == storage.RecoveryStarted {
		delete(l.sh.keys, l.k)
		l.r.owner = nil
	} else {
		l.r.lockedUntil = l.s.now().UnixNano()
		l.r.owner = nil // nothing of this lock's, a renewal included, changes the key now
	}
	l.ended = true
	return nil
}
