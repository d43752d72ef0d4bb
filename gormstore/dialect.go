package gormstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"reflect"

	"gorm.io/gorm"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/keyrow"
)

// dialect is the database behind the *gorm.DB, from its Dialector's name.
type dialect int

const (
	postgres dialect = iota + 1
	mariadb          // MySQL or MariaDB, InnoDB
	sqlite
)

func dialectOf(name string) (dialect, error) {
	switch name {
	case "postgres":
		return postgres, nil
	case "mysql":
		return mariadb, nil
	case "sqlite":
		return sqlite, nil
	}
	return 0, fmt.Errorf("gormstore: dialect %q is not supported (postgres, mysql and sqlite are)", name)
}

// The clock. Times travel to and from MySQL DATETIME(6) and SQLite columns as
// keyrow.WallLayout text (UTC wall clock) and are read back with keyrow.TimeScanner.
// PostgreSQL and MySQL/MariaDB use the database's clock
// (statement_timestamp(), UTC_TIMESTAMP(6)), so leases mean the same thing to every
// instance of the application. SQLite runs inside the application's process, so its
// clock is the application's: the store passes time.Now() as a parameter.

// clock returns the application's time for SQLite statements (unused elsewhere).
func (s *Store) clock() time.Time {
	if s.dialect != sqlite {
		return time.Time{}
	}
	return time.Now().UTC().Truncate(time.Microsecond)
}

// nowSQL is the SQL for "now", and its argument when it takes one.
func (s *Store) nowSQL(now time.Time) (string, []any) {
	switch s.dialect {
	case postgres:
		return "statement_timestamp()", nil
	case mariadb:
		return "UTC_TIMESTAMP(6)", nil
	default:
		return "?", []any{now.Format(keyrow.WallLayout)}
	}
}

// plusSQL is the SQL for "now + d", and its arguments.
func (s *Store) plusSQL(now time.Time, d time.Duration) (string, []any) {
	switch s.dialect {
	case postgres:
		return "statement_timestamp() + CAST(? AS bigint) * INTERVAL '1 microsecond'", []any{d.Microseconds()}
	case mariadb:
		return "UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND", []any{d.Microseconds()}
	default:
		return "?", []any{now.Add(d).Format(keyrow.WallLayout)}
	}
}

// timeArg is t as a statement argument.
func (s *Store) timeArg(t time.Time) any {
	if s.dialect == postgres {
		return t
	}
	return t.UTC().Format(keyrow.WallLayout)
}

// waitMillis is a lock wait in whole milliseconds, rounded up and at least 1: the unit of
// PostgreSQL's lock_timeout and SQLite's busy_timeout, where 0 would mean no bound.
func waitMillis(wait time.Duration) int64 {
	return int64(max((wait+time.Millisecond-1)/time.Millisecond, 1))
}

// setLockWait bounds how long the statements of a claim transaction wait for a row (or, on
// SQLite, the database) held by another transaction. It returns restore, which puts back
// the connection's own setting where the setting outlives the transaction:
//
//   - PostgreSQL: set_config('lock_timeout', …, true), that is SET LOCAL: lock_timeout is
//     set for the transaction, so in atomic mode the handler's own statements run under it
//     too (as in pgxstore), and it ends with the transaction. restore does nothing.
//   - MySQL/MariaDB: innodb_lock_wait_timeout exists per session only, in whole seconds
//     (rounded up, at least 1). The connection goes back to the pool after the transaction,
//     so restore must run before it ends; the store runs it before the handler.
//   - SQLite: busy_timeout is per connection, in milliseconds; same as MySQL.
func (s *Store) setLockWait(ctx context.Context, tx *gorm.DB, wait time.Duration) (restore func() error, err error) {
	db := tx.WithContext(ctx)
	switch s.dialect {
	case postgres:
		return noRestore, db.Exec("SELECT set_config('lock_timeout', CAST(? AS bigint) || 'ms', true)", waitMillis(wait)).Error
	case mariadb:
		secs := max((wait+time.Second-1)/time.Second, 1)
		if err := db.Exec(fmt.Sprintf("SET @idem_lock_wait = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = %d", secs)).Error; err != nil {
			return nil, err
		}
		return func() error {
			return db.Exec("SET SESSION innodb_lock_wait_timeout = @idem_lock_wait").Error
		}, nil
	default:
		var prev int64
		if err := db.Raw("PRAGMA busy_timeout").Row().Scan(&prev); err != nil {
			return nil, err
		}
		if err := db.Exec(fmt.Sprintf("PRAGMA busy_timeout = %d", waitMillis(wait))).Error; err != nil {
			return nil, err
		}
		return func() error {
			return db.Exec(fmt.Sprintf("PRAGMA busy_timeout = %d", prev)).Error
		}, nil
	}
}

