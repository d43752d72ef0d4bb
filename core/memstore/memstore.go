package memstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/idemkit/idem/core/storage"
)

// numShards is how many independently locked maps hold the keys.
const numShards = 64

// DefaultLease is the lease a claim gets when storage.Claim.Lease is zero or negative.
const DefaultLease = 60 * time.Second

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

// record is one stored key. rec is the key as a claim reports it: while it is started,
// the store's working copy (a claim that finds it gets a snapshot); once rec.State is
// completed, the record every replay gets. All fields are guarded by the shard's mutex,
// except that a completed key's rec and what it points to are never changed once a
// replay has been handed rec.
type record struct {
	rec storage.Record

	// owner is the fencing token: a claim or takeover makes a new lock and puts it here,
	// and a lock may change the record only while it is the owner. A record that leaves
	// its shard's map (deleted, or replaced by a claim past retention) has no owner.
	owner *lock

	// The completed response: Complete fills resp's status and body and keeps its header
	// in hdr; the first replay builds resp.Header from hdr and points rec.Response at
	// resp (most keys are never replayed, and a header map costs two allocations and
	// ~400 bytes a key).
	resp storage.Response
	hdr  header

	fp [32]byte // room for a SHA-256 fingerprint
}

// fresh is a new key in one allocation: its record and the lock of its first claim.
type fresh struct {
	r record
	l lock
}

// keep copies fp as bytes.Clone does (nil stays nil), into r.fp when it fits.
func (r *record) keep(fp []byte) []byte {
	if fp == nil {
		return nil
	}
	return append(r.fp[:0:len(r.fp)], fp...)
}

// header is a copy of a completed response's header, flat when it is small: up to
// len(names) names with one value or more each and up to len(vals) values in all; any
// other header (nil and empty ones too) is kept as a clone.
type header struct {
	names [4]string
	vals  [4]string
	ends  [4]uint8 // names[i]'s values are vals[ends[i-1]:ends[i]] (from 0 for i = 0)
	n     uint8    // names used; 0 when the header is in clone
	clone http.Header
}

// set makes hd a copy of h: of its maps and slices, not of the strings, which are
// immutable.
func (hd *header) set(h http.Header) {
	if !hd.flatten(h) {
		*hd = header{clone: h.Clone()}
	}
}

// flatten copies h into names and vals, or reports false when it does not fit.
func (hd *header) flatten(h http.Header) bool {
	if len(h) == 0 || len(h) > len(hd.names) {
		return false
	}
	v := 0
	for k, vs := range h {
		if len(vs) == 0 || v+len(vs) > len(hd.vals) {
			return false
		}
		hd.names[hd.n] = k
		v += copy(hd.vals[v:], vs)
		hd.ends[hd.n] = uint8(v)
		hd.n++
	}
	return true
}

// build returns the header as a map. Each value slice is capped, so that a reader's
// append cannot reach the next name's values.
func (hd *header) build() http.Header {
	if hd.n == 0 {
		return hd.clone
	}
	h := make(http.Header, hd.n)
	var from uint8
	for i, end := range hd.ends[:hd.n] {
		h[hd.names[i]] = hd.vals[from:end:end]
		from = end
	}
	return h
}

// replay returns the completed key's record, building its response's header map for
// the first replay. The caller holds the shard's mutex.
func (r *record) replay() *storage.Record {
	if r.rec.Response == nil {
		r.resp.Header = r.hdr.build()
		r.rec.Response = &r.resp
	}
	return &r.rec
}

// completed reports whether r's key has a recorded response.
func (r *record) completed() bool { return r.rec.State == storage.StateCompleted }

// live reports whether r is a started key whose lease has not run out at now.
func (r *record) live(now time.Time) bool { return !r.completed() && now.Before(r.rec.LockedUntil) }

// absent reports whether r counts as absent at now for a claim with the given retention:
// created longer ago than retention and not held by a live lease. A retention of zero or
// less never expires a key.
func (r *record) absent(now time.Time, retention time.Duration) bool {
	return retention > 0 && now.Sub(r.rec.CreatedAt) > retention && !r.live(now)
}

