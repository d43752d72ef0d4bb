package pgxstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/keyrow"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// claimRow is one row of the claim (or lookup) statement: either the key this statement
// inserted (claimed) or the row that holds it, with the database's clock.
type claimRow struct {
	claimed bool
	hash    []byte
	// The nullable columns scan into pgtype values: a pgx scan into a pointer to a
	// pointer allocates a plan for every row.
	method      pgtype.Text
	path        pgtype.Text
	state       pgtype.Text
	point       pgtype.Text
	lockedUntil pgtype.Timestamptz
	code        pgtype.Int4
	headers     []byte
	body        []byte
	createdAt   time.Time
	completedAt pgtype.Timestamptz
	now         pgtype.Timestamptz // the statement's now(): leases and retention are measured on it
	// pending: no row holds the key and none was written; the claim holds the key's
	// advisory lock and Complete inserts the row (not scanned).
	pending bool
	// locked is the try-lock's answer (NULL: a row held the key, so no lock was tried).
	locked pgtype.Bool
}

// dest returns the scan destinations of a claim or lookup row.
func (r *claimRow) dest() []any {
	return []any{&r.claimed, &r.hash, &r.method, &r.path, &r.state, &r.point, &r.lockedUntil, &r.code,
		&r.headers, &r.body, &r.createdAt, &r.completedAt, &r.now}
}

// lockDest returns the scan destinations of the try-lock row: its lock_timeout is
// skipped, its lock result goes to r.locked.
func (r *claimRow) lockDest() []any { return []any{nil, &r.locked} }

// verdict is storage.Decide's verdict on the row that holds the key (not one this claim
// inserted), at the database's clock.
func (r *claimRow) verdict(c storage.Claim) storage.Verdict {
	held := storage.Record{State: storage.State(r.state.String), Fingerprint: r.hash,
		LockedUntil: r.lockedUntil.Time, CreatedAt: r.createdAt}
	return storage.Decide(&held, c, r.now.Time)
}

// record builds the Record the engine answers from.
func (r *claimRow) record(scope, key string) (*storage.Record, error) {
	rec := &storage.Record{
		Scope:         scope,
		Key:           key,
		Fingerprint:   r.hash,
		Method:        r.method.String,
		Path:          r.path.String,
		State:         storage.State(r.state.String),
		RecoveryPoint: r.point.String,
		CreatedAt:     r.createdAt,
	}
	if r.lockedUntil.Valid && rec.State == storage.StateStarted {
		rec.LockedUntil = r.lockedUntil.Time
	}
	if r.completedAt.Valid {
		rec.CompletedAt = r.completedAt.Time
	}
	if rec.State == storage.StateCompleted {
		h, err := storage.DecodeHeader(r.headers)
		if err != nil {
			return nil, fmt.Errorf("pgxstore: key %q: %w", key, err)
		}
		rec.Response = &storage.Response{Status: int(r.code.Int32), Header: h, Body: r.body}
	}
	return rec, nil
}

// reported is the Claimed of a record row given verdict v.
func reported(row *claimRow, c storage.Claim, v storage.Verdict) (storage.Claimed, error) {
	rec, err := row.record(c.Scope, c.Key)
	if err != nil {
		return storage.Claimed{}, err
	}
	return storage.Claimed{Verdict: v, Record: rec}, nil
}

// claimedBy is the Claimed of a lock a claim got, fresh or taken over.
func claimedBy(l storage.Lock, takenOver bool) storage.Claimed {
	if takenOver {
		return storage.Claimed{Verdict: storage.VerdictTakeOver, Lock: l}
	}
	return storage.Claimed{Verdict: storage.VerdictAbsent, Lock: l}
}

// result is what settle decided: a claim (fresh or taken over) or a record.
type result struct {
	rec       *storage.Record
	verdict   storage.Verdict // of rec
	point     string
	takenOver bool
	pending   bool // claimed without a write: Complete inserts the key row
}

// reader reads the key again after a lost race: claims it if absent, or returns the row
// holding it (found false: neither, the row changed under the statement).
type reader func(row *claimRow) (found bool, err error)

