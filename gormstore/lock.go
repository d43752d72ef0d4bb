package gormstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/core/storage"
	"gorm.io/gorm"
)

// lock is a claimed key: storage.Lock for both modes.
type lock struct {
	s          *Store
	mode       storage.Mode
	scope, key string
	token      any // see Store.newToken
	lease      time.Duration
	initial    string // recovery point when the lock was obtained
	point      string // recovery point now
	progress   bool   // a phase has committed, in this attempt or an earlier one
	takenOver  bool
	tx         *gorm.DB // atomic: the claim's transaction
	// pending: the claim wrote no row (PostgreSQL, holding the key's advisory lock);
	// Complete inserts the completed row from these.
	pending      bool
	fingerprint  []byte
	method, path string
	held         *holder // what Context hands the handler; phased: opened on first use
	ended        bool
	inPhase      bool
	savepoints   int // atomic: how many phases set one, for their names
	// cancelTx ends the context the atomic transaction began with, once it is over.
	cancelTx context.CancelFunc
}

// endTx releases the context of an atomic lock's transaction.
func (l *lock) endTx() {
	if l.cancelTx != nil {
		l.cancelTx()
	}
}

var _ storage.Lock = (*lock)(nil)

// Context implements storage.Lock.Context: ctx carrying the transaction MustDB returns. In
// atomic mode it is the claim's; in phased mode it opens on the first DB call, bound to
// this ctx, and commits in Complete with the response.
func (l *lock) Context(ctx context.Context) context.Context {
	switch {
	case l.held != nil:
	case l.ended:
		return context.WithValue(ctx, ctxKey{}, &holder{base: l.s.db, err: errEnded})
	default:
		l.held = &holder{base: l.s.db, open: func() (*gorm.DB, error) { return l.open(ctx, "open transaction") }}
	}
	return context.WithValue(ctx, ctxKey{}, l.held)
}

// RecoveryPoint implements storage.Lock.RecoveryPoint.
func (l *lock) RecoveryPoint() string { return l.initial }

// Resumed implements storage.Lock.Resumed.
func (l *lock) Resumed() bool { return l.takenOver }

// open begins a phased-mode transaction. On SQLite its first statement writes, fenced
// by the token: the transaction takes the write lock at once (waiting up to
// busy_timeout) instead of upgrading from a read later, which SQLite refuses without
// waiting, and a lease already lost shows up before any work is done.
func (l *lock) open(ctx context.Context, op string) (*gorm.DB, error) {
	tx, err := l.s.begin(ctx)
	if err != nil {
		return nil, wrap(ctx, op, err)
	}
	if l.s.dialect == sqlite {
		res := tx.WithContext(ctx).Exec("UPDATE "+l.s.quoted+" SET lease_token = lease_token"+started,
			l.scope, l.key, l.token)
		if err := fenced(ctx, op, res); err != nil {
			tx.Rollback()
			return nil, err
		}
	}
	return l.s.guard(tx), nil
}

// started is the WHERE clause of the writes fenced by the lock's token: the key, still
// started, holds it. (A completed key keeps the token that completed it: see Release.)
// Arguments: scope, key, token.
const started = " WHERE scope = ? AND idem_key = ? AND lease_token = ? AND state = 'started'"

// fenced checks a statement fenced by the lease token: an error, or ErrLeaseLost when it
// matched no row.
func fenced(ctx context.Context, op string, res *gorm.DB) error {
	switch {
	case res.Error != nil:
		return wrap(ctx, op, res.Error)
	case res.RowsAffected != 1:
		return fmt.Errorf("gormstore: %s: %w", op, storage.ErrLeaseLost)
	}
	return nil
}

