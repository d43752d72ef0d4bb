package pgxstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemkit/idem/core/storage"
)

// ErrNoTx is what Tx panics with when the context carries no transaction: the request is
// not behind the idem middleware, its route is not keyed, or the key was optional and
// absent. TxFromContext reports it as false.
var ErrNoTx = errors.New("pgxstore: no idempotency transaction in context")

// ErrTxOwned is returned by Commit and Rollback of the transaction Tx hands out: the store
// commits it together with the recorded response (or rolls it back when the request
// fails), so the handler must not end it itself. Return an error status (5xx) to roll
// back; nested transactions (tx.Begin) are the handler's to commit or roll back. It wraps
// storage.ErrTxOwned (storage.ErrTxOwned), which every store's refusal wraps.
var ErrTxOwned = fmt.Errorf("pgxstore: the idempotency transaction is committed by the store with the response; "+
	"do not Commit or Rollback it in the handler: %w", storage.ErrTxOwned)

type ctxKey struct{}

// source is what a context carries: the transaction of the request, a phase, or one the
// caller set with WithTx.
type source interface {
	tx(ctx context.Context) (pgx.Tx, error)
}

type fixed struct{ t pgx.Tx }

func (f fixed) tx(context.Context) (pgx.Tx, error) { return f.t, nil }

// WithTx returns a copy of ctx carrying tx, so code that gets its transaction with MustTx or
// TxFromContext runs outside the middleware too (a job, a script, a test) in a transaction the
// caller manages. MustTx then returns tx itself.
func WithTx(ctx context.Context, tx pgx.Tx) context.Context {
	if tx == nil {
		panic("pgxstore: WithTx needs a transaction")
	}
	return context.WithValue(ctx, ctxKey{}, fixed{tx})
}

// MustTx returns the transaction of the keyed request whose context is ctx: in atomic mode
// the claim's transaction (the handler's writes commit with the recorded response, or
// not at all); in phased mode, inside a phase, the phase's transaction, and outside the
// phases the request's final transaction, begun on this first call and committed with the
// response. It is valid until the handler returns; do not Commit or Rollback it
// (ErrTxOwned).
//
// MustTx panics when ctx carries no transaction (a route not behind the middleware, or an
// optional key that was absent): use TxFromContext there. If beginning the final transaction
// fails, the returned transaction reports that error from every method.
func MustTx(ctx context.Context) pgx.Tx {
	tx, ok := TxFromContext(ctx)
	if !ok {
		panic(fmt.Errorf("%w: call pgxstore.MustTx from a handler behind the idem middleware on a keyed route, "+
			"or on a context from pgxstore.WithTx; use pgxstore.TxFromContext where there may be none", ErrNoTx))
	}
	return tx
}

// TxFromContext is MustTx without the panic: it returns the transaction and true when ctx
// carries one, and nil and false when it does not. As with MustTx, a transaction that could
// not begin (or has ended) is returned with true and reports its error from every method.
func TxFromContext(ctx context.Context) (pgx.Tx, bool) {
	src, ok := ctx.Value(ctxKey{}).(source)
	if !ok {
		return nil, false
	}
	tx, err := src.tx(ctx)
	if err != nil {
		return &handlerTx{failed: err}, true
	}
	return tx, true
}

// errSlotClosed: the transaction was asked for after its lock or phase ended.
var errSlotClosed = fmt.Errorf("pgxstore: the request's transaction has ended: %w", pgx.ErrTxClosed)

// slot hands one transaction to the handler: an open one (atomic), or one begun on first
// use (phases, the phased final transaction). take ends the handler's access and gives
// the store the transaction to commit or roll back.
type slot struct {
	open func(ctx context.Context) (pgx.Tx, error) // nil when inner is set from the start

	mu     sync.Mutex
	inner  pgx.Tx
	wrap   handlerTx // what the handler is handed (wrap.inner set once it is)
	closed bool
}

func (s *slot) tx(ctx context.Context) (pgx.Tx, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errSlotClosed
	}
	if s.wrap.inner != nil {
		return &s.wrap, nil
	}
	if s.inner == nil {
		inner, err := s.open(ctx)
		if err != nil {
			return nil, fmt.Errorf("pgxstore: begin: %w", err)
		}
		s.inner = inner
	}
	s.wrap.inner = s.inner
	return &s.wrap, nil
}

// isOpen reports whether the slot holds a transaction begun on demand.
func (s *slot) isOpen() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.closed && s.open != nil && s.inner != nil
}

// take closes the slot and returns its transaction, if it has one, the first time.
func (s *slot) take() pgx.Tx {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.wrap.closed.Store(true) // a handler holding it is refused from now on
	return s.inner
}

// handlerTx is the transaction as the handler sees it: everything but Commit and Rollback,
// until the store takes it back. One that could not begin (failed) reports that error
// from every method.
type handlerTx struct {
	inner  pgx.Tx
	closed atomic.Bool
	failed error
}

var _ pgx.Tx = (*handlerTx)(nil)

// refused is what every method but Commit and Rollback returns instead of running: the
// error of a transaction that could not begin, or errSlotClosed once the store took it
// back.
func (t *handlerTx) refused() error {
	if t.failed == nil && t.closed.Load() {
		return errSlotClosed
	}
	return t.failed
}

func (t *handlerTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.refused(); err != nil {
		return nil, err
	}
	return t.inner.Begin(ctx)
}

// Commit and Rollback are the store's: they end nothing (ErrTxOwned, or the error of a
// transaction that could not begin).
func (t *handlerTx) Commit(context.Context) error   { return t.owned() }
func (t *handlerTx) Rollback(context.Context) error { return t.owned() }

func (t *handlerTx) owned() error {
	if t.failed != nil {
		return t.failed
	}
	return ErrTxOwned
}

func (t *handlerTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.refused(); err != nil {
		return 0, err
	}
	return t.inner.CopyFrom(ctx, table, cols, src)
}

func (t *handlerTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := t.refused(); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return t.inner.SendBatch(ctx, b)
}

// LargeObjects returns the large objects of the transaction; like the transaction, they
// are valid until the handler returns.
func (t *handlerTx) LargeObjects() pgx.LargeObjects {
	if t.refused() != nil {
		return pgx.LargeObjects{}
	}
	return t.inner.LargeObjects()
}

func (t *handlerTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.refused(); err != nil {
		return nil, err
	}
	return t.inner.Prepare(ctx, name, sql)
}

func (t *handlerTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.refused(); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.inner.Exec(ctx, sql, args...)
}

func (t *handlerTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.refused(); err != nil {
		return errRows{err}, err
	}
	return t.inner.Query(ctx, sql, args...)
}

func (t *handlerTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.refused(); err != nil {
		return errRows{err}
	}
	return t.inner.QueryRow(ctx, sql, args...)
}

func (t *handlerTx) Conn() *pgx.Conn {
	if t.refused() != nil {
		return nil
	}
	return t.inner.Conn()
}

// errRows is an empty result that reports err.
type errRows struct{ err error }

func (r errRows) Close()                                       {}
func (r errRows) Err() error                                   { return r.err }
func (r errRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (r errRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (r errRows) Next() bool                                   { return false }
func (r errRows) Scan(...any) error                            { return r.err }
func (r errRows) Values() ([]any, error)                       { return nil, r.err }
func (r errRows) RawValues() [][]byte                          { return nil }
func (r errRows) Conn() *pgx.Conn                              { return nil }
func (r errRows) TypeMap() *pgtype.Map                         { return nil }
