package demo

import (
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"

	"github.com/idemkit/idem/core/storage"
)

// liteErr has the shape of the SQLite driver's error.
type liteErr int

func (e liteErr) Error() string { return fmt.Sprintf("sqlite error %d", int(e)) }
func (e liteErr) Code() int     { return int(e) }

// TestBusyIsTheDatabaseWaiting: lock waits that ran out, deadlocks and serialization
// failures are answered 503 (busy); anything else is a 500.
func TestBusyIsTheDatabaseWaiting(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]bool{
		fmt.Errorf("phase: %w", storage.ErrInProgress):   true,
		fmt.Errorf("phase: %w", storage.ErrTransient):    true,
		&pgconn.PgError{Code: "55P03"}:                   true,
		&pgconn.PgError{Code: "40001"}:                   true,
		&pgconn.PgError{Code: "40P01"}:                   true,
		&pgconn.PgError{Code: "23505"}:                   false,
		&mysql.MySQLError{Number: 1205}:                  true,
		&mysql.MySQLError{Number: 1213}:                  true,
		&mysql.MySQLError{Number: 1062}:                  false,
		fmt.Errorf("insert: %w", liteErr(5)):             true,
		fmt.Errorf("insert: %w", liteErr(517)):           true, // SQLITE_BUSY_SNAPSHOT
		liteErr(6):                                       true,
		liteErr(19):                                      false, // SQLITE_CONSTRAINT
		errors.New("connection refused"):                 false,
		fmt.Errorf("x: %w", errors.New("database gone")): false,
	} {
		assert.Equal(t, want, busy(err), "%v", err)
	}
}
