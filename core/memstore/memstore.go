package memstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/core"
)

// numShards is the number of independently locked parts of the key space. A power of two,
// so picking a shard is a mask.
const numShards = 64

// DefaultLease is the lease a claim gets when core.Claim.Lease is zero or negative.
const DefaultLease = 60 * time.Second

// errLockEnded is returned by Phase and Complete on a lock that was already completed or
// released.
var errLockEnded = errors.New("memstore: lock already completed or released")

// Store is an in-memory core.Store for tests and a single process. The zero value is not
// usable; call New. See the package documentation for what it does not protect.
type Store struct {
	now    func() time.Time
	seed   maphash.Seed
	tokens atomic.Uint64
	shards [numShards]shard
}

// shard is one locked part of the key space, padded to its own cache line so that
// goroutines working on neighbouring shards do not slow each other down.
type shard struct {
	mu sync.RWMutex
	m  map[id]slot
	_  [32]byte
}

// id names a key: the same key in two scopes is two keys.
type id struct{ scope, key string }

// slot is what the map holds for a key: exactly one of done and e is set. Both are
// pointers kept inline in the map, so a replay reads the map and the record, nothing else.
type slot struct {
	// done is the record of a completed key. It is never mutated, so a replaying Claim
	// returns it without copying.
	done *core.Record
	// e is the state of a started key, guarded by the shard's lock.
	e *entry
}

// entry is a started key.
type entry struct {
	id          id
	fp          []byte // copied at claim time, never mutated
	method      string
	path        string
	point       string
	created     time.Time
	lockedUntil time.Time
	token       uint64
}

func (sl slot) created() time.Time {
	if sl.done != nil {
		return sl.done.CreatedAt
	}
	return sl.e.created
}

// live reports whether sl is a started key whose lease has not run out at now.
func (sl slot) live(now time.Time) bool {
	return sl.e != nil && now.Before(sl.e.lockedUntil)
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

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{now: time.Now, seed: maphash.MakeSeed()}
	for _, o := range opts {
		o(s)
	}
	for i := range s.shards {
		s.shards[i].m = make(map[id]slot)
	}
	return s
}

var _ core.Store = (*Store)(nil)

func (s *Store) shardOf(k id) *shard {
	h := maphash.String(s.seed, k.key) ^ maphash.String(s.seed, k.scope)*0x9e3779b97f4a7c15
	return &s.shards[h&(numShards-1)]
}

// SupportsAtomic reports false: the store has no transaction to share with the handler.
func (s *Store) SupportsAtomic() bool { return false }

// Len reports how many keys the store holds, expired ones included until DeleteExpired
// or a new claim removes them.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.RLock()
		n += len(sh.m)
		sh.mu.RUnlock()
	}
	return n
}

// pastRetention reports whether e counts as absent for a claim with the given retention:
// created longer ago than retention and not held by a live lease. A retention of zero or
// less never expires a key.
func pastRetention(sl slot, now time.Time, retention time.Duration) bool {
	return retention > 0 && now.Sub(sl.created()) > retention && !sl.live(now)
}

