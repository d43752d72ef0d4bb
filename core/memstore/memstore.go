package memstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem/core/storage"
)

// numShards is the number of independently locked parts of the key space. A power of two,
// so picking a shard is a mask.
const numShards = 64

// DefaultLease is the lease a claim gets when storage.Claim.Lease is zero or negative.
const DefaultLease = 60 * time.Second

// errLockEnded is returned by Phase and Complete on a lock that was already completed or
// released.
var errLockEnded = errors.New("memstore: lock already completed or released")

// Store is an in-memory storage.Store for tests and a single process. The zero value is not
// usable; call New. See the package documentation for what it does not protect.
type Store struct {
	now       func() time.Time
	retention time.Duration
	seed      maphash.Seed
	mask      uint64 // of the keys' hashes: all ones but in tests that make keys collide
	shards    [numShards]shard
}

// shard is one locked part of the key space, padded to its own cache lines so that
// goroutines working on neighbouring shards do not slow each other down.
//
// A shard keeps its keys' slots in chunks that never move, numbered, and finds a key's
// slot number by the key's 64-bit hash, computed once per claim: an index of integers is
// small, cheap to grow (no strings to rehash, no slots to move) and holds no pointer for
// the garbage collector to trace, and a lock reaches its slot by number, without a lookup.
// A slot is checked against the key itself (see slot.is); the rare key whose hash another
// key already holds in index goes to spill instead, keyed by the key itself. A key stays
// where it was put until it is deleted.
type shard struct {
	mu    sync.RWMutex
	index map[uint64]uint32
	spill map[id]uint32 // nil until a hash is shared
	// chunks hold the slots: slot n is chunks[n/chunkSlots][n%chunkSlots]. used counts
	// the slots handed out; free lists deleted ones, reused first.
	chunks []*[chunkSlots]slot
	used   uint32
	free   []uint32
	_      [32]byte
}

// chunkSlots is how many slots a shard allocates at a time.
const chunkSlots = 128

// id names a key: the same key in two scopes is two keys.
type id struct{ scope, key string }

// slot is what a shard holds for a key: a started key (e set) or a completed one (e nil,
// blob set). All fields are guarded by the shard's lock.
//
// A completed key is kept cheap for the garbage collector and to create, since a store may
// hold hundreds of thousands of them: everything of it but its creation time lives in blob,
// one pointer-free string (see encode), so it costs one noscan object plus its slot.
// The *storage.Record the engine wants is decoded from the blob on the first replay and cached
// in rec, so later replays allocate nothing.
//
// A slot is the same slot as long as it has the same e and blob: every claim and takeover
// makes a new entry, and a completion a new blob (two blobs alike are the same record).
type slot struct {
	// e is the lock of a started key, nil for a completed one.
	e *entry
	// created is when the key was first claimed; takeovers keep it.
	created time.Time
	// blob is the encoded completed key, see encode.
	blob string
	// rec is blob decoded, set on the first replay and never changed after: replays share
	// it and must not mutate it.
	rec *storage.Record
}

// same reports whether sl and o are the same slot: the one is a copy of the other, perhaps
// with rec set since.
func (sl *slot) same(o *slot) bool { return sl.e == o.e && sl.blob == o.blob }

// is reports whether sl is the slot of key k.
func (sl *slot) is(k id) bool {
	if sl.e != nil {
		return sl.e.k == k
	}
	return sl.id() == k
}

// id returns the key of sl.
func (sl *slot) id() id {
	if sl.e != nil {
		return sl.e.k
	}
	d := blobReader{s: sl.blob[1:]} // after the flags
	return id{scope: d.str(), key: d.str()}
}

// live reports whether sl is a started key whose lease has not run out at now.
func (sl *slot) live(now time.Time) bool {
	return sl.e != nil && now.Before(sl.e.lockedUntil)
}

// at returns slot n. The caller holds the shard's lock.
func (sh *shard) at(n uint32) *slot { return &sh.chunks[n/chunkSlots][n%chunkSlots] }

