package gormstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/idemkit/idem/core/storage"
)

// Store is a storage.Store on a GORM database: PostgreSQL (gorm.io/driver/postgres),
// MySQL/MariaDB with InnoDB (gorm.io/driver/mysql) or SQLite (github.com/glebarez/sqlite).
// It supports both modes; atomic is the engine's default for it. It is safe for
// concurrent use.
type Store struct {
	db      *gorm.DB
	dialect dialect
	table   string // as configured, for GORM's Table
	quoted  string // quoted for raw SQL
	// PostgreSQL's atomic claim and completion (claimLocked).
	tryLockSQL, recordSQL string
	retention             time.Duration
	iso                   sql.IsolationLevel

	lookupFirst bool
	singleWrite bool
}

var _ storage.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*Store)

// WithTable names the key table. A schema-qualified name ("idem.keys") is allowed where
// the database has schemas. Default: DefaultTable ("idempotency_keys").
func WithTable(name string) Option {
	return func(s *Store) { s.table = name }
}

// WithRetention sets how long a key is kept: an older key counts as absent to claims,
// and core.Sweeper deletes it. It is the one retention setting (the engine and the
// sweeper read it from the store). Default: DefaultRetention (24h).
func WithRetention(d time.Duration) Option {
	return func(s *Store) { s.retention = d }
}

// WithIsolation sets the isolation level of the transactions the store opens on
// PostgreSQL and MySQL/MariaDB (the claim's, which the handler shares in atomic mode,
// and the phases'). At REPEATABLE READ or SERIALIZABLE a twin may hit a serialization
// failure: the store retries the claim a few times, then returns storage.ErrTransient.
// SQLite ignores it: its write transactions are serializable. Default:
// sql.LevelDefault, the database's own default.
func WithIsolation(level sql.IsolationLevel) Option {
	return func(s *Store) { s.iso = level }
}

// WithLookupFirst makes atomic claims read the key outside a transaction first, as
// phased claims always do: a completed key is then replayed with that one statement, and
// only an unknown key opens a transaction (on SQLite, only those take the write lock). It
// costs every first request one more statement, so it pays off where most requests are
// retries. Default: off on PostgreSQL and MySQL/MariaDB (an atomic replay costs BEGIN,
// the lock wait setting, the claim, a SELECT … FOR UPDATE, its restore and ROLLBACK); on
// SQLite always on, since there every claim transaction queues for the one write lock.
func WithLookupFirst() Option {
	return func(s *Store) { s.lookupFirst = true }
}

// WithSingleWrite makes an atomic claim on PostgreSQL write nothing: it takes the key's
// transaction-scoped advisory lock (a twin in flight holds it, so a twin waits, up to the
// lock wait, then replays) and looks the key up; Complete inserts the completed row with
// the response just before COMMIT, the request's one write to the key table. The primary
// key stays the final arbiter: where the lock does not serialise, the twin's INSERT
// fails, its transaction rolls back with its business writes, and Complete returns an
// error wrapping storage.ErrTransient (503; the retry replays). MySQL/MariaDB and SQLite
// ignore it: their claim is the key row's INSERT. Default: off.
func WithSingleWrite() Option {
	return func(s *Store) { s.singleWrite = true }
}

// New returns a Store on db. It does not touch the database: call Migrate to create the
// table, or create it yourself (see the package documentation). New panics on a
// programming error: a nil db, a dialect other than postgres, mysql and sqlite, an empty
// table name, a retention that is not positive, or a MySQL DSN with clientFoundRows=true
// (the claim tells a new key from an existing one by the rows affected).
func New(db *gorm.DB, opts ...Option) *Store {
	if db == nil {
		panic("gormstore: New with a nil *gorm.DB")
	}
	d, err := dialectOf(db.Dialector.Name())
	if err != nil {
		panic(err.Error())
	}
	s := &Store{
		db:        db.Session(&gorm.Session{NewDB: true}),
		dialect:   d,
		table:     DefaultTable,
		retention: DefaultRetention,
		// SQLite has one write lock: a replay that reads first never queues for it.
		lookupFirst: d == sqlite,
	}
	for _, o := range opts {
		o(s)
	}
	if strings.TrimSpace(s.table) == "" {
		panic("gormstore: WithTable with an empty name")
	}
	if s.retention <= 0 {
		panic(fmt.Sprintf("gormstore: WithRetention(%v): the retention must be positive", s.retention))
	}
	if my, ok := db.Dialector.(*gormmysql.Dialector); ok && my.Config != nil && my.DSNConfig != nil && my.DSNConfig.ClientFoundRows {
		panic("gormstore: the MySQL DSN sets clientFoundRows=true; the store needs the default (false)")
	}
	var b strings.Builder
	s.db.Dialector.QuoteTo(&b, s.table)
	s.quoted = b.String()
	// tryLock: NULL when a row holds the key, else whether the key's advisory lock was
	// free (and is now this transaction's).
	s.tryLockSQL = "SELECT CASE WHEN EXISTS (SELECT 1 FROM " + s.quoted +
		" WHERE scope = ? AND idem_key = ?) THEN NULL ELSE pg_try_advisory_xact_lock(?) END"
	s.recordSQL = "INSERT INTO " + s.quoted + " (scope, idem_key, request_hash, method, path, state, recovery_point, " +
		"response_code, response_headers, response_body, created_at, completed_at) " +
		"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, now(), statement_timestamp())"
	return s
}

