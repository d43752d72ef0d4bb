package gormstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/keyrow"
)

// row is a key as read from the table, with the database's clock at the time.
type row struct {
	scope, key                 string
	hash                       []byte
	method, path, state, point string
	lockedUntil                time.Time
	code                       sql.NullInt64
	headers, body              []byte
	createdAt, completedAt     time.Time
	request                    []byte // core.Completer's kept request, attempts and next attempt
	attempts                   int64
	nextAttempt                time.Time
	now                        time.Time
}

const rowColumns = "scope, idem_key, request_hash, method, path, state, recovery_point, locked_until, " +
	"response_code, response_headers, response_body, created_at, completed_at, request, completer_attempts, next_attempt"

// read returns the key's row, or nil when there is none. forUpdate locks it (except on
// SQLite, where the transaction already holds the write lock).
func (s *Store) read(ctx context.Context, db *gorm.DB, scope, key string, forUpdate bool, now time.Time) (*row, error) {
	nowSQL, nowArgs := s.nowSQL(now)
	q := "SELECT " + rowColumns + ", " + nowSQL + " FROM " + s.quoted + " WHERE scope = ? AND idem_key = ?"
	if forUpdate && s.dialect != sqlite {
		q += " FOR UPDATE"
	}
	rows, err := db.WithContext(ctx).Raw(q, append(nowArgs, scope, key)...).Rows()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	if !rows.Next() {
		return nil, rows.Err()
	}
	r, err := s.scanRow(rows)
	if err != nil {
		return nil, err
	}
	return r, rows.Close()
}

// scanRow scans a row of rowColumns and the clock.
func (s *Store) scanRow(rows *sql.Rows) (*row, error) {
	wall := s.dialect != postgres
	var r row
	if err := rows.Scan(&r.scope, &r.key, &r.hash, &r.method, &r.path, &r.state, &r.point,
		keyrow.TimeScanner{Dest: &r.lockedUntil, Wall: wall}, &r.code, &r.headers, &r.body,
		keyrow.TimeScanner{Dest: &r.createdAt, Wall: wall}, keyrow.TimeScanner{Dest: &r.completedAt, Wall: wall},
		&r.request, &r.attempts, keyrow.TimeScanner{Dest: &r.nextAttempt, Wall: wall},
		keyrow.TimeScanner{Dest: &r.now, Wall: wall}); err != nil {
		return nil, err
	}
	return &r, nil
}

// record is the row as the engine sees it.
func (r *row) record() (*storage.Record, error) {
	rec := &storage.Record{
		Scope: r.scope, Key: r.key, Fingerprint: r.hash, Method: r.method, Path: r.path,
		State: storage.State(r.state), RecoveryPoint: r.point, LockedUntil: r.lockedUntil,
		CreatedAt: r.createdAt, CompletedAt: r.completedAt, Attempts: int(r.attempts), NextAttempt: r.nextAttempt,
	}
	// The kept request is the completer's alone: one this version cannot read (a newer
	// format, a damaged value) must not fail the key's own claims and reads; Abandoned
	// skips the key (its Request is nil).
	if req, err := storage.DecodeRequest(r.request); err == nil {
		rec.Request = req
	}
	if rec.State == storage.StateCompleted {
		h, err := storage.DecodeHeader(r.headers)
		if err != nil {
			return nil, fmt.Errorf("gormstore: stored response of key %q: %w", r.key, err)
		}
		body := r.body
		if body == nil {
			body = []byte{}
		}
		rec.Response = &storage.Response{Status: int(r.code.Int64), Header: h, Body: body}
	}
	return rec, nil
}
