package pgxstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemkit/idem/core/storage"
)

var (
	_ storage.KeyCounter = (*Store)(nil)
)

// Lookup implements storage.Store: one statement, outside any transaction, with the
// database's clock (now()). A key an atomic request holds is not visible before it
// commits.
func (s *Store) Lookup(ctx context.Context, scope, key string) (*storage.Record, time.Time, error) {
	var (
		row      claimRow
		request  []byte
		attempts int32
		next     pgtype.Timestamptz
	)
	err := s.scan(ctx, nil, 0, s.cq.lookup, []any{scope, key}, append(row.dest(), &request, &attempts, &next)...)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, time.Time{}, fmt.Errorf("pgxstore: key %q in scope %q: %w", key, scope, storage.ErrNotFound)
	case err != nil:
		return nil, time.Time{}, classify(ctx, "look up", err, false)
	}
	rec, err := row.record(scope, key)
	if err != nil {
		return nil, time.Time{}, err
	}
	// A kept request it cannot read (a later version's format, a damaged value) is left
	// out, so that the key still reads (idem show); Abandoned skips it.
	if req, err := storage.DecodeRequest(request); err == nil {
		rec.Request = req
	}
	rec.Attempts, rec.NextAttempt = int(attempts), next.Time
	return rec, row.now.Time, nil
}

// CountKeys implements storage.KeyCounter: one statement counts the table (a sequential
// scan), another reads the oldest key (by the created_at index).
func (s *Store) CountKeys(ctx context.Context) (*storage.KeyCounts, error) {
	kc := &storage.KeyCounts{}
	if err := s.scan(ctx, nil, 0, s.q.count, []any{s.retention.Microseconds()},
		&kc.Started, &kc.Completed, &kc.Live, &kc.Expired, &kc.ExpiredLive, &kc.Now); err != nil {
		return nil, classify(ctx, "count keys", err, false)
	}
	o := &storage.Record{}
	err := s.scan(ctx, nil, 0, s.q.oldest, nil, &o.Scope, &o.Key, &o.State, &o.CreatedAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return nil, classify(ctx, "count keys: oldest", err, false)
	default:
		kc.Oldest = o
	}
	return kc, nil
}
