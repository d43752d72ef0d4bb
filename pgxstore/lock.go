package pgxstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/keyrow"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// errEnded is returned by a lock used after Complete or Release.
var errEnded = errors.New("pgxstore: the lock has ended (completed or released)")

// completeArgs are the completion statement's arguments. r is encoded before it returns,
// so nothing of r is kept.
func completeArgs(scope, key string, tok keyrow.Token, r *storage.Response) []any {
	return []any{scope, key, tok, int32(r.Status), storage.EncodeHeader(r.Header), r.Body}
}

// atomicLock holds the claim's transaction: the handler writes in it, Complete records
// the response and commits, Release rolls back.
type atomicLock struct {
	s          *Store
	scope, key string
	tok        keyrow.Token // the row's token when the claim wrote it (replaced or taken over)
	// pending: the claim wrote no row (it holds the key's advisory lock); Complete inserts
	// the completed row from these. Otherwise Complete updates the row the claim wrote.
	pending      bool
	fingerprint  []byte
	method, path string
	point        string
	takenOver    bool
	tx           pgx.Tx // the claim's transaction
	// held is the connection tx runs on when the store has one to itself (a pool or a
	// *pgx.Conn): Complete then sends the completion and COMMIT in one round trip.
	held
	ended bool
	slot  slot // hands tx to the handler
}

var _ storage.Lock = (*atomicLock)(nil)

func (l *atomicLock) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, ctxKey{}, &l.slot)
}

func (l *atomicLock) RecoveryPoint() string { return l.point }

func (l *atomicLock) Resumed() bool { return l.takenOver }

// Phase runs fn in the claim's transaction, under a savepoint opened when fn first asks
// for the transaction: if fn fails, its writes are rolled back and the rest of the
// request's are kept. Everything commits with Complete.
func (l *atomicLock) Phase(ctx context.Context, point string, fn func(ctx context.Context) error) error {
	if l.ended {
		return errEnded
	}
	tx, err := runPhase(ctx, point, func(ctx context.Context) (pgx.Tx, error) { return l.tx.Begin(ctx) }, fn)
	if err != nil {
		return err
	}
	if tx != nil {
		if err := tx.Commit(ctx); err != nil {
			return classify(ctx, "phase "+point, err, false)
		}
	}
	l.point = point
	return nil
}

// runPhase runs fn with a transaction of its own, opened by open when fn first asks for
// it. If fn fails (or panics), that transaction rolls back and runPhase returns fn's
// error; otherwise it returns the transaction (nil if fn never asked) for the caller to
// commit.
func runPhase(ctx context.Context, point string, open func(ctx context.Context) (pgx.Tx, error), fn func(ctx context.Context) error) (pgx.Tx, error) {
	sp := &slot{open: open}
	returned := false
	defer func() { // fn panicked (or called runtime.Goexit): end its transaction, keep its connection out of limbo
		if !returned {
			if tx := sp.take(); tx != nil {
				_ = tx.Rollback(ctx)
			}
		}
	}()
	err := fn(context.WithValue(ctx, ctxKey{}, sp))
	returned = true
	tx := sp.take()
	if err != nil && tx != nil {
		if rerr := tx.Rollback(ctx); rerr != nil {
			return nil, errors.Join(err, fmt.Errorf("pgxstore: phase %q: roll back: %w", point, rerr))
		}
	}
	return tx, err
}

// Renew does nothing: the claim's open transaction holds the key, with no lease to renew.
func (l *atomicLock) Renew(context.Context) error { return nil }