// settle turns the first row of a claim into a result, running the replace or takeover
// statement (in tx, or on their own when tx is nil) and reading the key again until it
// holds still. Every write is conditional, so of several racers exactly one wins.
func (s *Store) settle(ctx context.Context, tx pgx.Tx, c storage.Claim, tok keyrow.Token, read reader, row *claimRow, found bool) (result, error) {
	for range maxSettle {
		// A row not found is one the INSERT met but its snapshot does not show: a twin
		// that committed while this claim waited (READ COMMITTED), or a key deleted
		// meanwhile. It is read again, as is a row a conditional write lost to a racer.
		if found && row.claimed {
			return result{point: storage.RecoveryStarted, pending: row.pending}, nil
		}
		if found {
			var err error
			switch v := row.verdict(c); v {
			case storage.VerdictAbsent:
				var created time.Time
				err = s.scan(ctx, tx, c.LockWait, s.q.replace,
					[]any{c.Scope, c.Key, c.Fingerprint, c.Method, c.Path, tok, c.Lease.Microseconds(), c.Retention.Microseconds(), storage.EncodeRequest(c.Request)},
					&created)
				if err == nil {
					return result{point: storage.RecoveryStarted}, nil
				}
			case storage.VerdictTakeOver:
				var point string
				err = s.scan(ctx, tx, c.LockWait, s.q.takeover,
					[]any{c.Scope, c.Key, c.Fingerprint, tok, c.Lease.Microseconds(), c.Retention.Microseconds()},
					&point)
				if err == nil {
					return result{point: point, takenOver: true}, nil
				}
			default:
				rec, err := row.record(c.Scope, c.Key)
				return result{rec: rec, verdict: v}, err
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return result{}, err
			}
		}
		*row = claimRow{}
		var err error
		if found, err = read(row); err != nil {
			return result{}, err
		}
	}
	return result{}, fmt.Errorf("pgxstore: key %q kept changing under the claim: %w", c.Key, storage.ErrTransient)
}

// scanRow runs a one-row query into row; no row is found false, not an error.
func (s *Store) scanRow(ctx context.Context, tx pgx.Tx, wait time.Duration, sql string, args []any, row *claimRow) (bool, error) {
	return scanned(s.scan(ctx, tx, wait, sql, args, row.dest()...))
}

// claimPhased claims with statements that each commit on their own: a fresh key or a
// replay is one statement.
func (s *Store) claimPhased(ctx context.Context, c storage.Claim) (storage.Claimed, error) {
	tok := keyrow.NewToken()
	args := append(claimArgs(c, tok, c.LockWait), storage.EncodeRequest(c.Request))
	read := func(row *claimRow) (bool, error) { return s.scanRow(ctx, nil, c.LockWait, s.q.claim, args, row) }
	var row claimRow
	found, err := read(&row)
	if err != nil {
		return storage.Claimed{}, classify(ctx, "claim", err, true)
	}
	res, err := s.settle(ctx, nil, c, tok, read, &row, found)
	if err != nil {
		return storage.Claimed{}, classify(ctx, "claim", err, true)
	}
	if res.rec != nil {
		return storage.Claimed{Verdict: res.verdict, Record: res.rec}, nil
	}
	l := &phasedLock{s: s, scope: c.Scope, key: c.Key, tok: tok, lease: c.Lease,
		point: res.point, takenOver: res.takenOver, progress: res.point != storage.RecoveryStarted}
	l.final = &slot{open: func(ctx context.Context) (pgx.Tx, error) { return s.begin(ctx, 0) }}
	return claimedBy(l, l.takenOver), nil
}

// claimAtomic claims in a transaction that the returned lock keeps open. A serialization
// failure (a twin committed after this transaction's snapshot, at REPEATABLE READ), or a
// wait for a twin at REPEATABLE READ, starts the claim again, within the lock wait: the
// new snapshot sees the twin's record.
func (s *Store) claimAtomic(ctx context.Context, c storage.Claim) (storage.Claimed, error) {
	if s.lookupFirst {
		var row claimRow
		found, err := s.scanRow(ctx, nil, c.LockWait, s.q.lookup, []any{c.Scope, c.Key}, &row)
		if err != nil {
			return storage.Claimed{}, classify(ctx, "look up", err, true)
		}
		if v := row.verdict(c); found && !v.Claims() {
			return reported(&row, c, v)
		}
	}
	deadline := time.Now().Add(c.LockWait)
	for attempt := 0; ; attempt++ {
		once := s.claimLocked
		if s.claimFirst {
			once = s.claimRowFirst
		}
		claimed, err := once(ctx, c, time.Until(deadline))
		if errors.Is(err, errWaited) {
			// The twin this claim waited for has ended: a statement of its own, with a
			// snapshot taken now, sees the record it committed, if any.
			var row claimRow
			found, lerr := s.scanRow(ctx, nil, time.Until(deadline), s.q.lookup, []any{c.Scope, c.Key}, &row)
			if lerr != nil {
				return storage.Claimed{}, classify(ctx, "claim: look up", lerr, true)
			}
			if v := row.verdict(c); found && !v.Claims() {
				return reported(&row, c, v)
			}
		}
		switch {
		case err == nil || !errors.Is(err, storage.ErrTransient) || attempt+1 >= maxRetries:
			return claimed, err
		case time.Until(deadline) <= 0:
			// The whole lock wait went by without a snapshot that sees the twin's outcome:
			// as far as this request can tell, the twin is still in flight.
			return storage.Claimed{}, fmt.Errorf("pgxstore: claim: lock wait of %s spent on serialization retries: %w (%w)", c.LockWait, storage.ErrInProgress, err)
		}
	}
}