// noRestore is the restore of a lock wait that ends with its transaction: PostgreSQL's.
func noRestore() error { return nil }

// errKind sorts database errors into what the engine answers.
type errKind int

const (
	kindOther     errKind = iota
	kindBusy              // a lock wait ran out: ErrInProgress (409)
	kindTransient         // serialization failure or deadlock: ErrTransient (503)
)

// classify reads the driver's error without importing any driver: pgconn.PgError has
// SQLState(), the SQLite driver's error has Code(), and the MySQL driver's error is
// recognised by its type's name (mysqlNumber).
func classify(err error) errKind {
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		switch pg.SQLState() {
		case "55P03", "57014": // lock_not_available (lock_timeout), query_canceled (statement_timeout)
			return kindBusy
		case "40001", "40P01": // serialization_failure, deadlock_detected
			return kindTransient
		}
		return kindOther
	}
	if number, ok := mysqlNumber(err); ok {
		switch number {
		case 1205: // ER_LOCK_WAIT_TIMEOUT
			return kindBusy
		case 1213: // ER_LOCK_DEADLOCK
			return kindTransient
		}
		return kindOther
	}
	var lite interface{ Code() int }
	if errors.As(err, &lite) {
		switch lite.Code() & 0xff {
		case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED
			return kindBusy
		}
		return kindOther
	}
	if msg := err.Error(); strings.Contains(msg, "database is locked") || strings.Contains(msg, "database table is locked") {
		return kindBusy
	}
	return kindOther
}

// mysqlDriver is the import path of the MySQL driver behind gorm.io/driver/mysql.
const mysqlDriver = "github.com/go-sql-driver/mysql"

// mysqlNumber returns the error number of the first *mysql.MySQLError in err's tree
// (errors.Unwrap, single and multiple). The store does not import the driver, so that
// a PostgreSQL or SQLite build does not compile it: it recognises the error by its
// type's package path and name, and reads the exported field Number by reflection.
// TestWrap holds it to the driver's real type, so a driver that renamed either fails
// the tests rather than going unrecognised.
func mysqlNumber(err error) (uint16, bool) {
	if err == nil {
		return 0, false
	}
	if v := reflect.ValueOf(err); v.Kind() == reflect.Pointer && !v.IsNil() {
		if t := v.Type().Elem(); t.Kind() == reflect.Struct && t.PkgPath() == mysqlDriver && t.Name() == "MySQLError" {
			if n := v.Elem().FieldByName("Number"); n.IsValid() && n.CanUint() {
				return uint16(n.Uint()), true
			}
		}
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return mysqlNumber(u.Unwrap())
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if n, ok := mysqlNumber(e); ok {
				return n, true
			}
		}
	}
	return 0, false
}

// clientFoundRows reports whether d is gorm.io/driver/mysql's Dialector with a DSN that
// sets clientFoundRows=true (its Config.DSNConfig, which mysql.Open and mysql.New fill
// from the DSN). It reads the fields by reflection so that the store does not import
// the MySQL driver; TestMySQLClientFoundRows holds it to the real Dialector. A Dialector
// made from an open connection (Config.Conn) has no DSN to read and passes.
func clientFoundRows(d gorm.Dialector) bool {
	v := reflect.ValueOf(d)
	for _, field := range []string{"Config", "DSNConfig", "ClientFoundRows"} {
		for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
			if v.IsNil() {
				return false
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct || field == "Config" && v.Type().PkgPath() != "gorm.io/driver/mysql" {
			return false
		}
		if v = v.FieldByName(field); !v.IsValid() {
			return false
		}
	}
	return v.Kind() == reflect.Bool && v.Bool()
}

// wrap adds the operation's name and, for errors the engine answers specially, the
// sentinel: errors.Is finds both the sentinel and the driver's error. An error caused by
// the caller's context ending is never reported as a lock wait.
func wrap(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		if errors.Is(err, ctxErr) {
			return fmt.Errorf("gormstore: %s: %w", op, err)
		}
		return fmt.Errorf("gormstore: %s: %w: %w", op, ctxErr, err)
	}
	switch classify(err) {
	case kindBusy:
		return fmt.Errorf("gormstore: %s: %w: %w", op, storage.ErrInProgress, err)
	case kindTransient:
		return fmt.Errorf("gormstore: %s: %w: %w", op, storage.ErrTransient, err)
	}
	return fmt.Errorf("gormstore: %s: %w", op, err)
}