// Migrate creates the key table and its index on created_at if they do not exist,
// from the store's GORM model (see the package documentation for the DDL it amounts to
// on each dialect). On an existing table it only adds missing columns: unlike a plain
// AutoMigrate it never alters a column, so a table made by hand (from pgxstore's
// schema.sql, say) keeps its types, defaults and checks. It is never called implicitly.
func (s *Store) Migrate(ctx context.Context) error {
	db := s.db.WithContext(ctx).Table(s.table)
	if s.dialect == mariadb {
		db = db.Set("gorm:table_options", "ENGINE=InnoDB")
	}
	m := db.Migrator()
	if !m.HasTable(s.table) {
		if err := m.CreateTable(&keyRow{}); err != nil && !m.HasTable(s.table) { // another instance may have won
			return fmt.Errorf("gormstore: migrate %s: %w", s.table, err)
		}
	} else {
		for _, column := range modelColumns {
			if !m.HasColumn(&keyRow{}, column) {
				if err := m.AddColumn(&keyRow{}, column); err != nil {
					return fmt.Errorf("gormstore: migrate %s: add column %s: %w", s.table, column, err)
				}
			}
		}
	}
	// The index on created_at, named as pgxstore names it, so that neither store adds a
	// second one to a table the other made.
	name := s.table[strings.LastIndexByte(s.table, '.')+1:] + "_created_at_idx"
	if m.HasIndex(s.table, name) {
		return nil
	}
	var q strings.Builder
	q.WriteString("CREATE INDEX ")
	if s.dialect != mariadb { // MySQL has no IF NOT EXISTS here
		q.WriteString("IF NOT EXISTS ")
	}
	s.db.Dialector.QuoteTo(&q, name)
	q.WriteString(" ON " + s.quoted + " (created_at)")
	if err := s.db.WithContext(ctx).Exec(q.String()).Error; err != nil && !m.HasIndex(s.table, name) {
		return fmt.Errorf("gormstore: migrate %s: index: %w", s.table, err)
	}
	return nil
}

// SupportsAtomic reports true: the store shares its transaction with the handler.
func (s *Store) SupportsAtomic() bool { return true }

// Retention reports how long keys are kept (WithRetention).
func (s *Store) Retention() time.Duration { return s.retention }

// claimAttempts bounds how often Claim retries a claim that lost a race it cannot lose
// for good: a deadlock or serialization failure (nothing of the caller's ran yet), or a
// row that vanished between two statements.
const claimAttempts = 3

// errRetry makes Claim start over.
var errRetry = errors.New("gormstore: claim raced, retrying")

