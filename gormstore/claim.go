package gormstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/keyrow"
)

// claimAttempts bounds how often Claim retries a claim that lost a race it cannot lose
// for good: a deadlock or serialization failure (nothing of the caller's ran yet), or a
// row that vanished between two statements.
const claimAttempts = 3

// errRetry makes Claim start over.
var errRetry = errors.New("gormstore: claim raced, retrying")

// Claim implements storage.Store.Claim. In phased mode (and in atomic mode with
// WithLookupFirst) the key is read first, without a transaction or a lock, and a record
// the claim would only report (completed, live lease, other fingerprint) is returned from
// that one statement. Anything else runs in a transaction:
//
//   - PostgreSQL, atomic mode at READ COMMITTED (unless WithClaimRowFirst): the claim
//     writes nothing. One statement reads the key's row and, when none holds the key,
//     takes the key's transaction-scoped advisory lock (a twin in flight holds it: the
//     statement waits, bounded by lock_timeout); holding the lock, a lookup looks again;
//     Complete inserts the completed row before COMMIT (claimLocked). A row that holds
//     the key is reported from that read, or replaced or taken over as below.
//   - PostgreSQL otherwise: INSERT … ON CONFLICT DO NOTHING, the transaction's first
//     write, then SELECT … FOR UPDATE on conflict, waits bounded by lock_timeout
//     (55P03/57014 → storage.ErrInProgress; 40001/40P01 → storage.ErrTransient).
//   - MySQL/MariaDB: INSERT … ON DUPLICATE KEY UPDATE (an exclusive lock on a duplicate,
//     where a plain INSERT's shared lock lets twins deadlock), SELECT … FOR UPDATE,
//     innodb_lock_wait_timeout (1205 → ErrInProgress; 1213 → ErrTransient).
//   - SQLite: no row locks; the INSERT, first statement of the transaction, takes the
//     database's write lock, waiting up to busy_timeout (SQLITE_BUSY → ErrInProgress).
//     Writers are serialized: in atomic mode a request holds the write lock until it
//     completes, so any other claim waits for it, up to its lock wait.
//
// In atomic mode the returned lock's transaction outlives ctx, whose deadline bounds the
// claim only (see claimBounded): it ends with Complete or Release. On PostgreSQL lock_timeout stays c.LockWait for
// the rest of that transaction, so a handler's statement that waits for a row lock fails
// after it (55P03); on MySQL/MariaDB and SQLite the connection's own setting is back
// before the handler runs.
func (s *Store) Claim(ctx context.Context, c storage.Claim) (storage.Claimed, error) {
	switch c.Mode {
	case storage.ModeAtomic, storage.ModePhased:
	default:
		return storage.Claimed{}, fmt.Errorf("gormstore: claim in mode %v: %w", c.Mode, storage.ErrUnsupportedMode)
	}
	if s.dialect == mariadb && (len(c.Scope) > maxKeyBytes || len(c.Key) > maxKeyBytes) {
		return storage.Claimed{}, fmt.Errorf("gormstore: claim: scope and key are limited to %d bytes each on MySQL/MariaDB (got %d and %d)",
			maxKeyBytes, len(c.Scope), len(c.Key))
	}
	if c.Fingerprint == nil {
		c.Fingerprint = []byte{}
	}
	if c.Mode == storage.ModePhased || s.lookupFirst {
		r, err := s.read(ctx, s.db, c.Scope, c.Key, false, s.clock())
		if err != nil {
			return storage.Claimed{}, wrap(ctx, "claim: lookup", err)
		}
		if r != nil {
			if v := r.verdict(c); !v.Claims() {
				return reported(r, v)
			}
		}
	}

	for attempt := 1; ; attempt++ {
		claimed, err := s.claimBounded(ctx, c)
		if err == nil || attempt == claimAttempts || ctx.Err() != nil ||
			!(errors.Is(err, errRetry) || errors.Is(err, storage.ErrTransient)) {
			if errors.Is(err, errRetry) {
				err = fmt.Errorf("%w: %w", storage.ErrTransient, err)
			}
			return claimed, err
		}
	}
}