// started returns a snapshot of the started key. The caller holds the shard's mutex.
func (r *record) started() *storage.Record {
	snap := r.rec
	return &snap
}

// Option configures a Store.
type Option func(*Store)

// WithClock makes the store read the time from now instead of time.Now, so tests can
// move through leases and retention without sleeping. now must be safe for concurrent
// use. A nil now keeps time.Now.
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

var _ storage.Store = (*Store)(nil)

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
// key builds its response's header map (two allocations); later ones allocate nothing.
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
	if lease <= 0 {
		lease = DefaultLease
	}
	k := id{c.Scope, c.Key}
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now()
	r := sh.keys[k]
	switch {
	case r == nil || r.absent(now, c.Retention):
		if r != nil {
			r.owner = nil // fences out a lock of the key it replaces
		}
		n := new(fresh)
		n.r.rec = storage.Record{Scope: c.Scope, Key: c.Key, Fingerprint: n.r.keep(c.Fingerprint), Method: c.Method, Path: c.Path,
			State: storage.StateStarted, RecoveryPoint: storage.RecoveryStarted, CreatedAt: now}
		sh.keys[k] = &n.r
		return s.take(&n.l, sh, &n.r, now, lease, false), nil, nil
	case r.completed():
		return nil, r.replay(), nil
	case r.live(now) || !bytes.Equal(r.rec.Fingerprint, c.Fingerprint):
		return nil, r.started(), nil
	default: // an expired lease, the same request: take over, which fences the old lock out
		return s.take(new(lock), sh, r, now, lease, true), nil, nil
	}
}

// take makes l, a new lock, the owner of r with a fresh lease. The caller holds sh's
// mutex.
func (s *Store) take(l *lock, sh *shard, r *record, now time.Time, lease time.Duration, takenOver bool) *lock {
	*l = lock{s: s, sh: sh, r: r, lease: lease, claimedPoint: r.rec.RecoveryPoint, takenOver: takenOver}
	r.owner = l
	r.rec.LockedUntil = now.Add(lease)
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
		created time.Time
	}
	var found []candidate
	now := s.now()
	for i := range s.shards {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("memstore: delete expired: %w", err)
		}
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, r := range sh.keys {
			if r.rec.CreatedAt.Before(before) && !r.live(now) {
				found = append(found, candidate{sh, k, r, r.rec.CreatedAt})
			}
		}
		sh.mu.Unlock()
	}
	slices.SortFunc(found, func(a, b candidate) int { return a.created.Compare(b.created) })
	deleted := 0
	now = s.now()
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

// TakenOver reports whether the lock took over an expired lease.
func (l *lock) TakenOver() bool { return l.takenOver }

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
	l.r.rec.RecoveryPoint = point
	l.r.rec.LockedUntil = l.s.now().Add(l.lease)
	return nil
}

// Complete records a copy of r as the key's response and ends the lock; r's header and
// body are not kept (the header's value strings are, being immutable).
func (l *lock) Complete(ctx context.Context, r *storage.Response) error {
	if l.ended {
		return errLockEnded
	}
	if r == nil {
		return errors.New("memstore: complete: nil response")
	}
	body := bytes.Clone(r.Body)
	l.sh.mu.Lock()
	defer l.sh.mu.Unlock()
	if !l.held() {
		return fmt.Errorf("memstore: complete: %w", storage.ErrLeaseLost)
	}
	rec := l.r
	rec.resp = storage.Response{Status: r.Status, Body: body}
	rec.hdr.set(r.Header)
	rec.rec.State, rec.rec.LockedUntil, rec.rec.CompletedAt = storage.StateCompleted, time.Time{}, l.s.now()
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
	if l.r.rec.RecoveryPoint == storage.RecoveryStarted {
		delete(l.sh.keys, id{l.r.rec.Scope, l.r.rec.Key})
		l.r.owner = nil
	} else {
		l.r.rec.LockedUntil = l.s.now()
	}
	l.ended = true
	return nil
}
