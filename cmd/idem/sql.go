package main

// The CLI's own SQL on the key table, for show and stats: every statement it runs is in
// this file. The columns are those of pgxstore/schema.sql, which gormstore's model
// creates too (text or VARBINARY(255) keys, bytea or blob bytes; timestamps as
// timestamptz on PostgreSQL, as UTC wall-clock DATETIME(6) on MySQL/MariaDB, and as UTC
// "2006-01-02 15:04:05.000000" text on SQLite, which gormstore compares as text).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// wallLayout is how gormstore writes times on MySQL/MariaDB and SQLite.
const wallLayout = "2006-01-02 15:04:05.000000"

// quoteTable quotes a table name, schema-qualified or not, for the dialect.
func quoteTable(d dialect, table string) string {
	parts := strings.Split(table, ".")
	switch d {
	case postgres:
		return pgx.Identifier(parts).Sanitize()
	case mysqlDB:
		for i, p := range parts {
			parts[i] = "`" + strings.ReplaceAll(p, "`", "``") + "`"
		}
	default:
		for i, p := range parts {
			parts[i] = `"` + strings.ReplaceAll(p, `"`, `""`) + `"`
		}
	}
	return strings.Join(parts, ".")
}

// q turns the ? placeholders of a statement into $1, $2… on PostgreSQL.
func q(d dialect, stmt string) string {
	if d != postgres {
		return stmt
	}
	var b strings.Builder
	n := 0
	for _, r := range stmt {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// tableExists reports whether the key table is there.
func (c *conn) tableExists(ctx context.Context) (bool, error) {
	var n int
	var err error
	switch c.url.dialect {
	case postgres:
		err = c.db.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT to_regclass($1) AS t) r WHERE t IS NOT NULL`,
			quoteTable(postgres, c.table)).Scan(&n)
	case mysqlDB:
		schema, name, qualified := strings.Cut(c.table, ".")
		if !qualified {
			schema, name = "", c.table
		}
		err = c.db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.tables
			WHERE table_schema = COALESCE(NULLIF(?, ''), DATABASE()) AND table_name = ?`, schema, name).Scan(&n)
	default:
		err = c.db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, c.table).Scan(&n)
	}
	if err != nil {
		return false, fmt.Errorf("looking for table %s: %w", c.table, err)
	}
	return n > 0, nil
}

// now is the clock leases are measured on: the database's for PostgreSQL and MySQL,
// the application's (this process's) for SQLite, as gormstore does.
func (c *conn) now(ctx context.Context) (time.Time, error) {
	var t time.Time
	switch c.url.dialect {
	case postgres:
		if err := c.db.QueryRowContext(ctx, `SELECT statement_timestamp()`).Scan(&t); err != nil {
			return t, fmt.Errorf("reading the database's clock: %w", err)
		}
	case mysqlDB:
		if err := c.db.QueryRowContext(ctx, `SELECT UTC_TIMESTAMP(6)`).Scan(timeCol{&t, true}); err != nil {
			return t, fmt.Errorf("reading the database's clock: %w", err)
		}
	default:
		t = time.Now()
	}
	return t.UTC(), nil
}

// timeArg is t as a statement argument in the dialect's column format.
func (c *conn) timeArg(t time.Time) any {
	if c.url.dialect == postgres {
		return t
	}
	return t.UTC().Format(wallLayout)
}

// keyRow is one key as show prints it.
type keyRow struct {
	Scope, Key             string
	Fingerprint            []byte
	Method, Path           string
	State, RecoveryPoint   string
	LockedUntil            time.Time // zero: none
	LeaseToken             string
	ResponseCode           sql.NullInt64
	ResponseHeaders        []byte
	BodySize               sql.NullInt64
	CreatedAt, CompletedAt time.Time
	Now                    time.Time // the clock's time when read
}

// errNoKey is show's "not found".
var errNoKey = errors.New("no such key")

// readKey reads one key.
func (c *conn) readKey(ctx context.Context, scope, key string) (*keyRow, error) {
	now, err := c.now(ctx)
	if err != nil {
		return nil, err
	}
	size := "length(response_body)"
	if c.url.dialect == postgres {
		size = "octet_length(response_body)"
	}
	wall := c.url.dialect != postgres
	r := keyRow{Now: now}
	var scopeB, keyB []byte
	var token any
	err = c.db.QueryRowContext(ctx, q(c.url.dialect, `SELECT scope, idem_key, request_hash, method, path, state,
		recovery_point, locked_until, lease_token, response_code, response_headers, `+size+`, created_at, completed_at
		FROM `+quoteTable(c.url.dialect, c.table)+` WHERE scope = ? AND idem_key = ?`), scope, key).Scan(
		&scopeB, &keyB, &r.Fingerprint, &r.Method, &r.Path, &r.State,
		&r.RecoveryPoint, timeCol{&r.LockedUntil, wall}, &token, &r.ResponseCode, &r.ResponseHeaders, &r.BodySize,
		timeCol{&r.CreatedAt, wall}, timeCol{&r.CompletedAt, wall})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNoKey
	}
	if err != nil {
		return nil, fmt.Errorf("reading key %q in scope %q: %w", key, scope, err)
	}
	r.Scope, r.Key, r.LeaseToken = string(scopeB), string(keyB), formatToken(token)
	return &r, nil
}