// reported is the Claimed of a row that holds the key, on which Decide gave v.
func reported(r *row, v storage.Verdict) (storage.Claimed, error) {
	rec, err := r.record()
	if err != nil {
		return storage.Claimed{}, err
	}
	return storage.Claimed{Verdict: v, Record: rec}, nil
}

// claimedBy is the Claimed of a lock hold returned, with hold's error.
func claimedBy(l *lock, err error) (storage.Claimed, error) {
	if err != nil {
		return storage.Claimed{}, err
	}
	if l.takenOver {
		return storage.Claimed{Verdict: storage.VerdictTakeOver, Lock: l}, nil
	}
	return storage.Claimed{Verdict: storage.VerdictAbsent, Lock: l}, nil
}

// claimBounded is claimTx with its transaction begun under a context of its own.
// database/sql ties a transaction to the context it began with (it rolls back when that
// ends), and an atomic lock's transaction must outlive the claim's deadline (the handler
// uses it): so the transaction's context is cut loose from ctx, and ctx's deadline (the
// engine's) is carried over to it by hand only while the claim runs, so that a paused
// database cannot hold BEGIN or the claim's statements past it. An atomic lock ends that
// context when it completes or is released.
func (s *Store) claimBounded(ctx context.Context, c storage.Claim) (storage.Claimed, error) {
	tctx, cancelTx := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancelTx)
	claimed, err := s.claimTx(tctx, ctx, c)
	stopped := stop()
	held, atomic := claimed.Lock.(*lock)
	if err != nil || !atomic || held == nil || held.tx == nil {
		cancelTx() // no open transaction is handed on
		return claimed, err
	}
	if !stopped { // the deadline passed as the claim returned: its transaction is rolled back
		cancelTx()
		return storage.Claimed{}, wrap(ctx, "claim", context.Cause(ctx))
	}
	held.cancelTx = cancelTx
	return claimed, err
}

// claimTx is one attempt at a claim, in a transaction of its own.
func (s *Store) claimTx(txCtx, ctx context.Context, c storage.Claim) (_ storage.Claimed, err error) {
	tx, err := s.begin(txCtx)
	if err != nil {
		return storage.Claimed{}, wrap(ctx, "claim: begin", err)
	}
	restore := noRestore
	if s.singleWrite(c) {
		claimed, done, err := s.claimLocked(ctx, tx, c)
		if done || err != nil {
			return claimed, err
		}
		// A row holds the key, or the transaction is not at READ COMMITTED: the claim
		// below writes or locks the row in this transaction, under the lock wait the claim
		// statement set for the transaction.
	} else if restore, err = s.setLockWait(ctx, tx, c.LockWait); err != nil {
		tx.Rollback()
		return storage.Claimed{}, wrap(ctx, "claim: lock wait", err)
	}
	claimed := false
	defer func() {
		if claimed {
			return
		}
		_ = restore()
		tx.Rollback()
	}()

	now := s.clock()
	token := s.newToken()
	nowSQL, nowArgs := s.nowSQL(now)
	leaseSQL, leaseArgs := s.leaseSQL(c, now)
	values := map[string]any{
		"scope":          c.Scope,
		"idem_key":       c.Key,
		"request_hash":   c.Fingerprint,
		"method":         c.Method,
		"path":           c.Path,
		"state":          string(storage.StateStarted),
		"recovery_point": storage.RecoveryStarted,
		"locked_until":   gorm.Expr(leaseSQL, leaseArgs...),
		"lease_token":    token,
		"created_at":     gorm.Expr(nowSQL, nowArgs...),
		"request":        storage.EncodeRequest(c.Request),
	}
	res := tx.WithContext(ctx).Model(&keyRow{}).Table(s.table).Clauses(clause.OnConflict{DoNothing: true}).Create(values)
	if res.Error != nil {
		return storage.Claimed{}, wrap(ctx, "claim: insert", res.Error)
	}
	point, takenOver := storage.RecoveryStarted, false
	if res.RowsAffected != 1 {
		r, err := s.read(ctx, tx, c.Scope, c.Key, true, now)
		switch {
		case err != nil:
			return storage.Claimed{}, wrap(ctx, "claim: select", err)
		case r == nil: // deleted since the insert saw it
			return storage.Claimed{}, errRetry
		}
		switch v := r.verdict(c); {
		case !v.Claims():
			return reported(r, v)
		case v == storage.VerdictAbsent:
			q, args := s.reclaimSQL(c, token, now)
			if res := tx.WithContext(ctx).Exec(q, args...); res.Error != nil {
				return storage.Claimed{}, wrap(ctx, "claim: reclaim", res.Error)
			}
		default: // storage.VerdictTakeOver
			q, args := s.takeoverSQL(c, token, now)
			res := tx.WithContext(ctx).Exec(q, args...)
			switch {
			case res.Error != nil:
				return storage.Claimed{}, wrap(ctx, "claim: take over", res.Error)
			case res.RowsAffected != 1:
				return storage.Claimed{}, errRetry
			}
			point, takenOver = r.point, true
		}
	}
	l, err := s.hold(ctx, tx, restore, c, token, point, takenOver)
	claimed = err == nil
	return claimedBy(l, err)
}

