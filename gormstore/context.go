package gormstore

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"gorm.io/gorm"
)

// ErrNoTx is returned by DBSafely when the context carries no transaction: the
// request did not go through the idem middleware with a key (or the key was optional
// and absent), and no caller set one with WithTx.
var ErrNoTx = errors.New("gormstore: no transaction in context")

// errEnded reports use of a transaction after its lock was completed or released.
var errEnded = errors.New("gormstore: the request's transaction has ended (completed or released)")

type ctxKey struct{}

// holder is what the context carries: a transaction, or the means to open one on first
// use (phased mode), shared by every DB call on contexts derived from it.
type holder struct {
	mu   sync.Mutex
	tx   *gorm.DB
	err  error
	open func() (*gorm.DB, error) // nil: fixed (atomic, WithTx) or ended
	base *gorm.DB                 // carries errors back to the caller as a *gorm.DB
}

// get returns the transaction, opening it first if it is lazy.
func (h *holder) get() (*gorm.DB, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.tx != nil:
		return h.tx, nil
	case h.err != nil:
		return nil, h.err
	case h.open == nil:
		return nil, errEnded
	}
	h.tx, h.err = h.open()
	return h.tx, h.err
}

// take hands the open transaction (nil if none) to the caller; the next get opens a
// new one.
func (h *holder) take() *gorm.DB {
	h.mu.Lock()
	defer h.mu.Unlock()
	tx := h.tx
	h.tx, h.err = nil, nil
	return tx
}

// end hands the open transaction (nil if none) to the caller, and makes every later get
// fail.
func (h *holder) end() *gorm.DB {
	h.mu.Lock()
	defer h.mu.Unlock()
	tx := h.tx
	h.tx, h.open, h.err = nil, nil, errEnded
	return tx
}

// WithTx returns ctx carrying tx, so that code written for handlers, which reaches its
// transaction with DB(ctx), also runs inside a transaction the caller already has
// (a background job, a test, or a service method called from another transaction):
//
//	err := db.Transaction(func(tx *gorm.DB) error {
//		return createOrder(gormstore.WithTx(ctx, tx), order)
//	})
//
// It only sets what DB returns: Store.Claim always opens its own transaction. WithTx
// panics when tx is nil.
func WithTx(ctx context.Context, tx *gorm.DB) context.Context {
	if tx == nil {
		panic("gormstore: WithTx with a nil *gorm.DB")
	}
	return context.WithValue(ctx, ctxKey{}, &holder{tx: tx, base: tx})
}

// DB returns the transaction of the request ctx belongs to, bound to ctx: the
// *gorm.DB a handler behind the idem middleware uses for its business writes, so that
// they commit together with the key's response (atomic mode) or with the phase that
// runs them (phased mode, inside Lock.Phase / core.Operation.Phase).
//
// In phased mode, outside a phase, the transaction opens on the first call and commits
// when the response is recorded; if a phase starts while it is open, it becomes that
// phase's transaction and commits with it, so a request never holds two connections.
//
// If that transaction cannot be opened, the returned *gorm.DB carries the error in its
// Error field, as GORM does, and every operation on it fails with that error. Once the
// database has rolled the transaction back on its own (a MySQL/MariaDB deadlock, an
// SQLite SQLITE_FULL…; see ErrRolledBack), every later operation fails with an error
// wrapping ErrRolledBack, and nothing of the request is kept.
//
// DB panics when ctx carries no transaction: the route is not behind the middleware, the
// request had no key, or the context did not come from the request (nor from WithTx).
// Writing outside the transaction would silently lose the guarantee, so there is no
// fallback to the plain database; use DBSafely where the transaction is optional.
func DB(ctx context.Context) *gorm.DB {
	h, ok := ctx.Value(ctxKey{}).(*holder)
	if !ok {
		panic(fmt.Sprintf("%v: gormstore.DB needs the context of a request handled by the idem middleware with a key, "+
			"or one made by gormstore.WithTx; use gormstore.DBSafely where there may be none", ErrNoTx))
	}
	tx, err := h.get()
	if err != nil {
		db := h.base.WithContext(ctx)
		_ = db.AddError(err)
		return db
	}
	return tx.WithContext(ctx)
}

// DBSafely is DB returning an error instead of panicking: ErrNoTx when ctx
// carries no transaction, or the error of opening it.
func DBSafely(ctx context.Context) (*gorm.DB, error) {
	h, ok := ctx.Value(ctxKey{}).(*holder)
	if !ok {
		return nil, ErrNoTx
	}
	tx, err := h.get()
	if err != nil {
		return nil, err
	}
	return tx.WithContext(ctx), nil
}