// Phase implements storage.Lock.Phase. In phased mode fn's transaction opens on its first
// MustDB call; if fn never uses it, the new recovery point commits on its own. Once the
// handler has opened the request's final transaction, Phase refuses to start
// (storage.ErrFinalTxOpen): a phase of its own would need a second connection, and one
// that took the final transaction over would commit the writes made before it, which a
// retry resuming after the phase runs again. In atomic mode fn runs in the claim's
// transaction under a savepoint, set when fn first calls DB: if fn fails, the transaction
// rolls back to it.
func (l *lock) Phase(ctx context.Context, point string, fn func(ctx context.Context) error) (err error) {
	switch {
	case l.ended:
		return fmt.Errorf("gormstore: phase %q: %w", point, errEnded)
	case l.inPhase:
		return fmt.Errorf("gormstore: phase %q: phases do not nest", point)
	case l.mode == storage.ModePhased && l.held != nil && l.held.isOpen():
		return fmt.Errorf("gormstore: phase %q: %w", point, storage.ErrFinalTxOpen)
	}
	l.inPhase = true
	defer func() { l.inPhase = false }()

	if l.mode == storage.ModeAtomic {
		return l.atomicPhase(ctx, point, fn)
	}

	h := &holder{base: l.s.db, open: func() (*gorm.DB, error) { return l.open(ctx, "phase "+point) }}
	defer func() {
		if p := recover(); p != nil {
			if tx := h.end(); tx != nil {
				tx.Rollback()
			}
			panic(p)
		}
	}()
	if err := fn(context.WithValue(ctx, ctxKey{}, h)); err != nil {
		if tx := h.end(); tx != nil {
			tx.Rollback()
		}
		return err
	}
	tx := h.end()
	leaseSQL, leaseArgs := l.s.plusSQL(l.s.clock(), l.lease)
	args := append([]any{point}, leaseArgs...)
	if _, err := l.write(ctx, tx, "phase "+point, "UPDATE "+l.s.quoted+" SET recovery_point = ?, locked_until = "+leaseSQL+started,
		append(args, l.scope, l.key, l.token)...); err != nil {
		return err
	}
	if tx != nil {
		if err := tx.Commit().Error; err != nil {
			return wrap(ctx, "phase "+point+": commit", err)
		}
	}
	l.point, l.progress = point, true
	return nil
}

// atomicPhase runs fn in the claim's transaction, under a savepoint set when fn first asks
// for the transaction (a phase that writes nothing costs no round trip); if fn fails, the
// transaction rolls back to it, and the request's earlier writes stay.
func (l *lock) atomicPhase(ctx context.Context, point string, fn func(ctx context.Context) error) error {
	l.savepoints++
	name := fmt.Sprintf("idem_phase_%d", l.savepoints)
	sp := &holder{base: l.s.db, open: func() (*gorm.DB, error) {
		if err := l.tx.WithContext(ctx).Exec("SAVEPOINT " + name).Error; err != nil {
			return nil, wrap(ctx, "phase "+point+": savepoint", err)
		}
		return l.tx, nil
	}}
	err := fn(context.WithValue(ctx, ctxKey{}, sp))
	if tx := sp.end(); tx != nil && err != nil {
		if rerr := tx.WithContext(ctx).Exec("ROLLBACK TO SAVEPOINT " + name).Error; rerr != nil {
			return errors.Join(err, wrap(ctx, "phase "+point+": roll back to its savepoint", rerr))
		}
	}
	if err != nil {
		return err
	}
	l.point = point // recorded by Complete, in the same transaction
	return nil
}

// Renew implements storage.Lock.Renew: in phased mode one UPDATE of the lease, fenced by
// the token, on its own connection (never the handler's transaction), bounded by the
// engine's ctx. It reads only what the lock was claimed with, so it may run on another
// goroutine while the handler runs. On SQLite it waits for the write lock, which an open
// phase or final transaction holds. In atomic mode it does nothing.
func (l *lock) Renew(ctx context.Context) error {
	if l.mode == storage.ModeAtomic {
		return nil
	}
	leaseSQL, leaseArgs := l.s.plusSQL(l.s.clock(), l.lease)
	// A lease Release ended (locked_until NULL) stays ended: a renewal in flight extends nothing.
	res := l.s.db.WithContext(ctx).Exec("UPDATE "+l.s.quoted+" SET locked_until = "+leaseSQL+started+" AND locked_until IS NOT NULL",
		append(leaseArgs, l.scope, l.key, l.token)...)
	return fenced(ctx, "renew", res)
}