// formatToken shows a lease token (uuid on PostgreSQL, 16 bytes elsewhere) as a UUID.
func formatToken(v any) string {
	switch t := v.(type) {
	case nil:
		return ""
	case []byte:
		if len(t) == 16 {
			return fmt.Sprintf("%x-%x-%x-%x-%x", t[0:4], t[4:6], t[6:8], t[8:10], t[10:16])
		}
		return string(t)
	case [16]byte:
		return formatToken(t[:])
	default:
		return fmt.Sprint(t)
	}
}

// tableStats is what stats prints.
type tableStats struct {
	ByState     map[string]int
	Total       int
	Live        int // started keys whose lease has not ended: requests in flight
	Oldest      *keyRow
	Expired     int // created before now - retention: the sweeper's next work
	ExpiredLive int // of those, holding a live lease (the sweeper leaves them)
	Cutoff, Now time.Time
	Retention   time.Duration
}

// readStats counts the keys.
func (c *conn) readStats(ctx context.Context, retention time.Duration) (*tableStats, error) {
	now, err := c.now(ctx)
	if err != nil {
		return nil, err
	}
	d, t, wall := c.url.dialect, quoteTable(c.url.dialect, c.table), c.url.dialect != postgres
	s := &tableStats{ByState: map[string]int{}, Now: now, Cutoff: now.Add(-retention), Retention: retention}
	rows, err := c.db.QueryContext(ctx, `SELECT state, count(*) FROM `+t+` GROUP BY state ORDER BY state`)
	if err != nil {
		return nil, fmt.Errorf("counting keys by state: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var state string
		var n int
		if err := rows.Scan(&state, &n); err != nil {
			return nil, fmt.Errorf("counting keys by state: %w", err)
		}
		s.ByState[state], s.Total = n, s.Total+n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("counting keys by state: %w", err)
	}
	if err := c.db.QueryRowContext(ctx, q(d, `SELECT count(*) FROM `+t+` WHERE state = 'started' AND locked_until > ?`),
		c.timeArg(now)).Scan(&s.Live); err != nil {
		return nil, fmt.Errorf("counting live leases: %w", err)
	}
	if err := c.db.QueryRowContext(ctx, q(d, `SELECT count(*), COALESCE(SUM(CASE WHEN locked_until > ? THEN 1 ELSE 0 END), 0)
		FROM `+t+` WHERE created_at < ?`), c.timeArg(now), c.timeArg(s.Cutoff)).Scan(&s.Expired, &s.ExpiredLive); err != nil {
		return nil, fmt.Errorf("counting expired keys: %w", err)
	}
	if s.Total == 0 {
		return s, nil
	}
	var o keyRow
	var scopeB, keyB []byte
	if err := c.db.QueryRowContext(ctx, `SELECT scope, idem_key, state, created_at FROM `+t+` ORDER BY created_at LIMIT 1`).Scan(
		&scopeB, &keyB, &o.State, timeCol{&o.CreatedAt, wall}); err != nil {
		return nil, fmt.Errorf("finding the oldest key: %w", err)
	}
	o.Scope, o.Key = string(scopeB), string(keyB)
	s.Oldest = &o
	return s, nil
}

// timeCol scans a timestamp column (NULL: the zero time). On MySQL and SQLite (wall)
// the column holds a UTC wall clock, whatever location the driver gives it.
type timeCol struct {
	t    *time.Time
	wall bool
}

// Scan implements sql.Scanner.
func (tc timeCol) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*tc.t = time.Time{}
	case time.Time:
		if tc.wall {
			v = time.Date(v.Year(), v.Month(), v.Day(), v.Hour(), v.Minute(), v.Second(), v.Nanosecond(), time.UTC)
		}
		*tc.t = v.UTC()
	case []byte:
		return tc.parse(string(v))
	case string:
		return tc.parse(v)
	default:
		return fmt.Errorf("cannot read %T as a time", src)
	}
	return nil
}

func (tc timeCol) parse(s string) error {
	for _, layout := range []string{"2006-01-02 15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00", time.RFC3339Nano} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			*tc.t = t.UTC()
			return nil
		}
	}
	return fmt.Errorf("cannot read %q as a time", s)
}