// find returns the number of the slot of key k whose hash is h, and whether spill holds
// it. For a key it does not hold, spilled tells where the key would go: to spill when
// another key holds h. The caller holds the shard's lock.
func (sh *shard) find(h uint64, k id) (n uint32, found, spilled bool) {
	n, taken := sh.index[h]
	if taken && sh.at(n).is(k) {
		return n, true, false
	}
	if len(sh.spill) > 0 {
		if n, ok := sh.spill[k]; ok {
			return n, true, true
		}
	}
	return 0, false, taken
}

// add stores sl as the slot of key k whose hash is h, found in neither map, and returns
// its number: in spill if find said spilled, else in index. The caller holds the shard's
// write lock.
func (sh *shard) add(h uint64, k id, spilled bool, sl slot) uint32 {
	var n uint32
	if last := len(sh.free) - 1; last >= 0 {
		n, sh.free = sh.free[last], sh.free[:last]
	} else {
		if sh.used%chunkSlots == 0 {
			sh.chunks = append(sh.chunks, new([chunkSlots]slot))
		}
		n = sh.used
		sh.used++
	}
	*sh.at(n) = sl
	if spilled {
		if sh.spill == nil {
			sh.spill = make(map[id]uint32)
		}
		sh.spill[k] = n
	} else {
		sh.index[h] = n
	}
	return n
}

// remove deletes slot n, of key k whose hash is h. The caller holds the shard's write
// lock.
func (sh *shard) remove(h uint64, k id, n uint32) {
	if m, ok := sh.index[h]; ok && m == n {
		delete(sh.index, h)
	} else {
		delete(sh.spill, k)
	}
	*sh.at(n) = slot{}
	sh.free = append(sh.free, n)
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
// sweeper read it from the store). Default: DefaultRetention (24h); a duration that is
// not positive keeps the default.
func WithRetention(d time.Duration) Option {
	return func(s *Store) {
		if d > 0 {
			s.retention = d
		}
	}
}

// DefaultRetention is how long keys are kept unless WithRetention says otherwise.
const DefaultRetention = 24 * time.Hour

// Retention reports how long keys are kept (WithRetention).
func (s *Store) Retention() time.Duration { return s.retention }

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{now: time.Now, seed: maphash.MakeSeed(), mask: ^uint64(0), retention: DefaultRetention}
	for _, o := range opts {
		o(s)
	}
	for i := range s.shards {
		s.shards[i].index = make(map[uint64]uint32)
	}
	return s
}

var _ storage.Store = (*Store)(nil)

// hash returns the hash of key k and its shard.
func (s *Store) hash(k id) (uint64, *shard) {
	h := (maphash.String(s.seed, k.key) ^ maphash.String(s.seed, k.scope)*0x9e3779b97f4a7c15) & s.mask
	return h, &s.shards[h&(numShards-1)]
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
		n += len(sh.index) + len(sh.spill)
		sh.mu.RUnlock()
	}
	return n
}

// pastRetention reports whether sl counts as absent for a claim with the given retention:
// created longer ago than retention and not held by a live lease. A retention of zero or
// less never expires a key.
func pastRetention(sl *slot, now time.Time, retention time.Duration) bool {
	return retention > 0 && now.Sub(sl.created) > retention && !sl.live(now)
}