// Complete records r and commits. On a connection of its own, the recording and COMMIT
// go in one round trip. Recording is a plain INSERT of the completed row (pending) or an
// UPDATE of the row this transaction wrote or locked in the claim: if the INSERT fails (a
// twin recorded the key first) the transaction is aborted and the COMMIT sent with it
// commits nothing. No other transaction can change the row the UPDATE targets (this one
// holds its lock), but the handler can, through pgxstore.MustTx: an UPDATE that then misses
// its row is reported as an error, and on a connection of its own the COMMIT sent in the
// same round trip has already committed the handler's writes without a record.
func (l *atomicLock) Complete(ctx context.Context, r *storage.Response) error {
	if l.ended {
		return errEnded
	}
	l.ended = true
	l.slot.take()
	b := &pgx.Batch{}
	var q *pgx.QueuedQuery
	if l.pending {
		q = b.Queue(l.s.q.record, l.scope, l.key, l.fingerprint, l.method, l.path, l.point,
			int32(r.Status), storage.EncodeHeader(r.Header), r.Body)
	} else {
		q = b.Queue(l.s.q.complete, completeArgs(l.scope, l.key, l.tok, r)...)
	}
	if l.conn == nil {
		return l.completeTx(ctx, q.SQL, q.Arguments)
	}
	defer l.giveBack()
	b.Queue("commit")
	_ = replicated(l.conn.PgConn(), "") // a warning no COMMIT of this request left
	// ctx (the engine's) bounds the round trip: at its deadline pgx gives the read up and
	// closes the connection, which ends the transaction.
	br := l.conn.SendBatch(ctx, b)
	ct, err := br.Exec()
	var commit pgconn.CommandTag
	if err == nil {
		commit, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil && commit.String() != "COMMIT" {
		err = fmt.Errorf("commit answered %q", commit.String())
	}
	if err != nil {
		l.rollbackConn(ctx)
		return l.completeFailed(ctx, err)
	}
	if err := replicated(l.conn.PgConn(), "complete"); err != nil {
		return err
	}
	if ct.RowsAffected() != 1 {
		// Only the handler itself, writing to the key table in this transaction, can get
		// here; its writes are committed but no response is recorded.
		return fmt.Errorf("pgxstore: complete: the key row was changed inside the request's transaction")
	}
	return nil
}

func (l *atomicLock) completeTx(ctx context.Context, sql string, args []any) error {
	ct, err := l.tx.Exec(ctx, sql, args...)
	if err == nil && ct.RowsAffected() != 1 {
		err = fmt.Errorf("the key row was changed inside the request's transaction")
	}
	if err != nil {
		l.abort(ctx)
		return l.completeFailed(ctx, err)
	}
	pc := l.tx.Conn().PgConn() // a pool's transaction gives its connection back at Commit
	if err := l.tx.Commit(ctx); err != nil {
		return classify(ctx, "commit", err, false)
	}
	return replicated(pc, "complete")
}

// completeFailed classifies a failed completion. A unique violation on the key table means
// a twin that the advisory lock did not hold off recorded the key first: everything of
// this request rolled back (storage.ErrRecordedFirst, with storage.ErrTransient), and the
// engine answers with the twin's response.
func (l *atomicLock) completeFailed(ctx context.Context, err error) error {
	var pgErr *pgconn.PgError
	if l.pending && errors.As(err, &pgErr) && pgErr.Code == uniqueViolation && pgErr.TableName == l.s.table[len(l.s.table)-1] {
		return fmt.Errorf("pgxstore: complete: key %q: rolled back: %w (%w): %w", l.key, storage.ErrRecordedFirst, storage.ErrTransient, err)
	}
	return classify(ctx, "complete", err, false)
}

// rollbackConn rolls back what is left of the transaction after a failed completion
// batch (an error before COMMIT leaves it aborted; a failed COMMIT already ended it).
func (l *atomicLock) rollbackConn(ctx context.Context) {
	if l.conn.IsClosed() || l.conn.PgConn().TxStatus() == 'I' {
		return
	}
	_ = l.tx.Rollback(ctx) // on failure pgx closes the connection, and the pool drops it
}

// Release rolls back: neither the key nor the handler's writes remain. After Complete it
// does nothing.
func (l *atomicLock) Release(ctx context.Context) error {
	if l.ended {
		return nil
	}
	l.ended = true
	l.slot.take()
	err := l.tx.Rollback(ctx)
	l.giveBack()
	if err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("pgxstore: release: roll back: %w", err)
	}
	return nil
}

// abort ends a claim that will not become a lock (or a failed completion): roll back and
// give the connection back.
func (l *atomicLock) abort(ctx context.Context) {
	l.ended = true
	if l.tx != nil {
		// ctx is the claim's, bounded by the engine: a rollback it cuts short (a client
		// that hung up) closes the connection, which rolls back too.
		_ = l.tx.Rollback(ctx)
	}
	l.giveBack()
}

// phasedLock holds a key whose claim committed with a lease and a fencing token. Phases
// commit in transactions of their own; the handler's last writes go in the final
// transaction, opened when the handler first asks for it and committed by Complete with
// the response. Every write is fenced by the token.
type phasedLock struct {
	s          *Store
	scope, key string
	tok        keyrow.Token
	lease      time.Duration
	point      string
	takenOver  bool
	progress   bool  // a phase has committed: Release keeps the key and its point
	final      *slot // the final transaction
	ended      bool
}

var _ storage.Lock = (*phasedLock)(nil)

func (l *phasedLock) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, ctxKey{}, l.final)
}

func (l *phasedLock) RecoveryPoint() string { return l.point }

