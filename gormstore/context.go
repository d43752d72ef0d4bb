package gormstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"gorm.io/gorm"

	"github.com/idemkit/idem/core/storage"
)

// ErrNoTx is what DB panics with (in its message) when the context carries no
// transaction: the request did not go through the idem middleware with a key (or the key
// was optional and absent), and no caller set one with WithTx. DBFromContext reports it as
// false.
var ErrNoTx = errors.New("gormstore: no transaction in context")

// errEnded reports use of a transaction after its lock was completed or released.
var errEnded = errors.New("gormstore: the request's transaction has ended (completed or released)")

// ErrTxOwned is the error of Commit and Rollback on the *gorm.DB that DB returns for a
// keyed request (MustDB(ctx).Commit().Error): the store commits the request's transaction
// together with the recorded response, or rolls it back when the request fails, so the
// handler cannot end it; the refused call ends nothing. Answer with an error status (5xx)
// to roll back. Nested transactions (MustDB(ctx).Transaction, savepoints) are the handler's
// own. A transaction set with WithTx is the caller's: DB hands it back as it is. It wraps
// storage.ErrTxOwned (storage.ErrTxOwned), which every store's refusal wraps.
var ErrTxOwned = fmt.Errorf("gormstore: the idempotency transaction is committed by the store with the response; "+
	"do not Commit or Rollback it in the handler: %w", storage.ErrTxOwned)

type ctxKey struct{}

// holder is what the context carries: a transaction, or the means to open one on first
// use (phased mode), shared by every DB call on contexts derived from it.
type holder struct {
	mu    sync.Mutex
	tx    *gorm.DB // the transaction, as the store commits or rolls it back
	owned *ownedTx // tx's connection pool as DB hands it to the handler; built on first use
	err   error
	open  func() (*gorm.DB, error) // nil: fixed (atomic, WithTx) or ended
	base  *gorm.DB                 // carries errors back to the caller as a *gorm.DB
	// callers: a transaction the caller set with WithTx, which DB hands back as it is;
	// otherwise the store's, which DB hands out with Commit and Rollback refused.
	callers bool
}

// get returns the transaction, opening it first if it is lazy, and the connection pool
// the handler's *gorm.DB uses instead of tx's own (nil for a WithTx transaction, handed
// back as it is): an ownedTx, whose Commit and Rollback are refused.
func (h *holder) get() (*gorm.DB, gorm.ConnPool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.tx != nil:
	case h.err != nil:
		return nil, nil, h.err
	case h.open == nil:
		return nil, nil, errEnded
	default:
		if h.tx, h.err = h.open(); h.err != nil {
			return nil, nil, h.err
		}
	}
	if h.callers {
		return h.tx, nil, nil
	}
	if h.owned == nil {
		inner, ok := h.tx.Statement.ConnPool.(gorm.Tx)
		if !ok {
			return h.tx, nil, nil // not a transaction: nothing to refuse
		}
		h.owned = &ownedTx{Tx: inner, db: h.tx}
	}
	return h.tx, h.owned, nil
}

// handlerDB returns tx bound to ctx as the handler gets it: on its own Statement (as
// WithContext makes), with pool, when not nil, as its connection pool.
func handlerDB(ctx context.Context, tx *gorm.DB, pool gorm.ConnPool) *gorm.DB {
	db := tx.WithContext(ctx) // a Session with a Context: a Statement of its own
	if pool != nil {
		db.Statement.ConnPool = pool
	}
	return db
}

// isOpen reports whether the holder holds a transaction opened on first use.
func (h *holder) isOpen() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.tx != nil && h.open != nil
}

// end hands the open transaction (nil if none) to the caller, and makes every later get
// fail.
func (h *holder) end() *gorm.DB {
	h.mu.Lock()
	defer h.mu.Unlock()
	tx := h.tx
	h.tx, h.owned, h.open, h.err = nil, nil, nil, errEnded
	return tx
}