// Claim implements storage.Store.Claim. In phased mode (and in atomic mode with
// WithLookupFirst) the key is read first, without a transaction or a lock, and a record
// the claim would only report (completed, live lease, other fingerprint) is returned from
// that one statement. Anything else runs in a transaction whose first write is the claim:
//
//   - PostgreSQL: INSERT … ON CONFLICT DO NOTHING, then SELECT … FOR UPDATE on conflict,
//     waits bounded by lock_timeout (55P03/57014 → storage.ErrInProgress; 40001/40P01 →
//     storage.ErrTransient).
//   - MySQL/MariaDB: INSERT … ON DUPLICATE KEY UPDATE (an exclusive lock on a duplicate,
//     where a plain INSERT's shared lock lets twins deadlock), SELECT … FOR UPDATE,
//     innodb_lock_wait_timeout (1205 → ErrInProgress; 1213 → ErrTransient).
//   - SQLite: no row locks; the INSERT, first statement of the transaction, takes the
//     database's write lock, waiting up to busy_timeout (SQLITE_BUSY → ErrInProgress).
//     Writers are serialized: in atomic mode a request holds the write lock until it
//     completes, so any other claim waits for it, up to its lock wait.
//
// In atomic mode the returned lock's transaction is bound to ctx: if ctx ends before
// Complete, the transaction rolls back.
func (s *Store) Claim(ctx context.Context, c storage.Claim) (storage.Lock, *storage.Record, error) {
	switch c.Mode {
	case storage.ModeAtomic, storage.ModePhased:
	default:
		return nil, nil, fmt.Errorf("gormstore: claim in mode %v: %w", c.Mode, storage.ErrUnsupportedMode)
	}
	if s.dialect == mariadb && (len(c.Scope) > maxKeyBytes || len(c.Key) > maxKeyBytes) {
		return nil, nil, fmt.Errorf("gormstore: claim: scope and key are limited to %d bytes each on MySQL/MariaDB (got %d and %d)",
			maxKeyBytes, len(c.Scope), len(c.Key))
	}
	if c.Fingerprint == nil {
		c.Fingerprint = []byte{}
	}
	wait := c.LockWait
	if wait <= 0 {
		wait = defaultLockWait // the engine always sets one (core.Config.LockWait)
	}

	if c.Mode == storage.ModePhased || s.lookupFirst {
		r, err := s.read(ctx, s.db, c.Scope, c.Key, false, s.clock())
		if err != nil {
			return nil, nil, wrap(ctx, "claim: lookup", err)
		}
		if r != nil && s.judge(r, c) == reportIt {
			rec, err := r.record()
			return nil, rec, err
		}
	}

	// database/sql rolls a transaction back when the context it began with ends, so the
	// transaction begins with the request's context and only the claim's own statements
	// run under c.Timeout.
	txCtx := ctx
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	for attempt := 1; ; attempt++ {
		lock, rec, err := s.claimTx(txCtx, ctx, c, wait)
		if err == nil || attempt == claimAttempts || ctx.Err() != nil ||
			!(errors.Is(err, errRetry) || errors.Is(err, storage.ErrTransient)) {
			if errors.Is(err, errRetry) {
				err = fmt.Errorf("%w: %w", storage.ErrTransient, err)
			}
			return lock, rec, err
		}
	}
}

// claimTx is one attempt at a claim, in a transaction of its own.
func (s *Store) claimTx(txCtx, ctx context.Context, c storage.Claim, wait time.Duration) (_ storage.Lock, _ *storage.Record, err error) {
	tx, err := s.begin(txCtx)
	if err != nil {
		return nil, nil, wrap(ctx, "claim: begin", err)
	}
	if s.dialect == postgres && c.Mode == storage.ModeAtomic && s.singleWrite {
		l, done, err := s.claimLocked(ctx, tx, c, wait)
		if done || err != nil {
			return l, nil, err
		}
		// A row holds the key: the claim below reads and locks it in this transaction.
	}
	restore, err := s.setLockWait(ctx, tx, wait)
	if err != nil {
		tx.Rollback()
		return nil, nil, wrap(ctx, "claim: lock wait", err)
	}
	claimed := false
	defer func() {
		if claimed {
			return
		}
		if s.dialect != postgres { // SET LOCAL ends with the transaction; the others do not
			_ = restore()
		}
		tx.Rollback()
	}()

	now := s.clock()
	token := s.newToken()
	nowSQL, nowArgs := s.nowSQL(now)
	values := map[string]any{
		"scope":          c.Scope,
		"idem_key":       c.Key,
		"request_hash":   c.Fingerprint,
		"method":         c.Method,
		"path":           c.Path,
		"state":          string(storage.StateStarted),
		"recovery_point": storage.RecoveryStarted,
		"locked_until":   s.leaseExpr(c, now),
		"lease_token":    token,
		"created_at":     gorm.Expr(nowSQL, nowArgs...),
	}
	res := tx.WithContext(ctx).Model(&keyRow{}).Table(s.table).Clauses(clause.OnConflict{DoNothing: true}).Create(values)
	if res.Error != nil {
		return nil, nil, wrap(ctx, "claim: insert", res.Error)
	}
	if res.RowsAffected == 1 {
		l, err := s.hold(ctx, tx, restore, c, token, storage.RecoveryStarted, false)
		claimed = err == nil
		return l, nil, err
	}

	r, err := s.read(ctx, tx, c.Scope, c.Key, true, now)
	switch {
	case err != nil:
		return nil, nil, wrap(ctx, "claim: select", err)
	case r == nil: // deleted since the insert saw it
		return nil, nil, errRetry
	}
	switch s.judge(r, c) {
	case reportIt:
		rec, err := r.record()
		return nil, rec, err
	case claimAfresh:
		q, args := s.reclaimSQL(c, token, now)
		if res := tx.WithContext(ctx).Exec(q, args...); res.Error != nil {
			return nil, nil, wrap(ctx, "claim: reclaim", res.Error)
		}
		l, err := s.hold(ctx, tx, restore, c, token, storage.RecoveryStarted, false)
		claimed = err == nil
		return l, nil, err
	default: // takeOver
		q, args := s.takeoverSQL(c, token, now)
		res := tx.WithContext(ctx).Exec(q, args...)
		switch {
		case res.Error != nil:
			return nil, nil, wrap(ctx, "claim: take over", res.Error)
		case res.RowsAffected != 1:
			return nil, nil, errRetry
		}
		l, err := s.hold(ctx, tx, restore, c, token, r.point, true)
		claimed = err == nil
		return l, nil, err
	}
}