// finish commits (or rolls back) tx within ctx's deadline. database/sql's Commit and
// Rollback take no context, and MySQL's driver watches none while they run, so they run
// on a goroutine of their own: if ctx ends first, finish cancels the transaction's own
// context where it has one (cancelTx: the atomic claim's, which makes pgx give the call
// up) and returns ctx's error; the call then ends when the database answers or the
// connection breaks, and its outcome is unknown to the caller (as for any commit whose
// answer was lost).
func finish(ctx context.Context, end func() error, cancelTx context.CancelFunc) error {
	done := make(chan error, 1)
	go func() { done <- end() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		select {
		case err := <-done: // it answered just in time
			return err
		default:
		}
		if cancelTx != nil {
			cancelTx()
		}
		return fmt.Errorf("%w: the database did not answer in time; the outcome of the transaction's end is unknown", context.Cause(ctx))
	}
}

// Complete implements storage.Lock.Complete: one UPDATE fenced by the token, in the claim's
// transaction (atomic), in the request's transaction if the handler opened one
// (phased), or on its own; then the commit. The whole is bounded by ctx (the engine's).
func (l *lock) Complete(ctx context.Context, r *storage.Response) error {
	switch {
	case r == nil:
		return errors.New("gormstore: complete: nil response")
	case l.ended:
		return fmt.Errorf("gormstore: complete: %w", errEnded)
	}
	// An atomic lock ends here whatever happens: its transaction commits or rolls back.
	// A phased one ends on success; after a failure Release may still give the key up.
	var tx *gorm.DB
	if l.mode == storage.ModeAtomic {
		l.ended = true
		defer l.endTx()
		l.held.end()
		tx = l.tx
	} else if l.held != nil {
		tx = l.held.end()
	}
	if l.pending {
		return l.record(ctx, tx, r)
	}
	nowSQL, nowArgs := l.s.nowSQL(l.s.clock())
	args := []any{string(storage.StateCompleted), l.point, r.Status, storage.EncodeHeader(r.Header), r.Body}
	args = append(args, nowArgs...)
	args = append(args, l.scope, l.key, l.token)
	if res, err := l.write(ctx, tx, "complete", "UPDATE "+l.s.quoted+" SET state = ?, recovery_point = ?, locked_until = NULL, request = NULL, "+
		"response_code = ?, response_headers = ?, response_body = ?, completed_at = "+nowSQL+started, args...); err != nil {
		if l.mode == storage.ModeAtomic && res.Error == nil {
			// No lease to lose: the claim's own transaction holds the row, so it is gone
			// only if that transaction ended under the handler. Not ErrLeaseLost, which
			// the engine answers 409 "in progress": nothing is.
			return errors.New("gormstore: complete: the claim's transaction no longer holds the key (the database ended it); nothing was recorded")
		}
		return err
	}
	if tx != nil {
		if err := l.commit(ctx, tx); err != nil {
			return wrap(ctx, "complete: commit", err)
		}
	}
	l.ended = true
	return nil
}

// write runs a statement fenced by the lock's token in tx (on its own when tx is nil): an
// error, or ErrLeaseLost when it matched no row, rolls tx back.
func (l *lock) write(ctx context.Context, tx *gorm.DB, op, q string, args ...any) (*gorm.DB, error) {
	db := l.s.db
	if tx != nil {
		db = tx
	}
	res := db.WithContext(ctx).Exec(q, args...)
	err := fenced(ctx, op, res)
	if err != nil && tx != nil {
		l.rollback(ctx, tx)
	}
	return res, err
}

// commit commits tx, the claim's or the request's final transaction, within ctx's
// deadline (finish).
func (l *lock) commit(ctx context.Context, tx *gorm.DB) error {
	return finish(ctx, func() error { return tx.Commit().Error }, l.cancelTx)
}

