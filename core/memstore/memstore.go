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

// record is one stored key. A started key has an owner, the lock holding (or last
// holding) its lease; a completed key has done and no owner. All fields but done's
// contents (completion) are guarded by the shard's mutex; done and what it points to are
// never changed once set.
type record struct {
	fingerprint  []byte
	method, path string
	created      time.Time

	// owner is the fencing token: a claim or takeover makes a new lock and puts it here,
	// and a lock may change the record only while it is the owner.
	owner       *lock
	point       string
	lockedUntil time.Time

	// done is the completed key as every replay gets it: shared, so never mutated. It
	// points into completion, which Complete fills once, under the mutex, before setting
	// done; the record holds it inline so that completing allocates no struct.
	done       *storage.Record
	completion completed
}

// fresh is a new key in one allocation: its record (with room for its completion), the
// lock of its first claim and room for a SHA-256 fingerprint.
type fresh struct {
	r  record
	l  lock
	fp [32]byte
}

// keep copies fp as bytes.Clone does (nil stays nil), into n.fp when it fits.
func (n *fresh) keep(fp []byte) []byte {
	if fp == nil {
		return nil
	}
	return append(n.fp[:0:len(n.fp)], fp...)
}

// completed is a completed key's Record with its Response and room for the values of a
// few replay headers.
type completed struct {
	rec  storage.Record
	resp storage.Response
	vals [4]string
}

// cloneHeader copies h as http.Header.Clone does, carving the values from d.vals when
// they fit.
func (d *completed) cloneHeader(h http.Header) http.Header {
	if h == nil {
		return nil
	}
	n := 0
	for _, vs := range h {
		n += len(vs)
	}
	sv := d.vals[:]
	if n > len(sv) {
		sv = make([]string, n)
	}
	hc := make(http.Header, len(h))
	for k, vs := range h {
		if vs == nil {
			hc[k] = nil
			continue
		}
		m := copy(sv, vs)
		hc[k] = sv[:m:m] // capped: an append by a reader cannot reach the next value
		sv = sv[m:]
	}
	return hc
}

// live reports whether r is a started key whose lease has not run out at now.
func (r *record) live(now time.Time) bool { return r.done == nil && now.Before(r.lockedUntil) }

// absent reports whether r counts as absent at now for a claim with the given retention:
// created longer ago than retention and not held by a live lease. A retention of zero or
// less never expires a key.
func (r *record) absent(now time.Time, retention time.Duration) bool {
	return retention > 0 && now.Sub(r.created) > retention && !r.live(now)
}

// started returns a snapshot of the started key k. The caller holds the shard's mutex.
func (r *record) started(k id) *storage.Record {
	return &storage.Record{
		Scope: k.scope, Key: k.key, Fingerprint: r.fingerprint, Method: r.method, Path: r.path,
		State: storage.StateStarted, RecoveryPoint: r.point, LockedUntil: r.lockedUntil, CreatedAt: r.created,
	}
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
// same one to every replay of the key, so a replay allocates nothing: callers must not
// mutate it. A started key is reported as a fresh snapshot whose Fingerprint is shared
// with the store.
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
		n := new(fresh)
		n.r = record{fingerprint: n.keep(c.Fingerprint), method: c.Method, path: c.Path,
			created: now, point: storage.RecoveryStarted}
		sh.keys[k] = &n.r
		return s.take(&n.l, sh, k, &n.r, now, lease, false), nil, nil
	case r.done != nil:
		return nil, r.done, nil
	case r.live(now) || !bytes.Equal(r.fingerprint, c.Fingerprint):
		return nil, r.started(k), nil
	default: // an expired lease, the same request: take over, which fences the old lock out
		return s.take(new(lock), sh, k, r, now, lease, true), nil, nil
	}
}

// take makes l, a new lock, the owner of r with a fresh lease. The caller holds sh's
// mutex.
func (s *Store) take(l *lock, sh *shard, k id, r *record, now time.Time, lease time.Duration, takenOver bool) *lock {
	*l = lock{s: s, sh: sh, k: k, r: r, lease: lease, claimedPoint: r.point, takenOver: takenOver}
	r.owner = l
	r.lockedUntil = now.Add(lease)
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
			if r.created.Before(before) && !r.live(now) {
				found = append(found, candidate{sh, k, r, r.created})
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

// held reports whether l still owns its key: the record is still the key's and no
// takeover replaced l. The caller holds the shard's mutex.
func (l *lock) held() bool { return l.sh.keys[l.k] == l.r && l.r.owner == l }

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
	l.r.point = point
	l.r.lockedUntil = l.s.now().Add(l.lease)
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
	body := bytes.Clone(r.Body)
	l.sh.mu.Lock()
	defer l.sh.mu.Unlock()
	if !l.held() {
		return fmt.Errorf("memstore: complete: %w", storage.ErrLeaseLost)
	}
	rec := l.r
	d := &rec.completion // written once: done is nil until the end of this block
	d.resp = storage.Response{Status: r.Status, Header: d.cloneHeader(r.Header), Body: body}
	d.rec = storage.Record{
		Scope: l.k.scope, Key: l.k.key, Fingerprint: rec.fingerprint, Method: rec.method, Path: rec.path,
		State: storage.StateCompleted, RecoveryPoint: rec.point, Response: &d.resp,
		CreatedAt: rec.created, CompletedAt: l.s.now(),
	}
	rec.done = &d.rec
	rec.owner, rec.lockedUntil = nil, time.Time{}
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
	} else {
		l.r.lockedUntil = l.s.now()
	}
	l.ended = true
	return nil
}
