package core

import (
	"bytes"
	"crypto/sha256"
	"hash/maphash"
	"net/http"
	"sync"
)

// recentFingerprints remembers, for each of recentSlots slots, the last request the
// default fingerprint was computed for (its scope, key, method, URL and body) and that
// fingerprint, so that a retry that resends the very same bytes with the same key (what
// clients, SDKs and gateways do) is recognised by comparing bytes instead of
// canonicalising and hashing its body again: the most of a replay's time on an in-memory
// store (BENCHMARKS.md, "Against fiber"). A hit is decided on every input
// appendFingerprint reads, compared exactly, so its fingerprint is the one a
// recomputation gives; the scope and key are compared too, so a slot only ever answers a
// retry of the request that filled it. A slot holds the latest key hashed to it; bodies
// over recentBodyMax are not kept, so the memory is bounded (at most 256 KiB of bodies).
type recentFingerprints struct {
	seed  maphash.Seed
	slots [recentSlots]recentSlot
}

const (
	recentSlots   = 256
	recentBodyMax = 1 << 10
)

// recentSlot is one remembered request and its fingerprint.
type recentSlot struct {
	mu                                       sync.Mutex
	scope, key, method, path, rawPath, query string
	body                                     []byte
	sum                                      [sha256.Size]byte
}

// fingerprint appends the default fingerprint of r with body, sent with key in scope, to
// dst: the remembered one when the slot holds this very request, else a computed one,
// which the slot then remembers.
func (m *recentFingerprints) fingerprint(dst []byte, scope, key string, r *http.Request, body []byte) []byte {
	if len(body) > recentBodyMax {
		return appendFingerprint(dst, r, body, nil)
	}
	s, u := &m.slots[maphash.String(m.seed, key)%recentSlots], r.URL
	s.mu.Lock()
	if s.key == key && s.scope == scope && s.method == r.Method && s.path == u.Path && s.rawPath == u.RawPath &&
		s.query == u.RawQuery && bytes.Equal(s.body, body) {
		dst = append(dst, s.sum[:]...)
		s.mu.Unlock()
		return dst
	}
	s.mu.Unlock()
	dst = appendFingerprint(dst, r, body, nil)
	s.mu.Lock()
	s.scope, s.key, s.method, s.path, s.rawPath, s.query = scope, key, r.Method, u.Path, u.RawPath, u.RawQuery
	s.body = append(s.body[:0], body...)
	copy(s.sum[:], dst[len(dst)-sha256.Size:])
	s.mu.Unlock()
	return dst
}
