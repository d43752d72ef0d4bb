package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"
)

// querier runs SQL written with ? placeholders on one handle: a pool, the request's
// idempotency transaction, a phase's transaction, or the provider's own. The domain code
// is written once against it; pgxQ and gormQ carry it to pgx and GORM.
type querier interface {
	Exec(ctx context.Context, query string, args ...any) error
	QueryRow(ctx context.Context, query string, args ...any) row
	Query(ctx context.Context, query string, args ...any) (rows, error)
}

type row interface{ Scan(dest ...any) error }

type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// txQuerier is a transaction the domain code begins and ends itself (the provider's).
type txQuerier interface {
	querier
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// errNotFound is what a QueryRow scan returns for no row, whatever the driver.
var errNotFound = errors.New("not found")

func notFound(err error) bool {
	return errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows) || errors.Is(err, errNotFound)
}

// pgxQ runs queries on anything pgx: *pgxpool.Pool and pgx.Tx.
type pgxQ struct {
	q interface {
		Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
		Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	}
}

func (p pgxQ) Exec(ctx context.Context, query string, args ...any) error {
	_, err := p.q.Exec(ctx, dollars(query), args...)
	return err
}

func (p pgxQ) QueryRow(ctx context.Context, query string, args ...any) row {
	return p.q.QueryRow(ctx, dollars(query), args...)
}

func (p pgxQ) Query(ctx context.Context, query string, args ...any) (rows, error) {
	return p.q.Query(ctx, dollars(query), args...)
}

// pgxTx is a transaction begun on a pool.
type pgxTx struct {
	pgxQ
	tx pgx.Tx
}

func (t pgxTx) Commit(ctx context.Context) error   { return t.tx.Commit(ctx) }
func (t pgxTx) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }

// dollars turns ? placeholders into PostgreSQL's $1, $2…. The demo's SQL has no other ?.
func dollars(query string) string {
	var b strings.Builder
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(query[i])
	}
	return b.String()
}

// gormQ runs queries on a *gorm.DB: the database or a transaction. GORM binds ? in
// every dialect.
type gormQ struct{ db *gorm.DB }

func (g gormQ) Exec(ctx context.Context, query string, args ...any) error {
	return g.db.WithContext(ctx).Exec(query, args...).Error
}

func (g gormQ) QueryRow(ctx context.Context, query string, args ...any) row {
	tx := g.db.WithContext(ctx).Raw(query, args...)
	if tx.Error != nil {
		return errRow{tx.Error}
	}
	r := tx.Row()
	if r == nil {
		return errRow{fmt.Errorf("query failed: %w", tx.Error)}
	}
	return r
}

func (g gormQ) Query(ctx context.Context, query string, args ...any) (rows, error) {
	r, err := g.db.WithContext(ctx).Raw(query, args...).Rows()
	if err != nil {
		return nil, err
	}
	return sqlRows{r}, nil
}

// gormTx is a transaction begun on a *gorm.DB.
type gormTx struct{ gormQ }

func (t gormTx) Commit(context.Context) error   { return t.db.Commit().Error }
func (t gormTx) Rollback(context.Context) error { return t.db.Rollback().Error }

type errRow struct{ err error }

func (e errRow) Scan(...any) error { return e.err }

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

// stamp is a created_at column scanned into its RFC 3339 text: PostgreSQL returns a
// timestamptz as a time.Time, SQLite returns the text the demo stored.
type stamp struct{ s *string }

func (d stamp) Scan(v any) error {
	switch v := v.(type) {
	case time.Time:
		*d.s = formatTime(v)
	case string:
		*d.s = v
	case []byte:
		*d.s = string(v)
	default:
		return fmt.Errorf("created_at: unexpected %T", v)
	}
	return nil
}

// timeLayout prints created_at: RFC 3339 in UTC with exactly three fractional digits.
// Times are truncated to milliseconds before they are stored, so what a GET reads back
// prints byte for byte as the 201 did.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

// now is the creation time of a new row, at the precision it is printed.
func now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }
