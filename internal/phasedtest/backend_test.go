package phasedtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgxstore"
)

// kind is a store on a database.
type kind string

const (
	kindPgx          kind = "pgx"           // pgxstore on PostgreSQL
	kindGormPostgres kind = "gorm-postgres" // gormstore on PostgreSQL
	kindGormSQLite   kind = "gorm-sqlite"   // gormstore on SQLite
)

var kinds = []kind{kindPgx, kindGormPostgres, kindGormSQLite}

// keyTable is the key table's name (both stores' default).
const keyTable = "idempotency_keys"

// spec names a backend's databases, so that a child process opens the same ones as the
// test that started it.
type spec struct {
	Kind kind
	// Schema is the test's PostgreSQL schema: it holds the provider's table for every
	// kind, and the key and business tables for the PostgreSQL kinds.
	Schema string
	// SQLite is the database file of kindGormSQLite.
	SQLite string
}

const (
	envKind   = "PHASEDTEST_KIND"
	envSchema = "PHASEDTEST_SCHEMA"
	envSQLite = "PHASEDTEST_SQLITE"
)

func (s spec) env() []string {
	return []string{envKind + "=" + string(s.Kind), envSchema + "=" + s.Schema, envSQLite + "=" + s.SQLite}
}

func specFromEnv() (spec, error) {
	s := spec{Kind: kind(os.Getenv(envKind)), Schema: os.Getenv(envSchema), SQLite: os.Getenv(envSQLite)}
	switch {
	case s.Kind != kindPgx && s.Kind != kindGormPostgres && s.Kind != kindGormSQLite:
		return s, fmt.Errorf("%s=%q: unknown kind", envKind, s.Kind)
	case s.Schema == "":
		return s, fmt.Errorf("%s is empty", envSchema)
	case s.Kind == kindGormSQLite && s.SQLite == "":
		return s, fmt.Errorf("%s is empty", envSQLite)
	}
	return s, nil
}

// conn is the little of a database the application needs, so that one handler runs on
// pgx and on GORM alike. Queries use ? placeholders.
type conn interface {
	Exec(ctx context.Context, query string, args ...any) error
	QueryRow(ctx context.Context, query string, args ...any) row
}

type row interface{ Scan(dest ...any) error }

// pgxQuerier is what pgx.Tx and *pgxpool.Pool have in common.
type pgxQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

type pgxConn struct{ q pgxQuerier }

func (c pgxConn) Exec(ctx context.Context, query string, args ...any) error {
	_, err := c.q.Exec(ctx, dollars(query), args...)
	return err
}

func (c pgxConn) QueryRow(ctx context.Context, query string, args ...any) row {
	return c.q.QueryRow(ctx, dollars(query), args...)
}

// dollars numbers the ? placeholders of query for PostgreSQL ($1, $2…). Our queries
// have no ? in literals.
func dollars(query string) string {
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

type gormConn struct{ db *gorm.DB }

func (c gormConn) Exec(ctx context.Context, query string, args ...any) error {
	return c.db.WithContext(ctx).Exec(query, args...).Error
}

func (c gormConn) QueryRow(ctx context.Context, query string, args ...any) row {
	q := c.db.WithContext(ctx).Raw(query, args...)
	if q.Error != nil {
		return errRow{q.Error}
	}
	if r := q.Row(); r != nil {
		return r
	}
	return errRow{fmt.Errorf("gorm: no row for %q: %w", query, q.Error)}
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// isNoRows reports a query that found no row, from either driver.
func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows) }

// pools are the PostgreSQL connections a backend uses: the test process shares its own
// between tests; a child server opens its own.
type pools struct {
	store  *pgxpool.Pool // pgxstore's
	gormPG *gorm.DB      // gormstore's on PostgreSQL
	aux    *pgxpool.Pool // the provider's, and the tests' look at the tables
}