// claimRowFirst is one atomic claim with WithClaimRowFirst, or at REPEATABLE READ or
// SERIALIZABLE: the started key row is the transaction's first write (a twin waits on it),
// updated to completed by Complete.
func (s *Store) claimRowFirst(ctx context.Context, c storage.Claim, wait time.Duration) (storage.Claimed, error) {
	tok := keyrow.NewToken()
	args := claimArgs(c, tok, wait)
	l := &atomicLock{s: s, scope: c.Scope, key: c.Key, tok: tok}
	var row claimRow
	br, err := l.begin(ctx, wait, &pgx.QueuedQuery{SQL: s.q.insert, Arguments: args})
	if err == nil {
		err = br.QueryRow().Scan(&row.claimed)
		if cerr := br.Close(); cerr != nil && (err == nil || errors.Is(err, pgx.ErrNoRows)) {
			err = cerr
		}
	}
	if errors.Is(err, pgx.ErrNoRows) {
		err = nil
	}
	// read claims the key, or reads the row holding it: a conflict makes the INSERT wait
	// for a twin in flight, and the lookup (a new snapshot at READ COMMITTED) sees what
	// the twin committed.
	read := func(row *claimRow) (bool, error) {
		if err := l.tx.QueryRow(ctx, s.q.insert, args...).Scan(&row.claimed); err == nil {
			return true, nil
		} else if !errors.Is(err, pgx.ErrNoRows) {
			return false, err
		}
		return s.scanRow(ctx, l.tx, wait, s.q.lookup, []any{c.Scope, c.Key}, row)
	}
	found := row.claimed
	if err == nil && !found {
		found, err = s.scanRow(ctx, l.tx, wait, s.q.lookup, []any{c.Scope, c.Key}, &row)
	}
	if err != nil {
		l.abort(ctx)
		return storage.Claimed{}, classify(ctx, "claim", err, true)
	}
	return l.settle(ctx, c, read, &row, found)
}

// settle ends an atomic claim on the lock's transaction with Store.settle's decision on
// row: a replay or an error rolls the transaction back; otherwise the lock holds the key.
func (l *atomicLock) settle(ctx context.Context, c storage.Claim, read reader, row *claimRow, found bool) (storage.Claimed, error) {
	res, err := l.s.settle(ctx, l.tx, c, l.tok, read, row, found)
	if err != nil {
		l.abort(ctx)
		return storage.Claimed{}, classify(ctx, "claim", err, true)
	}
	if res.rec != nil {
		l.abort(ctx)
		return storage.Claimed{Verdict: res.verdict, Record: res.rec}, nil
	}
	l.point, l.takenOver, l.pending = res.point, res.takenOver, res.pending
	l.slot.inner = l.tx
	return claimedBy(l, l.takenOver), nil
}

// begin opens the lock's transaction and sends qs in it: on a pool's connection BEGIN
// goes in the same round trip. The results start at qs[0]; an error is BEGIN's. On an
// error the caller aborts the lock.
func (l *atomicLock) begin(ctx context.Context, wait time.Duration, qs ...*pgx.QueuedQuery) (pgx.BatchResults, error) {
	conn, fast, err := l.s.dedicated(ctx)
	if err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	if !fast {
		if l.tx, err = l.s.begin(ctx, wait); err != nil {
			return nil, err
		}
		b.QueuedQueries = qs
		return l.tx.SendBatch(ctx, b), nil
	}
	l.held = conn
	b.BeginTx(pgx.TxOptions{IsoLevel: l.s.iso})
	b.QueuedQueries = append(b.QueuedQueries, qs...)
	br := l.conn.SendBatch(ctx, b)
	l.tx = br.Tx()
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	return br, nil
}