// hold turns the claim's transaction into a lock: atomic, it stays open for the handler
// with the connection's own lock wait back; phased, it commits.
func (s *Store) hold(ctx context.Context, tx *gorm.DB, restore func() error, c storage.Claim, token any, point string, takenOver bool) (*lock, error) {
	l := &lock{
		s: s, mode: c.Mode, scope: c.Scope, key: c.Key, token: token, lease: c.Lease, timeout: c.Timeout,
		initial: point, point: point, progress: point != storage.RecoveryStarted, takenOver: takenOver,
	}
	if c.Mode == storage.ModeAtomic {
		if err := restore(); err != nil {
			return nil, wrap(ctx, "claim: restore lock wait", err)
		}
		l.tx = tx
		l.held = &holder{tx: tx, base: s.db}
		return l, nil
	}
	if s.dialect != postgres {
		if err := restore(); err != nil {
			return nil, wrap(ctx, "claim: restore lock wait", err)
		}
	}
	if err := tx.Commit().Error; err != nil {
		return nil, wrap(ctx, "claim: commit", err)
	}
	return l, nil
}

// begin opens a transaction at the store's isolation level.
func (s *Store) begin(ctx context.Context) (*gorm.DB, error) {
	var tx *gorm.DB
	if s.iso != sql.LevelDefault && s.dialect != sqlite {
		tx = s.db.WithContext(ctx).Begin(&sql.TxOptions{Isolation: s.iso})
	} else {
		tx = s.db.WithContext(ctx).Begin()
	}
	return tx, tx.Error
}

// leaseExpr is the locked_until of a new claim: now + lease in phased mode; none in
// atomic mode, where the open transaction is what holds the key.
func (s *Store) leaseExpr(c storage.Claim, now time.Time) any {
	if c.Mode != storage.ModePhased {
		return nil
	}
	q, args := s.plusSQL(now, c.Lease)
	return gorm.Expr(q, args...)
}

func (s *Store) reclaimSQL(c storage.Claim, token any, now time.Time) (string, []any) {
	nowSQL, nowArgs := s.nowSQL(now)
	leaseSQL, leaseArgs := "NULL", []any(nil)
	if c.Mode == storage.ModePhased {
		leaseSQL, leaseArgs = s.plusSQL(now, c.Lease)
	}
	args := []any{c.Fingerprint, c.Method, c.Path, string(storage.StateStarted), storage.RecoveryStarted}
	args = append(args, leaseArgs...)
	args = append(args, token)
	args = append(args, nowArgs...)
	args = append(args, c.Scope, c.Key)
	return "UPDATE " + s.quoted + " SET request_hash = ?, method = ?, path = ?, state = ?, recovery_point = ?, locked_until = " + leaseSQL +
		", lease_token = ?, response_code = NULL, response_headers = NULL, response_body = NULL, created_at = " + nowSQL +
		", completed_at = NULL WHERE scope = ? AND idem_key = ?", args
}