// Claim implements core.Store. It runs ModePhased; ModeDefault is taken as ModePhased and
// ModeAtomic fails with an error wrapping core.ErrUnsupportedMode.
//
// A replaying claim (the key is completed) returns the stored *core.Record itself without
// copying it: callers must not mutate it.
func (s *Store) Claim(ctx context.Context, c core.Claim) (core.Lock, *core.Record, error) {
	if c.Mode != core.ModePhased && c.Mode != core.ModeDefault {
		return nil, nil, fmt.Errorf("memstore: mode %d (%s): %w: memstore has no transaction to share, use ModePhased",
			c.Mode, c.Mode, core.ErrUnsupportedMode)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("memstore: claim: %w", err)
	}
	k := id{c.Scope, c.Key}
	sh := s.shardOf(k)

	// Fast path: a completed key within retention is replayed under the read lock.
	now := s.now()
	sh.mu.RLock()
	if sl := sh.m[k]; sl.done != nil && (c.Retention <= 0 || now.Sub(sl.done.CreatedAt) <= c.Retention) {
		sh.mu.RUnlock()
		return nil, sl.done, nil
	}
	sh.mu.RUnlock()

	lease := c.Lease
	if lease <= 0 {
		lease = DefaultLease
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now = s.now()
	sl, found := sh.m[k]
	if found && pastRetention(sl, now, c.Retention) {
		found = false // counts as absent; the new claim replaces it
	}
	e := sl.e
	switch {
	case !found:
		e = &entry{
			id:          k,
			fp:          bytes.Clone(c.Fingerprint),
			method:      c.Method,
			path:        c.Path,
			point:       core.RecoveryStarted,
			created:     now,
			lockedUntil: now.Add(lease),
			token:       s.tokens.Add(1),
		}
		sh.m[k] = slot{e: e}
		return &lock{s: s, sh: sh, k: k, token: e.token, lease: lease, point: e.point}, nil, nil
	case sl.done != nil:
		return nil, sl.done, nil
	case now.Before(e.lockedUntil) || !bytes.Equal(e.fp, c.Fingerprint):
		return nil, e.started(), nil
	default: // expired lease, same request: take over
		e.token = s.tokens.Add(1)
		e.lockedUntil = now.Add(lease)
		return &lock{s: s, sh: sh, k: k, token: e.token, lease: lease, point: e.point, takenOver: true}, nil, nil
	}
}

// started returns a snapshot of a started entry. The caller holds the shard's lock.
func (e *entry) started() *core.Record {
	return &core.Record{
		Scope:         e.id.scope,
		Key:           e.id.key,
		Fingerprint:   e.fp,
		Method:        e.method,
		Path:          e.path,
		State:         core.StateStarted,
		RecoveryPoint: e.point,
		LockedUntil:   e.lockedUntil,
		CreatedAt:     e.created,
	}
}

// DeleteExpired implements core.Store: it deletes at most limit keys created before
// before, oldest first, skipping keys whose lease is live, and reports how many it
// deleted. A limit of zero or less deletes nothing.
func (s *Store) DeleteExpired(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	// Pick the limit oldest candidates with a max-heap on creation time, one shard at a
	// time, then delete each one that is still the same entry and still expired.
	h := oldest{max: limit}
	now := s.now()
	for i := range s.shards {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("memstore: delete expired: %w", err)
		}
		sh := &s.shards[i]
		sh.mu.RLock()
		for k, sl := range sh.m {
			if deletable(sl, before, now) {
				h.offer(candidate{k: k, sl: sl, created: sl.created(), sh: sh})
			}
		}
		sh.mu.RUnlock()
	}
	n := 0
	now = s.now()
	for _, c := range h.items {
		c.sh.mu.Lock()
		if sl, ok := c.sh.m[c.k]; ok && sl == c.sl && deletable(sl, before, now) {
			delete(c.sh.m, c.k)
			n++
		}
		c.sh.mu.Unlock()
	}
	return n, nil
}

func deletable(sl slot, before, now time.Time) bool {
	return sl.created().Before(before) && !sl.live(now)
}

// candidate is a key DeleteExpired may delete: still there as the same slot, and still
// not live, when it comes to it.
type candidate struct {
	k       id
	sl      slot
	created time.Time
	sh      *shard
}

// oldest keeps the max oldest candidates offered to it: a max-heap on creation time whose
// root is the newest kept candidate, evicted when an older one comes along.
type oldest struct {
	max   int
	items []candidate
}

func (h *oldest) newer(i, j int) bool { return h.items[i].created.After(h.items[j].created) }