// Claim implements storage.Store. It runs ModePhased;
// ModeAtomic fails with an error wrapping storage.ErrUnsupportedMode.
//
// A replaying claim (the key is completed) returns the store's own *storage.Record, the same
// one to every replay of the key: callers must not mutate it.
func (s *Store) Claim(ctx context.Context, c storage.Claim) (storage.Lock, *storage.Record, error) {
	if c.Mode != storage.ModePhased {
		return nil, nil, fmt.Errorf("memstore: mode %d (%s): %w: memstore has no transaction to share, use ModePhased",
			c.Mode, c.Mode, storage.ErrUnsupportedMode)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("memstore: claim: %w", err)
	}
	k := id{c.Scope, c.Key}
	h, sh := s.hash(k)

	// Fast path: a completed key within retention is replayed under the read lock.
	sh.mu.RLock()
	if n, ok, _ := sh.find(h, k); ok {
		if sl := sh.at(n); sl.e == nil && (c.Retention <= 0 || s.now().Sub(sl.created) <= c.Retention) {
			if rec := sl.rec; rec != nil {
				sh.mu.RUnlock()
				return nil, rec, nil
			}
			cp := *sl
			sh.mu.RUnlock()
			return nil, sh.cache(n, cp), nil
		}
	}
	sh.mu.RUnlock()

	lease := c.Lease
	if lease <= 0 {
		lease = DefaultLease
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now()
	n, found, spilled := sh.find(h, k)
	var sl *slot
	if found {
		sl = sh.at(n)
	}
	switch {
	case !found || pastRetention(sl, now, c.Retention):
		e := &entry{sh: sh, now: s.now, k: k, h: h, spilled: spilled, method: c.Method, path: c.Path, created: now,
			lease: lease, point: storage.RecoveryStarted, claimedPoint: storage.RecoveryStarted, lockedUntil: now.Add(lease)}
		e.setFingerprint(c.Fingerprint)
		if !found {
			e.n = sh.add(h, k, spilled, slot{e: e, created: now})
			return e, nil, nil
		}
		// Past retention, the key counts as absent: the claim replaces it in its slot.
		e.n, *sl = n, slot{e: e, created: now}
		if spilled {
			sh.spill[k] = n // drops the old blob's strings from the map's key
		}
		return e, nil, nil
	case sl.e == nil:
		if sl.rec == nil {
			sl.rec = decode(sl)
		}
		return nil, sl.rec, nil
	case now.Before(sl.e.lockedUntil) || !bytes.Equal(sl.e.fp, c.Fingerprint):
		return nil, sl.e.started(), nil
	default: // expired lease, same request: take over with a new lock, which fences the old one out
		old := sl.e
		e := &entry{sh: sh, now: s.now, k: old.k, h: h, n: n, spilled: spilled, method: old.method, path: old.path,
			created: old.created, lease: lease, point: old.point, claimedPoint: old.point, lockedUntil: now.Add(lease),
			takenOver: true}
		e.setFingerprint(old.fp)
		*sl = slot{e: e, created: sl.created}
		return e, nil, nil
	}
}

// cache returns the record of sl, a copy of the completed slot n read under the read lock:
// it decodes the blob outside the lock, then keeps the first record decoded, so every
// replay of the key gets the same one.
func (sh *shard) cache(n uint32, sl slot) *storage.Record {
	rec := decode(&sl)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	cur := sh.at(n)
	if !cur.same(&sl) {
		return rec // deleted or replaced meanwhile: the caller still gets what it read
	}
	if cur.rec == nil {
		cur.rec = rec
	}
	return cur.rec
}

// DeleteExpired implements storage.Store: it deletes at most limit keys created before
// before, oldest first, skipping keys whose lease is live, and reports how many it
// deleted. A limit of zero or less deletes nothing.
func (s *Store) DeleteExpired(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	// Pick the limit oldest candidates with a max-heap on creation time, one shard at a
	// time, then delete each one that is still the same slot and still expired.
	old := oldest{max: limit}
	now := s.now()
	for i := range s.shards {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("memstore: delete expired: %w", err)
		}
		sh := &s.shards[i]
		sh.mu.RLock()
		for h, n := range sh.index {
			if sl := sh.at(n); deletable(sl, before, now) {
				old.offer(candidate{h: h, k: sl.id(), n: n, sl: *sl, sh: sh})
			}
		}
		for k, n := range sh.spill {
			if sl := sh.at(n); deletable(sl, before, now) {
				h, _ := s.hash(k)
				old.offer(candidate{h: h, k: k, n: n, sl: *sl, sh: sh})
			}
		}
		sh.mu.RUnlock()
	}
	deleted := 0
	now = s.now()
	for _, c := range old.items {
		c.sh.mu.Lock()
		if sl := c.sh.at(c.n); sl.same(&c.sl) && deletable(sl, before, now) {
			c.sh.remove(c.h, c.k, c.n)
			deleted++
		}
		c.sh.mu.Unlock()
	}
	return deleted, nil
}

