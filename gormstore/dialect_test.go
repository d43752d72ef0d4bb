package gormstore

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core/storage"
)

// liteError stands for the SQLite driver's error, read through its Code method.
type liteError int

func (e liteError) Error() string { return fmt.Sprintf("sqlite error (%d)", int(e)) }
func (e liteError) Code() int     { return int(e) }

// numbered looks like the MySQL driver's error but is not it: mysqlNumber must not read it.
type numbered struct{ Number uint16 }

func (e *numbered) Error() string { return fmt.Sprintf("Error %d: lookalike", e.Number) }

// TestWrap: each dialect's lock-wait expiry becomes ErrInProgress, its serialization
// failures and deadlocks ErrTransient, everything else neither; the driver's error stays
// reachable, and an error caused by the caller's context is never a lock wait.
func TestWrap(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  error
		want error // nil: neither sentinel
	}{
		{&pgconn.PgError{Code: "55P03"}, storage.ErrInProgress},
		{&pgconn.PgError{Code: "57014"}, storage.ErrInProgress},
		{&pgconn.PgError{Code: "40001"}, storage.ErrTransient},
		{&pgconn.PgError{Code: "40P01"}, storage.ErrTransient},
		{&pgconn.PgError{Code: "23505"}, nil},
		{fmt.Errorf("driver: %w", &pgconn.PgError{Code: "40001"}), storage.ErrTransient},
		{&mysql.MySQLError{Number: 1205}, storage.ErrInProgress},
		{&mysql.MySQLError{Number: 1213}, storage.ErrTransient},
		{&mysql.MySQLError{Number: 1062}, nil},
		{fmt.Errorf("driver: %w", &mysql.MySQLError{Number: 1205}), storage.ErrInProgress},
		{errors.Join(errors.New("rollback"), &mysql.MySQLError{Number: 1213}), storage.ErrTransient},
		{&numbered{Number: 1205}, nil},          // recognised by its type, not its shape
		{liteError(5), storage.ErrInProgress},   // SQLITE_BUSY
		{liteError(261), storage.ErrInProgress}, // SQLITE_BUSY_RECOVERY
		{liteError(6), storage.ErrInProgress},   // SQLITE_LOCKED
		{liteError(19), nil},                    // SQLITE_CONSTRAINT
		{errors.New("database is locked"), storage.ErrInProgress},
		{errors.New("connection refused"), nil},
	}
	for _, tc := range cases {
		got := wrap(context.Background(), "claim", tc.err)
		assert.ErrorIs(t, got, tc.err, "wrap(%v) lost the driver's error", tc.err)
		for _, sentinel := range []error{storage.ErrInProgress, storage.ErrTransient} {
			assert.Equal(t, sentinel == tc.want, errors.Is(got, sentinel), "wrap(%v) = %v: errors.Is(%v)", tc.err, got, sentinel)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got := wrap(ctx, "claim", &pgconn.PgError{Code: "57014"}) // what a cancelled query reports
	assert.ErrorIs(t, got, context.Canceled, "a query cancelled with its context")
	assert.NotErrorIs(t, got, storage.ErrInProgress, "a query cancelled with its context is not a lock wait")
	assert.NoError(t, wrap(ctx, "claim", nil))
}

// TestNoMySQLDriverInTheBuild: a PostgreSQL or SQLite user's build does not compile the
// MySQL driver; the store recognises its errors and DSN without importing it.
func TestNoMySQLDriverInTheBuild(t *testing.T) {
	t.Parallel()
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, pkg := range strings.Fields(string(out)) {
		assert.False(t, pkg == mysqlDriver || strings.HasPrefix(pkg, "gorm.io/driver/"), "gormstore depends on %s", pkg)
	}
}