func (l *phasedLock) Resumed() bool { return l.takenOver }

// errFinalOpen: a phase after the handler opened its final transaction would need a
// second connection (a deadlock with a small pool), and the final writes made before it
// would run again on a retry that resumes after the phase.
var errFinalOpen = fmt.Errorf("pgxstore: Phase called after the handler opened the request's final transaction "+
	"(pgxstore.MustTx outside a phase): %w", storage.ErrFinalTxOpen)

// Phase runs fn with a transaction of its own (opened when fn first asks for it) and
// commits it with point as the new recovery point and a renewed lease, fenced by the
// token: after a takeover nothing commits and Phase returns storage.ErrLeaseLost.
func (l *phasedLock) Phase(ctx context.Context, point string, fn func(ctx context.Context) error) error {
	if l.ended {
		return errEnded
	}
	if l.final.isOpen() {
		return errFinalOpen
	}
	tx, err := runPhase(ctx, point, func(ctx context.Context) (pgx.Tx, error) { return l.s.begin(ctx, 0) }, fn)
	if err != nil {
		return err
	}
	if err := l.fenced(ctx, tx, "phase "+point, l.s.q.phase, l.scope, l.key, l.tok, point, l.lease.Microseconds()); err != nil {
		return err
	}
	l.point, l.progress = point, true
	return nil
}

// fenced runs a write that must find the lock's token, then commits tx (when not nil). A
// row count of zero means the lease was taken over: tx rolls back, ErrLeaseLost.
func (l *phasedLock) fenced(ctx context.Context, tx pgx.Tx, op, sql string, args ...any) error {
	ct, err := l.s.execCommitted(ctx, tx, op, sql, args...)
	if err == nil && ct.RowsAffected() == 0 {
		err = fmt.Errorf("pgxstore: %s: key %q: %w", op, l.key, storage.ErrLeaseLost)
	}
	if err != nil {
		if tx != nil {
			_ = tx.Rollback(ctx)
		}
		return classify(ctx, op, err, false)
	}
	if tx != nil {
		pc := tx.Conn().PgConn() // a pool's transaction gives its connection back at Commit
		if err := tx.Commit(ctx); err != nil {
			return classify(ctx, op+": commit", err, false)
		}
		return replicated(pc, op)
	}
	return nil
}

// Renew extends the lease by the claim's lease from now, fenced by the token, in a
// statement of its own (never in the handler's transaction), bounded by ctx (the
// engine's). On a single-connection DB it waits for the connection, which a phase's or the
// final transaction holds while open.
func (l *phasedLock) Renew(ctx context.Context) error {
	return l.fenced(ctx, nil, "renew", l.s.q.renew, l.scope, l.key, l.tok, l.lease.Microseconds())
}

// Complete records r, with the final transaction when the handler opened one, fenced by
// the token. After a failure the lock stays usable for Release, except after
// ErrNotReplicated: the completion committed on the primary, and Release does nothing.
func (l *phasedLock) Complete(ctx context.Context, r *storage.Response) error {
	if l.ended {
		return errEnded
	}
	tx := l.final.take()
	if err := l.fenced(ctx, tx, "complete", l.s.q.complete, completeArgs(l.scope, l.key, l.tok, r)...); err != nil {
		l.ended = errors.Is(err, ErrNotReplicated) // committed on the primary: nothing to give up
		return err
	}
	l.ended = true
	return nil
}

// Release rolls back the final transaction, then gives the key up: deleted when no phase
// has committed, otherwise kept with its recovery point and its lease ended, so the next
// retry takes over at once. Fenced by the token: ErrLeaseLost only when another lock
// holds the key; a key this lock completed (a Complete whose reply was lost) is left as
// it is, and Release returns nil.
func (l *phasedLock) Release(ctx context.Context) error {
	if l.ended {
		return nil
	}
	l.ended = true
	var errs []error
	if tx := l.final.take(); tx != nil {
		if err := tx.Rollback(ctx); err != nil {
			errs = append(errs, fmt.Errorf("pgxstore: release: roll back: %w", err))
		}
	}
	if !l.progress {
		ct, err := l.s.exec(ctx, nil, l.s.q.drop, l.scope, l.key, l.tok)
		if err != nil {
			return errors.Join(append(errs, classify(ctx, "release", err, false))...)
		}
		if ct.RowsAffected() == 1 {
			return errors.Join(errs...)
		}
		// Not deleted: taken over, a phase committed after all, or completed by this
		// lock; unlease tells which.
	}
	if err := l.fenced(ctx, nil, "release", l.s.q.unlease, l.scope, l.key, l.tok); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