// takeoverSQL takes a started key whose lease has run out, if its fingerprint is the
// claim's: one statement, so of two claimers only one sees a row affected.
func (s *Store) takeoverSQL(c storage.Claim, token any, now time.Time) (string, []any) {
	nowSQL, nowArgs := s.nowSQL(now)
	leaseSQL, leaseArgs := "NULL", []any(nil)
	if c.Mode == storage.ModePhased {
		leaseSQL, leaseArgs = s.plusSQL(now, c.Lease)
	}
	args := append([]any{token}, leaseArgs...)
	args = append(args, c.Scope, c.Key, string(storage.StateStarted))
	args = append(args, nowArgs...)
	args = append(args, c.Fingerprint)
	return "UPDATE " + s.quoted + " SET lease_token = ?, locked_until = " + leaseSQL +
		" WHERE scope = ? AND idem_key = ? AND state = ? AND (locked_until IS NULL OR locked_until < " + nowSQL + ") AND request_hash = ?", args
}

// DeleteExpired implements storage.Store.DeleteExpired by primary key, oldest first, never
// touching a started key whose lease is live nor, on PostgreSQL and MySQL/MariaDB, a row
// another transaction holds (FOR UPDATE SKIP LOCKED; MySQL 8.0+/MariaDB 10.6+). The cut-off
// is the caller's time; lease liveness is judged by the database's clock.
func (s *Store) DeleteExpired(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	nowSQL, nowArgs := s.nowSQL(s.clock())
	where := "created_at < ? AND (state = ? OR locked_until IS NULL OR locked_until < " + nowSQL + ")"
	whereArgs := append([]any{s.timeArg(before), string(storage.StateCompleted)}, nowArgs...)
	pick := "SELECT scope, idem_key FROM " + s.quoted + " WHERE " + where + " ORDER BY created_at LIMIT ?"

	if s.dialect != mariadb {
		// One statement: MySQL cannot take a LIMIT in an IN subquery on the table it deletes
		// from, the others can.
		if s.dialect == postgres {
			pick += " FOR UPDATE SKIP LOCKED"
		}
		res := s.db.WithContext(ctx).Exec("DELETE FROM "+s.quoted+" WHERE (scope, idem_key) IN ("+pick+")", append(whereArgs, limit)...)
		if res.Error != nil {
			return 0, wrap(ctx, "delete expired", res.Error)
		}
		return int(res.RowsAffected), nil
	}

	// MySQL/MariaDB: lock a batch, then delete it, at READ COMMITTED so that no gap lock
	// holds up a concurrent claim.
	var n int64
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		rows, err := tx.Raw(pick+" FOR UPDATE SKIP LOCKED", append(whereArgs, limit)...).Rows()
		if err != nil {
			return err
		}
		var keys [][]any
		for rows.Next() {
			var scope, key []byte
			if err := rows.Scan(&scope, &key); err != nil {
				rows.Close()
				return err
			}
			keys = append(keys, []any{scope, key})
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if len(keys) == 0 {
			return nil
		}
		res := tx.Exec("DELETE FROM "+s.quoted+" WHERE (scope, idem_key) IN ? AND "+where, append([]any{keys}, whereArgs...)...)
		n = res.RowsAffected
		return res.Error
	}, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, wrap(ctx, "delete expired", err)
	}
	return int(n), nil
}

// row is a key as read from the table, with the database's clock at the time.
type row struct {
	scope, key                 string
	hash                       []byte
	method, path, state, point string
	lockedUntil                time.Time
	code                       sql.NullInt64
	headers, body              []byte
	createdAt, completedAt     time.Time
	now                        time.Time
}

const rowColumns = "scope, idem_key, request_hash, method, path, state, recovery_point, locked_until, " +
	"response_code, response_headers, response_body, created_at, completed_at"

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
	wall := s.dialect != postgres
	var r row
	if err := rows.Scan(&r.scope, &r.key, &r.hash, &r.method, &r.path, &r.state, &r.point,
		timeScanner{&r.lockedUntil, wall}, &r.code, &r.headers, &r.body,
		timeScanner{&r.createdAt, wall}, timeScanner{&r.completedAt, wall}, timeScanner{&r.now, wall}); err != nil {
		return nil, err
	}
	return &r, rows.Close()
}

// verdict is what a claim does with an existing row.
type verdict int

const (
	reportIt    verdict = iota // return the record
	claimAfresh                // past retention with no live lease: as if absent
	takeOver                   // started, lease over, same fingerprint
)

func (s *Store) judge(r *row, c storage.Claim) verdict {
	live := r.state == string(storage.StateStarted) && r.lockedUntil.After(r.now)
	switch {
	case c.Retention > 0 && r.createdAt.Before(r.now.Add(-c.Retention)) && !live:
		return claimAfresh
	case r.state != string(storage.StateStarted), live, !bytes.Equal(r.hash, c.Fingerprint):
		return reportIt
	}
	return takeOver
}

