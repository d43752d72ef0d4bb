package gormstore

import (
	"database/sql"
	"errors"
	"fmt"

	"gorm.io/gorm"
)

// ErrNotSQLTx is wrapped by SQLTx's error when the *gorm.DB it is given runs on no
// database/sql transaction (a plain database handle, or a driver of its own).
var ErrNotSQLTx = errors.New("gormstore: no *sql.Tx under this *gorm.DB")

// SQLTx returns the *sql.Tx under db, a transaction GORM runs on: the one MustDB(ctx)
// returns (the request's, or the phase's), one set with WithTx, or any GORM transaction.
// It is for libraries that take a *sql.Tx, such as River's riverdatabasesql driver, so
// that what they write commits or rolls back with the handler's other writes:
//
//	tx, err := gormstore.SQLTx(gormstore.MustDB(ctx))
//	if err != nil {
//		return err
//	}
//	_, err = client.InsertTx(ctx, tx, args, nil) // a *river.Client[*sql.Tx]
//
// The store still ends the transaction: do not Commit or Rollback the *sql.Tx (the refusal
// of ErrTxOwned does not reach it). Statements sent on it directly bypass what GORM adds (its
// logger, its callbacks) and, on MySQL/MariaDB and SQLite, the store's check for a
// transaction the database rolled back on its own (ErrRolledBack). It returns db.Error when
// db carries one (a transaction that could not be opened, or has ended).
func SQLTx(db *gorm.DB) (*sql.Tx, error) {
	if db.Error != nil {
		return nil, db.Error
	}
	pool := db.Statement.ConnPool
	for {
		switch p := pool.(type) {
		case *sql.Tx:
			return p, nil
		case *ownedTx:
			pool = p.Tx
		case *txGuard:
			pool = p.tx
		case *gorm.PreparedStmtTX:
			pool = p.Tx
		default:
			return nil, fmt.Errorf("%w: its connection pool is a %T", ErrNotSQLTx, pool)
		}
	}
}
