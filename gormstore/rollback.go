package gormstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"

	"gorm.io/gorm"
)

// ErrRolledBack is wrapped, together with the database's own error, by the error of every
// statement sent through MustDB(ctx) after the database rolled the request's transaction back
// on its own, and by what Complete and Phase then return: on MySQL/MariaDB a deadlock
// (1213), or a lock wait timeout (1205) on a server started with
// innodb_rollback_on_timeout=ON; on SQLite the errors after which SQLite may have rolled
// the transaction back (SQLITE_FULL, SQLITE_IOERR, SQLITE_BUSY, SQLITE_NOMEM,
// SQLITE_INTERRUPT), which the store then rolls back itself. Nothing of the request is
// kept and nothing is recorded; the client's retry with the same key runs the handler
// afresh. The statement that met the error returns the database's error unchanged.
var ErrRolledBack = errors.New("gormstore: the database rolled the request's transaction back")

// txGuard is the ConnPool (the *gorm.DB's Statement.ConnPool) of a transaction the store
// hands to user code on MySQL/MariaDB and SQLite. Both may roll a whole transaction back
// on an error and carry on in autocommit, where every later statement of the handler
// would commit on its own, outside the key's transaction. Once it sees such an error the
// guard rolls the transaction back (database/sql then returns its connection to the
// pool) and refuses every later statement, commit included, with an error wrapping
// ErrRolledBack and the database's error, sending nothing. PostgreSQL needs no guard: an
// aborted transaction refuses every statement itself (25P02) until it is rolled back.
//
// The happy path costs an uncontended mutex per statement and no round trip. The mutex
// makes "send, see the error, roll back" one step for handlers that share the transaction
// between goroutines, whose statements database/sql serialises on the one connection
// anyway.
//
// What it cannot see: an error that *sql.Row reports only from Scan (a QueryRow whose
// error arrives with the rows rather than instead of them), and statements prepared on
// a session of the handler's own (gorm.Session{PrepareStmt: true}), which gorm runs
// through StmtContext.
type txGuard struct {
	tx      gorm.Tx  // *sql.Tx, or gorm's *PreparedStmtTX
	db      *gorm.DB // the store's, for GetDBConn
	dialect dialect

	mu   sync.Mutex
	err  error     // non-nil once rolled back: wraps ErrRolledBack and the cause
	rows *sql.Rows // the last query's: its iteration may end in such an error
}

var (
	_ gorm.Tx             = (*txGuard)(nil)
	_ gorm.GetDBConnector = (*txGuard)(nil)
)

// guard puts a txGuard between tx, a transaction the store began, and whoever uses it
// next, on the dialects that need one.
func (s *Store) guard(tx *gorm.DB) *gorm.DB {
	if s.dialect == postgres {
		return tx
	}
	if inner, ok := tx.Statement.ConnPool.(gorm.Tx); ok {
		tx.Statement.ConnPool = &txGuard{tx: inner, db: s.db, dialect: s.dialect}
	}
	return tx
}

// check returns the error that refuses a statement, after looking at how the last
// query's rows ended. g.mu is held.
func (g *txGuard) check(ctx context.Context) error {
	if g.err == nil && g.rows != nil {
		if err := g.rows.Err(); err != nil {
			g.observe(ctx, err)
		}
	}
	return g.err
}

// observe rolls the transaction back if err means the database already did. g.mu is
// held.
func (g *txGuard) observe(ctx context.Context, err error) {
	if g.err != nil || !g.rolledBack(ctx, err) {
		return
	}
	g.err = fmt.Errorf("%w after this error, and no statement runs in it any more "+
		"(nothing of the request is kept; retrying the request runs it afresh): %w", ErrRolledBack, err)
	g.rows = nil
	_ = g.tx.Rollback() // ends what is left (SQLite), or confirms what the server did
}