// hold turns the claim's transaction into a lock: atomic, it stays open for the handler;
// phased, it commits. Either way restore first puts back the connection's own lock wait
// where the setting outlives the transaction (MySQL/MariaDB, SQLite); on PostgreSQL the
// lock wait is the transaction's, so an atomic handler's statements run under it too.
func (s *Store) hold(ctx context.Context, tx *gorm.DB, restore func() error, c storage.Claim, token any, point string, takenOver bool) (*lock, error) {
	l := &lock{
		s: s, mode: c.Mode, scope: c.Scope, key: c.Key, token: token, lease: c.Lease,
		initial: point, point: point, progress: point != storage.RecoveryStarted, takenOver: takenOver,
	}
	if err := restore(); err != nil {
		return nil, wrap(ctx, "claim: restore lock wait", err)
	}
	if c.Mode == storage.ModeAtomic {
		l.tx = s.guard(tx) // the handler's from here on
		l.held = &holder{tx: l.tx, base: s.db}
		return l, nil
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

// leaseSQL is the locked_until of a claim: now + lease in phased mode; none in atomic
// mode, where the open transaction is what holds the key.
func (s *Store) leaseSQL(c storage.Claim, now time.Time) (string, []any) {
	if c.Mode != storage.ModePhased {
		return "NULL", nil
	}
	return s.plusSQL(now, c.Lease)
}

func (s *Store) reclaimSQL(c storage.Claim, token any, now time.Time) (string, []any) {
	nowSQL, nowArgs := s.nowSQL(now)
	leaseSQL, leaseArgs := s.leaseSQL(c, now)
	args := []any{c.Fingerprint, c.Method, c.Path, string(storage.StateStarted), storage.RecoveryStarted}
	args = append(args, leaseArgs...)
	args = append(args, token)
	args = append(args, nowArgs...)
	args = append(args, storage.EncodeRequest(c.Request), c.Scope, c.Key)
	return "UPDATE " + s.quoted + " SET request_hash = ?, method = ?, path = ?, state = ?, recovery_point = ?, locked_until = " + leaseSQL +
		", lease_token = ?, response_code = NULL, response_headers = NULL, response_body = NULL, created_at = " + nowSQL +
		", completed_at = NULL, request = ?, completer_attempts = 0, next_attempt = NULL, released_at = NULL WHERE scope = ? AND idem_key = ?", args
}

// takeoverSQL takes a started key whose lease has run out (no later than now, as
// storage.Decide reads a lease), if its fingerprint is the claim's: one statement, so of
// two claimers only one sees a row affected.
func (s *Store) takeoverSQL(c storage.Claim, token any, now time.Time) (string, []any) {
	nowSQL, nowArgs := s.nowSQL(now)
	leaseSQL, leaseArgs := s.leaseSQL(c, now)
	args := append([]any{token}, leaseArgs...)
	args = append(args, c.Scope, c.Key, string(storage.StateStarted))
	args = append(args, nowArgs...)
	args = append(args, c.Fingerprint)
	return "UPDATE " + s.quoted + " SET lease_token = ?, locked_until = " + leaseSQL +
		" WHERE scope = ? AND idem_key = ? AND state = ? AND (locked_until IS NULL OR locked_until <= " + nowSQL + ") AND request_hash = ?", args
}

// verdict is storage.Decide's verdict on r, read at r.now, for claim c.
func (r *row) verdict(c storage.Claim) storage.Verdict {
	held := storage.Record{State: storage.State(r.state), Fingerprint: r.hash, LockedUntil: r.lockedUntil, CreatedAt: r.createdAt}
	return storage.Decide(&held, c, r.now)
}

// newToken mints a fencing token (keyrow.Token): in its UUID text form on PostgreSQL (a
// uuid column), as 16 bytes elsewhere.
func (s *Store) newToken() any {
	t := keyrow.NewToken()
	if s.dialect != postgres {
		return t[:]
	}
	return t.UUID()
}

// singleWrite reports whether claim c starts with claimLocked: an atomic claim on
// PostgreSQL, unless WithClaimRowFirst or WithIsolation names a level above READ COMMITTED
// (at the server's default level, claimLocked checks the transaction's level itself).
func (s *Store) singleWrite(c storage.Claim) bool {
	return s.dialect == postgres && c.Mode == storage.ModeAtomic && !s.rowFirst &&
		(s.iso == sql.LevelDefault || s.iso == sql.LevelReadCommitted)
}

// claimSQL is the one statement of claimLocked. It first sets lock_timeout to the given
// lock wait in milliseconds for the transaction (set_config(…, true), that is SET LOCAL,
// whatever the rest finds), so the handler's own statements run under it too, as in
// pgxstore; a handler that needs longer sets lock_timeout again. It returns no row when
// no row holds the key and the key's transaction-scoped advisory lock was free: it is now
// this transaction's (pg_try_advisory_xact_lock), the first request's usual case, which
// then costs no columns to decode. Otherwise it returns one row: found, the key's row if
// one holds it, the database's clock, and locked:
//
//   - found, locked NULL: a row holds the key; the lock was not touched;
//   - not found, locked NULL: the transaction is not at READ COMMITTED (the first
//     argument true skips that check: WithIsolation named the level); not touched either;
//   - not found, locked false: a twin held the lock; the statement waited for it, bounded
//     by that lock_timeout, and it is now this transaction's. A wait that runs out fails
//     the statement (55P03).
//
// lock_timeout is set in the one-row subquery the key's row is joined to, which OFFSET 0
// keeps from being pulled up: it is evaluated once, before the WHERE clause. CASE
// evaluates its branches in order and only those it needs, so the lock is asked for only
// when no row holds the key, and waited for only when a twin holds it.
func claimSQL(quoted string) string {
	return "SELECT k.scope IS NOT NULL, k.request_hash, COALESCE(k.method, ''), COALESCE(k.path, ''), " +
		"COALESCE(k.state, ''), COALESCE(k.recovery_point, ''), k.locked_until, k.response_code, k.response_headers, " +
		"k.response_body, k.created_at, k.completed_at, statement_timestamp(), " +
		"CASE WHEN k.scope IS NOT NULL OR NOT (CAST(? AS boolean) OR current_setting('transaction_isolation') = 'read committed') THEN NULL ELSE false END " +
		"FROM (SELECT set_config('lock_timeout', CAST(? AS bigint) || 'ms', true) OFFSET 0) one LEFT JOIN " + quoted + " k ON k.scope = ? AND k.idem_key = ? " +
		"WHERE CASE WHEN k.scope IS NOT NULL OR NOT (CAST(? AS boolean) OR current_setting('transaction_isolation') = 'read committed') THEN true " +
		"WHEN pg_try_advisory_xact_lock(?) THEN false " +
		"WHEN CAST(pg_advisory_xact_lock(?) AS text) IS NULL THEN true " +
		"ELSE true END"
}

// claimLocked is the start of an atomic claim on PostgreSQL that writes nothing, in one
// statement (claimSQL): a row that holds the key is read without a lock, and the key's
// transaction-scoped advisory lock is taken only when none does, waiting for a twin that
// holds it (lock_timeout, then storage.ErrInProgress). That statement's snapshot predates
// the lock, so it cannot see what the lock's last holder committed: once the lock is this
// transaction's, a plain read with a new snapshot looks again. No row: the lock is
// returned (done) and Complete inserts the completed row, the request's one write to the
// key table. A row the claim would only report (completed, a live lease, another
// request's fingerprint), seen by either read, is reported at once (rec, done): a replay
// writes nothing and takes no lock. Any other row (done false, no error): the caller goes
// on in tx, where the row's lock serialises racing claimers as before. So does a
// transaction that is not at READ COMMITTED (the server's default level, when
// WithIsolation names none, may be another): its snapshot, taken before the lock is
// granted, could not see a twin that committed in between.
//
// The primary key stays the final arbiter: where the lock does not serialise (an engine
// that accepts the call and does not lock, a snapshot at REPEATABLE READ taken just
// before a twin committed), Complete's INSERT fails on the twin's row and the whole
// transaction rolls back (storage.ErrTransient).
func (s *Store) claimLocked(ctx context.Context, tx *gorm.DB, c storage.Claim) (claimed storage.Claimed, done bool, err error) {
	defer func() {
		if err != nil || claimed.Record != nil {
			tx.Rollback()
		}
	}()
	// tx runs under the claim's own context, which claimBounded ends with ctx: no
	// WithContext (a GORM session) per statement.
	r, locked, err := s.claimRow(tx, c, s.lockHash(c.Scope, c.Key), waitMillis(c.LockWait))
	if err != nil {
		return storage.Claimed{}, true, wrap(ctx, "claim", err)
	}
	if r == nil && locked {
		// The lock is this transaction's: look again, with a snapshot that sees whatever
		// its last holder committed (one column to decode; the row only if there is one).
		var exists bool
		if err := tx.Raw(s.existsSQL, c.Scope, c.Key).Row().Scan(&exists); err != nil {
			return storage.Claimed{}, true, wrap(ctx, "claim: select", err)
		}
		if exists {
			if r, err = s.read(ctx, tx, c.Scope, c.Key, false, s.clock()); err != nil {
				return storage.Claimed{}, true, wrap(ctx, "claim: select", err)
			}
		}
	}
	if r != nil {
		if v := r.verdict(c); !v.Claims() {
			claimed, err = reported(r, v)
			return claimed, true, err
		}
	}
	if r != nil || !locked {
		return storage.Claimed{}, false, nil
	}
	l := &lock{
		s: s, mode: c.Mode, scope: c.Scope, key: c.Key, lease: c.Lease,
		initial: storage.RecoveryStarted, point: storage.RecoveryStarted,
		pending: true, fingerprint: c.Fingerprint, method: c.Method, path: c.Path, tx: tx,
	}
	l.held = &holder{tx: tx, base: s.db}
	return storage.Claimed{Verdict: storage.VerdictAbsent, Lock: l}, true, nil
}

// claimRow runs claimSQL: the row that holds the key (nil if none) and whether the key's
// advisory lock is now this transaction's.
func (s *Store) claimRow(db *gorm.DB, c storage.Claim, hash, lockTimeoutMS int64) (*row, bool, error) {
	rc := s.iso == sql.LevelReadCommitted
	rows, err := db.Raw(s.claimSQL, rc, lockTimeoutMS, c.Scope, c.Key, rc, hash, hash).Rows()
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	if !rows.Next() {
		return nil, true, rows.Err() // the lock was free
	}
	var (
		found  bool
		locked sql.NullBool
	)
	r := row{scope: c.Scope, key: c.Key}
	if err := rows.Scan(&found, &r.hash, &r.method, &r.path, &r.state, &r.point,
		keyrow.TimeScanner{Dest: &r.lockedUntil}, &r.code, &r.headers, &r.body,
		keyrow.TimeScanner{Dest: &r.createdAt}, keyrow.TimeScanner{Dest: &r.completedAt}, keyrow.TimeScanner{Dest: &r.now}, &locked); err != nil {
		return nil, false, err
	}
	if err := rows.Close(); err != nil {
		return nil, false, err
	}
	if !found {
		return nil, locked.Valid, nil
	}
	return &r, false, nil
}

// lockHash is the advisory lock key of (scope, key) in the store's table: keyrow's hash
// of the quoted table name, the scope and the key, the number pgxstore locks for the same
// table. Two keys can share a hash: they then wait for each other needlessly; the primary
// key, not the lock, decides what is recorded.
func (s *Store) lockHash(scope, key string) int64 { return s.lockSeed.Hash(scope, key) }