func deletable(sl *slot, before, now time.Time) bool {
	return sl.created.Before(before) && !sl.live(now)
}

// candidate is a key DeleteExpired may delete: still there as the same slot, and still
// not live, when it comes to it.
type candidate struct {
	h  uint64
	k  id
	n  uint32
	sl slot
	sh *shard
}

// oldest keeps the max oldest candidates offered to it: a max-heap on creation time whose
// root is the newest kept candidate, evicted when an older one comes along.
type oldest struct {
	max   int
	items []candidate
}

func (h *oldest) newer(i, j int) bool { return h.items[i].sl.created.After(h.items[j].sl.created) }

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
	if !c.sl.created.Before(h.items[0].sl.created) {
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

// entry is a started key and the lock that holds it, in one allocation. A takeover puts a
// new entry in the key's slot; the lock still holding the old one then finds itself gone,
// which is its fencing: the entry's identity is its token.
type entry struct {
	sh  *shard
	now func() time.Time
	k   id
	h   uint64 // k's hash

	// Set at claim time, never changed.
	fp           []byte // fpBuf[:n] when it fits, so the claim allocates once
	method, path string
	created      time.Time
	lease        time.Duration
	claimedPoint string // the recovery point when the lock was obtained

	// point and lockedUntil are guarded by the shard's lock. Only this lock's own
	// goroutine writes them (Phase, Release), so it may read them without the lock.
	point       string
	lockedUntil time.Time

	n         uint32 // k's slot, set at claim time
	spilled   bool   // whether k is in the shard's spill, set at claim time
	takenOver bool   // set at claim time
	ended     bool   // the lock's own, used by its one goroutine

	fpBuf [32]byte
}

// setFingerprint copies fp into e, keeping a nil fingerprint nil.
func (e *entry) setFingerprint(fp []byte) {
	switch {
	case fp == nil:
	case len(fp) <= len(e.fpBuf):
		e.fp = e.fpBuf[:copy(e.fpBuf[:], fp):len(fp)]
	default:
		e.fp = bytes.Clone(fp)
	}
}

// started returns a snapshot of a started entry. The caller holds the shard's lock.
func (e *entry) started() *storage.Record {
	return &storage.Record{
		Scope:         e.k.scope,
		Key:           e.k.key,
		Fingerprint:   e.fp,
		Method:        e.method,
		Path:          e.path,
		State:         storage.StateStarted,
		RecoveryPoint: e.point,
		LockedUntil:   e.lockedUntil,
		CreatedAt:     e.created,
	}
}

// Context returns ctx unchanged: the store has no transaction to share.
func (e *entry) Context(ctx context.Context) context.Context { return ctx }

// RecoveryPoint is the recovery point when the lock was obtained.
func (e *entry) RecoveryPoint() string { return e.claimedPoint }

// TakenOver reports whether the lock took over an expired lease.
func (e *entry) TakenOver() bool { return e.takenOver }

// held reports whether this lock still holds its key. The caller holds the shard's lock.
func (e *entry) held() bool { return e.sh.at(e.n).e == e }

// Phase checks the lease, runs fn with ctx, then records point and renews the lease if
// the lock still holds the key. fn's side effects are not rolled back when the lease was
// lost while it ran: Phase then returns an error wrapping storage.ErrLeaseLost.
func (e *entry) Phase(ctx context.Context, point string, fn func(ctx context.Context) error) error {
	if e.ended {
		return errLockEnded
	}
	e.sh.mu.RLock()
	held := e.held()
	e.sh.mu.RUnlock()
	if !held {
		return fmt.Errorf("memstore: phase %q not run: %w", point, storage.ErrLeaseLost)
	}
	if fn != nil {
		if err := fn(ctx); err != nil {
			return err
		}
	}
	e.sh.mu.Lock()
	defer e.sh.mu.Unlock()
	if !e.held() {
		return fmt.Errorf("memstore: phase %q ran but was not recorded: %w", point, storage.ErrLeaseLost)
	}
	e.point = point
	e.lockedUntil = e.now().Add(e.lease)
	return nil
}

// Complete records a copy of r as the key's response and ends the lock. The copy is the
// key's encoded blob, built before taking the shard's lock; r is not kept.
func (e *entry) Complete(ctx context.Context, r *storage.Response) error {
	if e.ended {
		return errLockEnded
	}
	if r == nil {
		return errors.New("memstore: complete: nil response")
	}
	blob, k := encode(e, r, e.now())
	e.sh.mu.Lock()
	defer e.sh.mu.Unlock()
	if !e.held() {
		return fmt.Errorf("memstore: complete: %w", storage.ErrLeaseLost)
	}
	*e.sh.at(e.n) = slot{created: e.created, blob: blob}
	if e.spilled {
		e.sh.spill[k] = e.n // k is e.k in the blob's strings: spill keeps nothing of the request
	}
	e.ended = true
	return nil
}

// Release gives the key up: it deletes it when no phase was recorded, or else ends the
// lease at once and keeps the recovery point, so the next claim takes over. After
// Complete or Release it is a no-op.
func (e *entry) Release(ctx context.Context) error {
	if e.ended {
		return nil
	}
	e.sh.mu.Lock()
	defer e.sh.mu.Unlock()
	if !e.held() {
		return fmt.Errorf("memstore: release: %w", storage.ErrLeaseLost)
	}
	if e.point == storage.RecoveryStarted {
		e.sh.remove(e.h, e.k, e.n)
	} else {
		e.lockedUntil = e.now()
	}
	e.ended = true
	return nil
}

// Flags of an encoded completed key: whether its fingerprint or body is nil, so that the
// decoded record tells nil from empty as the lock and the response given to Complete did.
const (
	nilFingerprint = 1 << iota
	nilBody
)

// encode serialises the key of lock e, completed at done with response r, into one string
// built in a single pointer-free allocation, and returns it with the key's id pointing
// into it. The layout is a flags byte, then uvarints and uvarint-prefixed strings:
//
//	flags scope key status done-seconds done-nanoseconds fingerprint method path point
//	len(header)+1 (0: nil header) number-of-values
//	per header name: name len(values)+1 (0: nil values) values...
//	body (the rest, no prefix)
//
// The key comes first, where slot.id reads it. Of done only the wall clock is kept; the
// record gives it the location of the creation time.
func encode(e *entry, r *storage.Response, done time.Time) (string, id) {
	var flags byte
	if e.fp == nil {
		flags |= nilFingerprint
	}
	if r.Body == nil {
		flags |= nilBody
	}
	sec, nsec := uint64(done.Unix()), uint64(done.Nanosecond())
	n := 1 + uvarintLen(uint64(r.Status)) + uvarintLen(sec) + uvarintLen(nsec) + len(r.Body)
	for _, s := range [...]string{e.k.scope, e.k.key, e.method, e.path, e.point} {
		n += uvarintLen(uint64(len(s))) + len(s)
	}
	n += uvarintLen(uint64(len(e.fp))) + len(e.fp)
	var small [8]headerField // a response keeps a handful of headers: iterate the map once
	fields, values := small[:0], 0
	for name, vs := range r.Header {
		fields = append(fields, headerField{name, vs})
		n += uvarintLen(uint64(len(name))) + len(name) + uvarintLen(uint64(len(vs))+1)
		for _, v := range vs {
			n += uvarintLen(uint64(len(v))) + len(v)
		}
		values += len(vs)
	}
	n += uvarintLen(uint64(len(r.Header))+1) + uvarintLen(uint64(values))

	var b strings.Builder
	b.Grow(n)
	b.WriteByte(flags)
	scopeAt := putString(&b, e.k.scope)
	keyAt := putString(&b, e.k.key)
	putUvarint(&b, uint64(r.Status))
	putUvarint(&b, sec)
	putUvarint(&b, nsec)
	putUvarint(&b, uint64(len(e.fp)))
	b.Write(e.fp)
	putString(&b, e.method)
	putString(&b, e.path)
	putString(&b, e.point)
	if r.Header == nil {
		putUvarint(&b, 0)
	} else {
		putUvarint(&b, uint64(len(r.Header))+1)
	}
	putUvarint(&b, uint64(values))
	for _, f := range fields {
		putString(&b, f.name)
		if f.values == nil {
			putUvarint(&b, 0)
			continue
		}
		putUvarint(&b, uint64(len(f.values))+1)
		for _, v := range f.values {
			putString(&b, v)
		}
	}
	b.Write(r.Body)
	blob := b.String()
	return blob, id{scope: blob[scopeAt : scopeAt+len(e.k.scope)], key: blob[keyAt : keyAt+len(e.k.key)]}
}

type headerField struct {
	name   string
	values []string
}

// decode rebuilds the record of the completed slot sl. Its strings point into the blob;
// the fingerprint and the body share one new byte slice, and the header's values one
// []string, so decoding allocates five times at most.
func decode(sl *slot) *storage.Record {
	d := blobReader{s: sl.blob}
	flags := d.s[0]
	d.s = d.s[1:]
	scope, key := d.str(), d.str()
	status := int(d.uvarint())
	sec, nsec := int64(d.uvarint()), int64(d.uvarint())
	fp := d.str()
	method, path, point := d.str(), d.str(), d.str()

	var header http.Header
	names, values := d.uvarint(), d.uvarint()
	if names > 0 {
		header = make(http.Header, names-1)
		all := make([]string, values)
		for range names - 1 {
			name := d.str()
			nv := d.uvarint()
			if nv == 0 {
				header[name] = nil
				continue
			}
			vs := all[: nv-1 : nv-1]
			all = all[nv-1:]
			for i := range vs {
				vs[i] = d.str()
			}
			header[name] = vs
		}
	}

	body := d.s
	buf := make([]byte, len(fp)+len(body))
	copy(buf, fp)
	copy(buf[len(fp):], body)
	out := &struct {
		rec  storage.Record
		resp storage.Response
	}{}
	out.resp = storage.Response{Status: status, Header: header, Body: buf[len(fp):]}
	if flags&nilBody != 0 {
		out.resp.Body = nil
	}
	out.rec = storage.Record{
		Scope:         scope,
		Key:           key,
		Fingerprint:   buf[:len(fp):len(fp)],
		Method:        method,
		Path:          path,
		State:         storage.StateCompleted,
		RecoveryPoint: point,
		Response:      &out.resp,
		CreatedAt:     sl.created,
		CompletedAt:   time.Unix(sec, nsec).In(sl.created.Location()),
	}
	if flags&nilFingerprint != 0 {
		out.rec.Fingerprint = nil
	}
	return &out.rec
}

// blobReader reads the fields encode wrote.
type blobReader struct{ s string }

func (d *blobReader) uvarint() uint64 {
	var x uint64
	for shift := 0; ; shift += 7 {
		c := d.s[0]
		d.s = d.s[1:]
		if c < 0x80 {
			return x | uint64(c)<<shift
		}
		x |= uint64(c&0x7f) << shift
	}
}

func (d *blobReader) str() string {
	n := d.uvarint()
	s := d.s[:n]
	d.s = d.s[n:]
	return s
}

func uvarintLen(x uint64) int {
	n := 1
	for ; x >= 0x80; x >>= 7 {
		n++
	}
	return n
}

func putUvarint(b *strings.Builder, x uint64) {
	for ; x >= 0x80; x >>= 7 {
		b.WriteByte(byte(x) | 0x80)
	}
	b.WriteByte(byte(x))
}

// putString writes s with its length in front and returns where s starts in b.
func putString(b *strings.Builder, s string) int {
	putUvarint(b, uint64(len(s)))
	at := b.Len()
	b.WriteString(s)
	return at
}