// rollback rolls tx back within ctx's deadline (finish); its error is the caller's to
// report or not.
func (l *lock) rollback(ctx context.Context, tx *gorm.DB) error {
	err := finish(ctx, func() error { return tx.Rollback().Error }, l.cancelTx)
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

// Release implements storage.Lock.Release. After a failed Complete it is a no-op in atomic
// mode (the transaction is gone) and, in phased mode, gives the key up if the lease is
// still this lock's, or finds the key completed with this lock's token (the completion
// landed, its reply was lost) and changes nothing. Its statements, the rollback included, run under ctx, which the
// engine bounds and does not cancel when the client hangs up.
func (l *lock) Release(ctx context.Context) error {
	defer l.endTx()
	if l.ended {
		return nil
	}
	l.ended = true
	if l.mode == storage.ModeAtomic {
		l.held.end()
		if err := l.rollback(ctx, l.tx); err != nil {
			return wrap(ctx, "release", err)
		}
		return nil
	}

	if l.held != nil {
		if tx := l.held.end(); tx != nil {
			if err := l.rollback(ctx, tx); err != nil && ctx.Err() != nil {
				return wrap(ctx, "release: roll back", err)
			}
		}
	}
	if !l.progress {
		// Only a key still at its first point: a phase whose COMMIT outcome this worker
		// never learned may have committed, and its progress must stay.
		res := l.s.db.WithContext(ctx).Exec("DELETE FROM "+l.s.quoted+started+" AND recovery_point = ?",
			l.scope, l.key, l.token, storage.RecoveryStarted)
		if res.Error != nil || res.RowsAffected == 1 {
			return fenced(ctx, "release", res)
		}
		// Not deleted: taken over, a phase committed after all, or completed by this lock.
	}
	// released_at: core.Completer's grace runs from it.
	nowSQL, nowArgs := l.s.nowSQL(l.s.clock())
	res := l.s.db.WithContext(ctx).Exec("UPDATE "+l.s.quoted+" SET locked_until = NULL, released_at = "+nowSQL+started,
		append(nowArgs, l.scope, l.key, l.token)...)
	if res.Error != nil || res.RowsAffected == 1 {
		return fenced(ctx, "release", res)
	}
	// Nothing updated: the key is still this lock's if it holds the token, completed by a
	// Complete whose reply was lost (or, on MySQL, which counts only changed rows, already
	// released); then there is nothing to give up. Otherwise another lock holds it.
	var mine int64
	if err := l.s.db.WithContext(ctx).Table(l.s.table).Where("scope = ? AND idem_key = ? AND lease_token = ?", l.scope, l.key, l.token).
		Count(&mine).Error; err != nil {
		return wrap(ctx, "release", err)
	}
	if mine == 0 {
		return fmt.Errorf("gormstore: release: %w", storage.ErrLeaseLost)
	}
	return nil
}

// record inserts the completed row and commits: the one write of an atomic claim that
// wrote nothing (claimLocked). If a twin recorded the key first, the INSERT fails on the
// primary key, the transaction rolls back with the handler's writes, and the engine
// answers with the twin's response (storage.ErrRecordedFirst, with storage.ErrTransient).
func (l *lock) record(ctx context.Context, tx *gorm.DB, r *storage.Response) error {
	res := tx.WithContext(ctx).Exec(l.s.recordSQL, l.scope, l.key, l.fingerprint, l.method, l.path,
		string(storage.StateCompleted), l.point, r.Status, storage.EncodeHeader(r.Header), r.Body)
	if res.Error == nil && res.RowsAffected != 1 {
		res.Error = fmt.Errorf("inserted %d rows", res.RowsAffected)
	}
	if res.Error != nil {
		l.rollback(ctx, tx)
		var pg interface{ SQLState() string }
		if errors.As(res.Error, &pg) && pg.SQLState() == "23505" {
			return fmt.Errorf("gormstore: complete: key %q: rolled back: %w (%w): %w", l.key, storage.ErrRecordedFirst, storage.ErrTransient, res.Error)
		}
		return wrap(ctx, "complete", res.Error)
	}
	if err := l.commit(ctx, tx); err != nil {
		return wrap(ctx, "complete: commit", err)
	}
	return nil
}