// backend is a store with the application's tables beside it.
type backend struct {
	spec  spec
	store storage.Store
	// tx returns the store's transaction that ctx carries: the phase's inside a phase,
	// the request's otherwise (atomic: the claim's; phased: the final one).
	tx func(ctx context.Context) (conn, error)
	// data reaches the key and business tables outside any request, on connections of
	// its own: what another process would see.
	data     conn
	provider *provider
	// inUse counts the store's connections in use (with shared pools, every test's).
	inUse func() int
	close func()
}

// table returns the name of one of the application's tables, schema-qualified on
// PostgreSQL.
func (b *backend) table(name string) string {
	if b.spec.Kind == kindGormSQLite {
		return name
	}
	return b.spec.Schema + "." + name
}

// connect opens the backend spec names, on p, without creating anything.
func connect(s spec, p pools) (*backend, error) {
	b := &backend{spec: s, provider: &provider{pool: p.aux, table: s.Schema + ".provider_charges"}, close: func() {}}
	switch s.Kind {
	case kindPgx:
		b.store = pgxstore.New(p.store, pgxstore.WithTable(s.Schema+"."+keyTable))
		b.tx = func(ctx context.Context) (conn, error) {
			tx, ok := pgxstore.TxFromContext(ctx)
			if !ok {
				return nil, pgxstore.ErrNoTx
			}
			return pgxConn{tx}, nil
		}
		b.data = pgxConn{p.aux}
		b.inUse = func() int { return int(p.store.Stat().AcquiredConns()) }
	case kindGormPostgres:
		b.store = gormstore.New(p.gormPG, gormstore.WithTable(s.Schema+"."+keyTable))
		b.tx = gormTx
		b.data = pgxConn{p.aux}
		sqlDB, err := p.gormPG.DB()
		if err != nil {
			return nil, err
		}
		b.inUse = func() int { return sqlDB.Stats().InUse }
	case kindGormSQLite:
		// WAL, as gormstore recommends, so readers never wait for the writer.
		db, err := gorm.Open(sqlite.Open(s.SQLite+"?_pragma=journal_mode(WAL)"), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", s.SQLite, err)
		}
		sqlDB, err := db.DB()
		if err != nil {
			return nil, err
		}
		sqlDB.SetMaxOpenConns(8)
		b.close = func() { _ = sqlDB.Close() }
		b.inUse = func() int { return sqlDB.Stats().InUse }
		b.store = gormstore.New(db)
		b.tx = gormTx
		b.data = gormConn{db}
	}
	return b, nil
}

func gormTx(ctx context.Context) (conn, error) {
	db, ok := gormstore.DBFromContext(ctx)
	switch {
	case !ok:
		return nil, gormstore.ErrNoTx
	case db.Error != nil:
		return nil, db.Error
	}
	return gormConn{db}, nil
}

// newBackend gives the test a backend of its own: a fresh PostgreSQL schema (and SQLite
// file) with the key table, the business tables and the provider's table, on the shared
// pools.
func newBackend(t testing.TB, k kind) *backend {
	t.Helper()
	return newBackendOn(t, k, sharedPools(t))
}