// errWaited makes an atomic claim at REPEATABLE READ or SERIALIZABLE start again after
// waiting for a twin: its snapshot was taken before the twin committed.
var errWaited = fmt.Errorf("pgxstore: claim: waited for a twin: %w", storage.ErrTransient)

// claimLocked is one atomic claim that writes nothing: when no row holds the key it takes
// the key's transaction-scoped advisory lock (a twin in flight holds it, so it waits for
// the twin, up to the lock wait), and it looks the key up. No row: the key is claimed and Complete
// inserts the completed row, the request's one write to the key table. A row: replayed,
// or replaced or taken over as the conformance contract says (those write it at once, and
// Complete updates it).
//
// The first round trip carries BEGIN, the try-lock and the lookup. When the try-lock finds
// the lock taken, at READ COMMITTED the claim waits for it and looks again (that lookup's
// snapshot is taken once the lock is held, so it sees what the twin committed); at
// REPEATABLE READ the snapshot is already older than the twin's commit, so the claim waits
// for the lock, rolls back and starts again.
//
// The primary key stays the final arbiter: where the advisory lock does not serialise
// (an engine that accepts the call and does not lock, a snapshot taken just before a twin
// committed, a writer that does not take the lock), Complete's INSERT fails on the twin's
// row, the whole transaction rolls back and Complete returns storage.ErrTransient.
func (s *Store) claimLocked(ctx context.Context, c storage.Claim, wait time.Duration) (storage.Claimed, error) {
	l := &atomicLock{s: s, scope: c.Scope, key: c.Key,
		fingerprint: c.Fingerprint, method: c.Method, path: c.Path}
	ms, hash := strconv.FormatInt(max(wait.Milliseconds(), 1), 10), s.lockHash(c.Scope, c.Key)
	row := &claimRow{}
	var found bool
	br, err := l.begin(ctx, wait, &pgx.QueuedQuery{SQL: s.q.tryLock, Arguments: []any{ms, hash, c.Scope, c.Key}},
		&pgx.QueuedQuery{SQL: s.q.lookup, Arguments: []any{c.Scope, c.Key}})
	if err == nil {
		err = br.QueryRow().Scan(row.lockDest()...)
		if err == nil {
			found, err = scanned(br.QueryRow().Scan(row.dest()...))
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}
	locked := row.locked
	if err == nil && (locked.Valid && !locked.Bool || !locked.Valid && !found) {
		// A twin holds the key's lock (or, rarely, a key of the same hash), or the row
		// that held the key went away between the two statements.
		*row = claimRow{}
		if s.iso == pgx.ReadCommitted {
			b := &pgx.Batch{}
			b.Queue(s.q.lock, ms, hash)
			b.Queue(s.q.lookup, c.Scope, c.Key)
			br = l.tx.SendBatch(ctx, b)
			if _, err = br.Exec(); err == nil {
				found, err = scanned(br.QueryRow().Scan(row.dest()...))
			}
			if cerr := br.Close(); err == nil {
				err = cerr
			}
		} else if _, err = l.tx.Exec(ctx, s.q.lock, ms, hash); err == nil {
			err = errWaited
		}
	}
	if err != nil {
		l.abort(ctx)
		return storage.Claimed{}, classify(ctx, "claim", err, true)
	}
	if !found {
		l.pending, l.point = true, storage.RecoveryStarted
		l.slot.inner = l.tx
		return claimedBy(l, false), nil
	}
	// A row holds the key: report it, or replace or take it over in this transaction
	// (its row lock serialises racing claimers; the UPDATEs are conditional). A row that
	// vanishes meanwhile (the sweeper) leaves the key to this claim, to insert at
	// Complete.
	l.tok = keyrow.NewToken()
	read := func(row *claimRow) (bool, error) {
		found, err := s.scanRow(ctx, l.tx, wait, s.q.lookup, []any{c.Scope, c.Key}, row)
		if err == nil && !found {
			row.claimed, row.pending = true, true
		}
		return true, err
	}
	return l.settle(ctx, c, read, row, true)
}

// scanned turns the error of a one-row scan into found: no row is not an error.
func scanned(err error) (bool, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}