// record is the row as the engine sees it.
func (r *row) record() (*storage.Record, error) {
	rec := &storage.Record{
		Scope: r.scope, Key: r.key, Fingerprint: r.hash, Method: r.method, Path: r.path,
		State: storage.State(r.state), RecoveryPoint: r.point, LockedUntil: r.lockedUntil,
		CreatedAt: r.createdAt, CompletedAt: r.completedAt,
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

// newToken mints a fencing token: 16 random bytes, as a version 4 UUID in its text form
// on PostgreSQL (a uuid column), as bytes elsewhere.
func (s *Store) newToken() any {
	var b [16]byte
	_, _ = rand.Read(b[:])
	if s.dialect != postgres {
		return b[:]
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// claimLocked is the start of an atomic claim on PostgreSQL that writes nothing: when no
// row holds the key it takes the key's transaction-scoped advisory lock without waiting
// and, holding it, looks the key up with a snapshot taken after the lock was granted, so
// it sees whatever a twin committed. No row: the lock is returned (done) and Complete
// inserts the completed row, the request's one write to the key table. A twin holding
// the lock: the claim waits for it (lock_timeout, then storage.ErrInProgress), rolls back
// and starts again (errRetry), when the twin's record is visible. A row holding the key
// (done false, no error): the caller goes on in tx, where the row's lock serialises
// racing claimers as before.
//
// The primary key stays the final arbiter: where the lock does not serialise (an engine
// that accepts the call and does not lock, a snapshot at REPEATABLE READ taken just
// before a twin committed), Complete's INSERT fails on the twin's row and the whole
// transaction rolls back (storage.ErrTransient).
func (s *Store) claimLocked(ctx context.Context, tx *gorm.DB, c storage.Claim, wait time.Duration) (_ *lock, done bool, err error) {
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	hash := s.lockHash(c.Scope, c.Key)
	var locked sql.NullBool
	if err := scanOne(tx.WithContext(ctx).Raw(s.tryLockSQL, c.Scope, c.Key, hash), &locked); err != nil {
		return nil, false, wrap(ctx, "claim: lock", err)
	}
	switch {
	case !locked.Valid:
		return nil, false, nil
	case !locked.Bool:
		// A twin holds the lock: wait for it, then start again with a snapshot that sees
		// its outcome.
		if _, err := s.setLockWait(ctx, tx, wait); err != nil {
			return nil, true, wrap(ctx, "claim: lock wait", err)
		}
		if err := tx.WithContext(ctx).Exec("SELECT pg_advisory_xact_lock(?)", hash).Error; err != nil {
			return nil, true, wrap(ctx, "claim: wait for a twin", err)
		}
		return nil, true, errRetry
	}
	r, err := s.read(ctx, tx, c.Scope, c.Key, false, time.Time{})
	switch {
	case err != nil:
		return nil, true, wrap(ctx, "claim: select", err)
	case r != nil: // committed just before the lock was granted: read it again, locked
		return nil, true, errRetry
	}
	l := &lock{
		s: s, mode: c.Mode, scope: c.Scope, key: c.Key, lease: c.Lease, timeout: c.Timeout,
		initial: storage.RecoveryStarted, point: storage.RecoveryStarted,
		pending: true, fingerprint: c.Fingerprint, method: c.Method, path: c.Path,
		tx: tx, held: &holder{tx: tx, base: s.db},
	}
	return l, true, nil
}

// lockHash is the advisory lock key of (scope, key) in the store's table: 64 bits of
// FNV-1a over the table name, the scope and the key, each preceded by its length. Every
// instance computes the same number, as pgxstore does for the same table name. Two keys
// can share a hash: they then wait for each other needlessly, about as likely as n²/2⁶⁵
// for n keys in flight at once; the primary key, not the lock, decides what is recorded.
func (s *Store) lockHash(scope, key string) int64 {
	h := fnvString(fnvString(fnvString(fnvOffset, s.quoted), scope), key)
	return int64(h)
}

// FNV-1a, 64 bits.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// fnvString folds len(v) and v into the FNV-1a state h.
func fnvString(h uint64, v string) uint64 {
	for n := uint64(len(v)); ; n >>= 8 {
		h = (h ^ n&0xff) * fnvPrime
		if n < 0x100 {
			break
		}
	}
	for i := 0; i < len(v); i++ {
		h = (h ^ uint64(v[i])) * fnvPrime
	}
	return h
}