// ownedTx is the connection pool of the *gorm.DB that DB hands the handler for a
// transaction the store ends: Commit and Rollback return ErrTxOwned and send nothing;
// everything else goes to the transaction's own pool (the transaction, or the txGuard in
// front of it). gorm's Transaction on it still nests with savepoints, since it is a
// gorm.TxCommitter.
type ownedTx struct {
	gorm.Tx
	db *gorm.DB // the store's transaction, for GetDBConn
}

var (
	_ gorm.Tx             = (*ownedTx)(nil)
	_ gorm.GetDBConnector = (*ownedTx)(nil)
)

// Commit implements gorm.TxCommitter: refused, nothing is sent.
func (t *ownedTx) Commit() error { return ErrTxOwned }

// Rollback implements gorm.TxCommitter: refused, nothing is sent.
func (t *ownedTx) Rollback() error { return ErrTxOwned }

// GetDBConn implements gorm.GetDBConnector, so that MustDB(ctx).DB() returns the pool, as it
// does on a plain GORM transaction.
func (t *ownedTx) GetDBConn() (*sql.DB, error) { return t.db.DB() }

// WithTx returns ctx carrying tx, so that code written for handlers, which reaches its
// transaction with MustDB(ctx), also runs inside a transaction the caller already has
// (a background job, a test, or a service method called from another transaction):
//
//	err := db.Transaction(func(tx *gorm.DB) error {
//		return createOrder(gormstore.WithTx(ctx, tx), order)
//	})
//
// It only sets what MustDB returns: Store.Claim always opens its own transaction. WithTx
// panics when tx is nil.
func WithTx(ctx context.Context, tx *gorm.DB) context.Context {
	if tx == nil {
		panic("gormstore: WithTx with a nil *gorm.DB")
	}
	return context.WithValue(ctx, ctxKey{}, &holder{tx: tx, base: tx, callers: true})
}

// MustDB returns the transaction of the request ctx belongs to, bound to ctx: the
// *gorm.DB a handler behind the idem middleware uses for its business writes, so that
// they commit together with the key's response (atomic mode) or with the phase that
// runs them (phased mode, inside Lock.Phase / core.Operation.Phase).
//
// In phased mode, outside a phase, the transaction opens on the first call and commits
// when the response is recorded; a phase started after that is refused
// (storage.ErrFinalTxOpen), so call the phases first.
//
// The store ends the transaction: Commit and Rollback on the returned *gorm.DB fail with
// ErrTxOwned and end nothing (answer with a 5xx to roll back). A transaction set with
// WithTx is returned as it is.
//
// If that transaction cannot be opened, the returned *gorm.DB carries the error in its
// Error field, as GORM does, and every operation on it fails with that error. Once the
// database has rolled the transaction back on its own (a MySQL/MariaDB deadlock, an
// SQLite SQLITE_FULL…; see ErrRolledBack), every later operation fails with an error
// wrapping ErrRolledBack, and nothing of the request is kept.
//
// MustDB panics when ctx carries no transaction: the route is not behind the middleware, the
// request had no key, or the context did not come from the request (nor from WithTx).
// Writing outside the transaction would silently lose the guarantee, so there is no
// fallback to the plain database; use DBFromContext where the transaction is optional.
func MustDB(ctx context.Context) *gorm.DB {
	db, ok := DBFromContext(ctx)
	if !ok {
		panic(fmt.Sprintf("%v: gormstore.MustDB needs the context of a request handled by the idem middleware with a key, "+
			"or one made by gormstore.WithTx; use gormstore.DBFromContext where there may be none", ErrNoTx))
	}
	return db
}

// DBFromContext is MustDB without the panic: it returns the transaction and true when ctx
// carries one, and nil and false when it does not. As with MustDB, a transaction that could
// not be opened (or has ended) is returned with true, carrying its error in the Error
// field.
func DBFromContext(ctx context.Context) (*gorm.DB, bool) {
	h, ok := ctx.Value(ctxKey{}).(*holder)
	if !ok {
		return nil, false
	}
	tx, pool, err := h.get()
	if err != nil {
		db := h.base.WithContext(ctx)
		_ = db.AddError(err)
		return db, true
	}
	return handlerDB(ctx, tx, pool), true
}