// rolledBack reports whether err means the database rolled the whole transaction back,
// or (SQLite) may have: then the store rolls it back itself, as SQLite recommends.
func (g *txGuard) rolledBack(ctx context.Context, err error) bool {
	if g.dialect == mariadb {
		n, ok := mysqlNumber(err)
		switch {
		case !ok:
			return false
		case n == 1213: // ER_LOCK_DEADLOCK: always the whole transaction
			return true
		case n != 1205: // ER_LOCK_WAIT_TIMEOUT: the statement only, unless…
			return false
		}
		// …the server runs with innodb_rollback_on_timeout, a startup option: ask it, in
		// this session (a read, harmless in or out of the transaction). No answer: assume
		// the worst.
		var on int
		if err := g.tx.QueryRowContext(ctx, "SELECT @@innodb_rollback_on_timeout").Scan(&on); err != nil {
			return true
		}
		return on != 0
	}
	var lite interface{ Code() int }
	if !errors.As(err, &lite) {
		return false
	}
	switch lite.Code() & 0xff {
	case 5, 7, 9, 10, 13: // SQLITE_BUSY, SQLITE_NOMEM, SQLITE_INTERRUPT, SQLITE_IOERR, SQLITE_FULL
		return true
	}
	return false
}

// ExecContext implements gorm.ConnPool.
func (g *txGuard) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.check(ctx); err != nil {
		return nil, err
	}
	res, err := g.tx.ExecContext(ctx, query, args...)
	if err != nil {
		g.observe(ctx, err)
	}
	return res, err
}

// QueryContext implements gorm.ConnPool.
func (g *txGuard) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.check(ctx); err != nil {
		return nil, err
	}
	rows, err := g.tx.QueryContext(ctx, query, args...)
	if err != nil {
		g.observe(ctx, err)
		return nil, err
	}
	g.rows = rows
	return rows, nil
}

// QueryRowContext implements gorm.ConnPool. A refused query's *sql.Row carries the
// refusal (see errRow).
func (g *txGuard) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.check(ctx); err != nil {
		return errRow(err)
	}
	row := g.tx.QueryRowContext(ctx, query, args...)
	if err := row.Err(); err != nil {
		g.observe(ctx, err)
	}
	return row
}

// PrepareContext implements gorm.ConnPool.
func (g *txGuard) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.check(ctx); err != nil {
		return nil, err
	}
	stmt, err := g.tx.PrepareContext(ctx, query)
	if err != nil {
		g.observe(ctx, err)
	}
	return stmt, err
}

// StmtContext implements gorm.Tx, so that gorm keeps treating the guard as a
// transaction (a PrepareStmt session wraps it instead of going to the pool). Once the
// transaction is rolled back, the statement it returns fails with sql.ErrTxDone.
func (g *txGuard) StmtContext(ctx context.Context, stmt *sql.Stmt) *sql.Stmt {
	return g.tx.StmtContext(ctx, stmt)
}

// Commit implements gorm.TxCommitter: after a rollback by the database it sends nothing
// and returns the error wrapping ErrRolledBack.
func (g *txGuard) Commit() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.check(context.Background()); err != nil {
		return err
	}
	return g.tx.Commit()
}

// Rollback implements gorm.TxCommitter: after a rollback by the database it is done
// already, and returns nil.
func (g *txGuard) Rollback() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return nil
	}
	return g.tx.Rollback()
}

// GetDBConn implements gorm.GetDBConnector, so that MustDB(ctx).DB() still returns the
// pool, as it does on a plain GORM transaction.
func (g *txGuard) GetDBConn() (*sql.DB, error) { return g.db.DB() }

// errRow returns a *sql.Row whose Scan and Err return err: database/sql builds a Row only
// from a query, so it runs one on a database whose connector fails with err. Only a
// refused QueryRow pays for it.
func errRow(err error) *sql.Row {
	db := sql.OpenDB(failingConnector{err})
	defer db.Close()
	return db.QueryRowContext(context.Background(), "")
}

// failingConnector is a driver.Connector that fails every Connect with err.
type failingConnector struct{ err error }

func (c failingConnector) Connect(context.Context) (driver.Conn, error) { return nil, c.err }
func (c failingConnector) Driver() driver.Driver                        { return failingDriver{c.err} }

type failingDriver struct{ err error }

func (d failingDriver) Open(string) (driver.Conn, error) { return nil, d.err }