// newBackendOn is newBackend on the pools p.
func newBackendOn(t testing.TB, k kind, p pools) *backend {
	t.Helper()
	_, schema := testdb.PostgresSchema(t)
	// Before the schema is dropped (cleanups run last first): a transaction left open
	// would block the drop for ever.
	t.Cleanup(func() { requireNoLockHolders(t, schema) })
	s := spec{Kind: k, Schema: schema}
	if k == kindGormSQLite {
		s.SQLite = testdb.SQLitePath(t)
	}
	b, err := connect(s, p)
	if err != nil {
		t.Fatalf("connect %s: %v", k, err)
	}
	t.Cleanup(b.close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.create(ctx, p.aux); err != nil {
		t.Fatalf("%s: create the tables: %v", k, err)
	}
	return b
}

// create makes the tables: the store's (Migrate), the business tables, the provider's.
//
// payment_charges, payments and outbox have no unique key on purpose: a duplicate must show up as
// a second row, not as an error that would hide it.
func (b *backend) create(ctx context.Context, aux *pgxpool.Pool) error {
	switch st := b.store.(type) {
	case *pgxstore.Store:
		if err := st.Migrate(ctx); err != nil {
			return err
		}
	case *gormstore.Store:
		if err := st.Migrate(ctx); err != nil {
			return err
		}
	}
	id, text, integer := "bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", "text", "bigint"
	if b.spec.Kind == kindGormSQLite {
		id, text, integer = "INTEGER PRIMARY KEY AUTOINCREMENT", "TEXT", "INTEGER"
	}
	for _, ddl := range []string{
		fmt.Sprintf(`CREATE TABLE %s (account %[2]s NOT NULL, idem_key %[2]s NOT NULL, charge_id %[2]s NOT NULL)`,
			b.table("payment_charges"), text),
		fmt.Sprintf(`CREATE TABLE %s (id %s, account %[3]s NOT NULL, idem_key %[3]s NOT NULL, charge_id %[3]s NOT NULL, amount_cents %[4]s NOT NULL)`,
			b.table("payments"), id, text, integer),
		fmt.Sprintf(`CREATE TABLE %s (id %s, account %[3]s NOT NULL, idem_key %[3]s NOT NULL, amount_cents %[4]s NOT NULL)`,
			b.table("orders"), id, text, integer),
		fmt.Sprintf(`CREATE TABLE %s (id %s, account %[3]s NOT NULL, message_id %[3]s NOT NULL, kind %[3]s NOT NULL, sent_at %[3]s)`,
			b.table("outbox"), id, text),
	} {
		if err := b.data.Exec(ctx, ddl); err != nil {
			return fmt.Errorf("%s: %w", ddl, err)
		}
	}
	_, err := aux.Exec(ctx, `CREATE TABLE `+b.provider.table+` (
		id text PRIMARY KEY, account text NOT NULL, idem_key text NOT NULL, amount_cents bigint NOT NULL,
		calls integer NOT NULL DEFAULT 1, UNIQUE (account, idem_key))`)
	return err
}

// tally is what the databases hold for one payment operation (one account, one key).
type tally struct {
	Charges  int    // the provider's charges for the account
	Calls    int    // the provider's calls for the account (a repeated key counts again)
	ChargeID string // the provider's charge, when there is exactly one
	Recorded int    // payment_charges rows: charges recorded by charge_created
	Payments int    // payment rows
	Payment  payment
	Outbox   int // receipt emails queued in the outbox
	// The key row: State is "" when there is none.
	State, Point string
	Leased       bool // locked_until is set
}

func (tl tally) String() string {
	return fmt.Sprintf("charges=%d calls=%d recorded=%d payments=%d outbox=%d key=%q/%q leased=%v",
		tl.Charges, tl.Calls, tl.Recorded, tl.Payments, tl.Outbox, tl.State, tl.Point, tl.Leased)
}

// count reads the tally of account's operation with key, from outside any request.
func (b *backend) count(ctx context.Context, account, key string) (tally, error) {
	var tl tally
	err := b.provider.pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(calls), 0), coalesce(min(id), '')
		FROM `+b.provider.table+` WHERE account = $1`, account).Scan(&tl.Charges, &tl.Calls, &tl.ChargeID)
	if err != nil {
		return tl, fmt.Errorf("provider charges: %w", err)
	}
	if err := b.data.QueryRow(ctx, `SELECT count(*) FROM `+b.table("payment_charges")+` WHERE account = ?`, account).Scan(&tl.Recorded); err != nil {
		return tl, fmt.Errorf("payment_charges: %w", err)
	}
	if err := b.data.QueryRow(ctx, `SELECT count(*) FROM `+b.table("payments")+` WHERE account = ?`, account).Scan(&tl.Payments); err != nil {
		return tl, fmt.Errorf("payments: %w", err)
	}
	if err := b.data.QueryRow(ctx, `SELECT count(*) FROM `+b.table("outbox")+` WHERE account = ?`, account).Scan(&tl.Outbox); err != nil {
		return tl, fmt.Errorf("outbox: %w", err)
	}
	if tl.Payments == 1 {
		var id int64
		err := b.data.QueryRow(ctx, `SELECT id, charge_id, amount_cents FROM `+b.table("payments")+` WHERE account = ?`, account).
			Scan(&id, &tl.Payment.ChargeID, &tl.Payment.AmountCents)
		if err != nil {
			return tl, fmt.Errorf("payment: %w", err)
		}
		tl.Payment.ID = strconv.FormatInt(id, 10)
	}
	err = b.data.QueryRow(ctx, `SELECT state, recovery_point, locked_until IS NOT NULL FROM `+b.table(keyTable)+
		` WHERE scope = ? AND idem_key = ?`, account, key).Scan(&tl.State, &tl.Point, &tl.Leased)
	if err != nil && !isNoRows(err) {
		return tl, fmt.Errorf("key row: %w", err)
	}
	return tl, nil
}

// mustCount is count for the test's goroutine.
func (b *backend) mustCount(t testing.TB, account, key string) tally {
	t.Helper()
	tl, err := b.count(context.Background(), account, key)
	if err != nil {
		t.Fatalf("%s: count: %v", b.spec.Kind, err)
	}
	return tl
}

// awaitLeaseEnd waits until the lease on account's key has run out by the clock the store
// judges leases by: the database's on PostgreSQL, the application's on SQLite (which
// gormstore stores as fixed-width UTC text, so the strings compare as the times do).
// Waiting for the lease to run out is the point; a sleep would guess at it.
func (b *backend) awaitLeaseEnd(t testing.TB, account, key string) {
	t.Helper()
	q := `SELECT count(*) FROM ` + b.table(keyTable) + ` WHERE scope = ? AND idem_key = ? AND state = 'started' AND locked_until <= `
	if b.spec.Kind == kindGormSQLite {
		q += "?"
	} else {
		q += "now()"
	}
	deadline := time.Now().Add(waitTimeout)
	for {
		args := []any{account, key}
		if b.spec.Kind == kindGormSQLite {
			args = append(args, time.Now().UTC().Format("2006-01-02 15:04:05.000000"))
		}
		var n int
		if err := b.data.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
			t.Fatalf("%s: the key's lease: %v", b.spec.Kind, err)
		}
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the lease on %s/%s did not run out within %v", b.spec.Kind, account, key, waitTimeout)
		}
		time.Sleep(5 * time.Millisecond) // polling the lease
	}
}

// orders counts account's orders and its key rows, from outside any request.
func (b *backend) orders(ctx context.Context, account string) (orders, keys int, err error) {
	if err := b.data.QueryRow(ctx, `SELECT count(*) FROM `+b.table("orders")+` WHERE account = ?`, account).Scan(&orders); err != nil {
		return 0, 0, err
	}
	err = b.data.QueryRow(ctx, `SELECT count(*) FROM `+b.table(keyTable)+` WHERE scope = ?`, account).Scan(&keys)
	return orders, keys, err
}

// requireNoLockHolders fails the test if, for a few seconds, some session still holds a
// lock on a table of schema: a transaction left open after every request ended. It
// terminates those sessions, so that the schema can be dropped.
func requireNoLockHolders(t testing.TB, schema string) {
	t.Helper()
	aux := sharedPools(t).aux
	ctx := context.Background()
	var pids []int32
	deadline := time.Now().Add(3 * time.Second)
	for {
		err := aux.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT l.pid), '{}')
			FROM pg_locks l JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND l.pid <> pg_backend_pid()`, schema).Scan(&pids)
		if err != nil {
			t.Errorf("pg_locks: %v", err)
			return
		}
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling pg_locks
	}
	t.Errorf("sessions %v still hold locks on the tables of schema %s after every request ended: a transaction was left open", pids, schema)
	for _, pid := range pids {
		if _, err := aux.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
			t.Logf("terminate session %d: %v", pid, err)
		}
	}
}
