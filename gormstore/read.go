package gormstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/keyrow"
)

var (
	_ storage.KeyCounter = (*Store)(nil)
)

// Lookup implements storage.Store: one statement outside any transaction, with the
// clock the store's leases run on (the database's on PostgreSQL and MySQL/MariaDB, the
// application's on SQLite). A key an atomic request holds is not visible before it
// commits.
func (s *Store) Lookup(ctx context.Context, scope, key string) (*storage.Record, time.Time, error) {
	r, err := s.read(ctx, s.db, scope, key, false, s.clock())
	switch {
	case err != nil:
		return nil, time.Time{}, wrap(ctx, "look up", err)
	case r == nil:
		return nil, time.Time{}, fmt.Errorf("gormstore: key %q in scope %q: %w", key, scope, storage.ErrNotFound)
	}
	rec, err := r.record()
	return rec, r.now, err
}

// CountKeys implements storage.KeyCounter: one statement counts the table (a full scan),
// another reads the oldest key (by the created_at index).
func (s *Store) CountKeys(ctx context.Context) (*storage.KeyCounts, error) {
	now := s.clock()
	nowSQL, nowArgs := s.nowSQL(now)
	cutSQL, cutArgs := s.plusSQL(now, -s.retention)
	live := "state = 'started' AND locked_until > " + nowSQL
	expired := "created_at < " + cutSQL
	q := "SELECT COALESCE(SUM(CASE WHEN state = 'started' THEN 1 ELSE 0 END), 0), " +
		"COALESCE(SUM(CASE WHEN state = 'completed' THEN 1 ELSE 0 END), 0), " +
		"COALESCE(SUM(CASE WHEN " + live + " THEN 1 ELSE 0 END), 0), " +
		"COALESCE(SUM(CASE WHEN " + expired + " THEN 1 ELSE 0 END), 0), " +
		"COALESCE(SUM(CASE WHEN " + expired + " AND " + live + " THEN 1 ELSE 0 END), 0), " +
		nowSQL + " FROM " + s.quoted
	var args []any
	for _, a := range [][]any{nowArgs, cutArgs, cutArgs, nowArgs, nowArgs} {
		args = append(args, a...)
	}
	db := s.db.WithContext(ctx)
	wall := s.dialect != postgres
	kc := &storage.KeyCounts{}
	if err := db.Raw(q, args...).Row().Scan(&kc.Started, &kc.Completed, &kc.Live, &kc.Expired, &kc.ExpiredLive,
		keyrow.TimeScanner{Dest: &kc.Now, Wall: wall}); err != nil {
		return nil, wrap(ctx, "count keys", err)
	}
	o := &storage.Record{}
	var state string
	err := db.Raw("SELECT scope, idem_key, state, created_at FROM "+s.quoted+" ORDER BY created_at LIMIT 1").Row().Scan(
		&o.Scope, &o.Key, &state, keyrow.TimeScanner{Dest: &o.CreatedAt, Wall: wall})
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return nil, wrap(ctx, "count keys: oldest", err)
	default:
		o.State = storage.State(state)
		kc.Oldest = o
	}
	return kc, nil
}
