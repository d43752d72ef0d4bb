package memstore

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/idemkit/idem/core/storage"
)

// keptRequest is a copy of a claim's kept request (nil when none), so the caller's memory
// is not kept.
func keptRequest(r *storage.Request) *storage.Request {
	if r == nil {
		return nil
	}
	return &storage.Request{Method: r.Method, Host: r.Host, URI: r.URI, Header: r.Header.Clone(), Body: bytes.Clone(r.Body)}
}

// Abandoned implements storage.Completable. The records are copies; their Request is the
// store's and must not be mutated.
func (s *Store) Abandoned(ctx context.Context, q storage.AbandonedQuery) ([]*storage.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: abandoned: %w", err)
	}
	if q.Limit <= 0 {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var found []*storage.Record
	for _, e := range s.keys {
		r := e.rec
		if r.State == storage.StateStarted && r.Request != nil &&
			!r.LockedUntil.After(now.Add(-q.Grace)) && now.Sub(r.CreatedAt) < q.Horizon &&
			r.Attempts < q.MaxAttempts && !r.NextAttempt.After(now) {
			found = append(found, e.report())
		}
	}
	slices.SortFunc(found, func(a, b *storage.Record) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return found[:min(q.Limit, len(found))], nil
}

// BeginAttempt implements storage.Completable.
func (s *Store) BeginAttempt(ctx context.Context, scope, key string, seen int, backoff time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("memstore: begin attempt: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	e := s.keys[id{scope, key}]
	if e == nil || e.rec.State != storage.StateStarted || e.live(now) || e.rec.Attempts != seen {
		return false, nil
	}
	e.rec.Attempts = seen + 1
	e.rec.NextAttempt = now.Add(backoff)
	return true, nil
}