func (h *oldest) offer(c candidate) {
	if len(h.items) < h.max {
		h.items = append(h.items, c)
		for i := len(h.items) - 1; i > 0; {
			p := (i - 1) / 2
			if !h.newer(i, p) {
				break
			}
			h.items[i], h.items[p] = h.items[p], h.items[i]
			i = p
		}
		return
	}
	if !c.created.Before(h.items[0].created) {
		return
	}
	h.items[0] = c
	for i := 0; ; {
		l, r, top := 2*i+1, 2*i+2, i
		if l < len(h.items) && h.newer(l, top) {
			top = l
		}
		if r < len(h.items) && h.newer(r, top) {
			top = r
		}
		if top == i {
			return
		}
		h.items[i], h.items[top] = h.items[top], h.items[i]
		i = top
	}
}

// lock is a claimed key. Its methods check the fencing token under the shard's lock.
type lock struct {
	s         *Store
	sh        *shard
	k         id
	token     uint64
	lease     time.Duration
	point     string
	takenOver bool
	ended     bool
}

// Context returns ctx unchanged: the store has no transaction to share.
func (l *lock) Context(ctx context.Context) context.Context { return ctx }

// RecoveryPoint is the recovery point when the lock was obtained.
func (l *lock) RecoveryPoint() string { return l.point }

// TakenOver reports whether the lock took over an expired lease.
func (l *lock) TakenOver() bool { return l.takenOver }

// held returns the entry if this lock still holds it. The caller holds the shard's lock.
func (l *lock) held() *entry {
	e := l.sh.m[l.k].e
	if e == nil || e.token != l.token {
		return nil
	}
	return e
}

// Phase checks the lease, runs fn with ctx, then records point and renews the lease if
// the lock still holds the key. fn's side effects are not rolled back when the lease was
// lost while it ran: Phase then returns an error wrapping core.ErrLeaseLost.
func (l *lock) Phase(ctx context.Context, point string, fn func(ctx context.Context) error) error {
	if l.ended {
		return errLockEnded
	}
	l.sh.mu.RLock()
	e := l.held()
	l.sh.mu.RUnlock()
	if e == nil {
		return fmt.Errorf("memstore: phase %q not run: %w", point, core.ErrLeaseLost)
	}
	if fn != nil {
		if err := fn(ctx); err != nil {
			return err
		}
	}
	l.sh.mu.Lock()
	defer l.sh.mu.Unlock()
	if e = l.held(); e == nil {
		return fmt.Errorf("memstore: phase %q ran but was not recorded: %w", point, core.ErrLeaseLost)
	}
	e.point = point
	e.lockedUntil = l.s.now().Add(l.lease)
	return nil
}

// Complete records a copy of r as the key's response and ends the lock.
func (l *lock) Complete(ctx context.Context, r *core.Response) error {
	if l.ended {
		return errLockEnded
	}
	if r == nil {
		return errors.New("memstore: complete: nil response")
	}
	resp := &core.Response{Status: r.Status, Header: r.Header.Clone(), Body: bytes.Clone(r.Body)}
	l.sh.mu.Lock()
	defer l.sh.mu.Unlock()
	e := l.held()
	if e == nil {
		return fmt.Errorf("memstore: complete: %w", core.ErrLeaseLost)
	}
	l.sh.m[l.k] = slot{done: &core.Record{
		Scope:         e.id.scope,
		Key:           e.id.key,
		Fingerprint:   e.fp,
		Method:        e.method,
		Path:          e.path,
		State:         core.StateCompleted,
		RecoveryPoint: e.point,
		Response:      resp,
		CreatedAt:     e.created,
		CompletedAt:   l.s.now(),
	}}
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
	e := l.held()
	if e == nil {
		return fmt.Errorf("memstore: release: %w", core.ErrLeaseLost)
	}
	if e.point == core.RecoveryStarted {
		delete(l.sh.m, l.k)
	} else {
		e.lockedUntil = l.s.now()
	}
	l.ended = true
	return nil
}
