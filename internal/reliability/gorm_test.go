package reliability_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/glebarez/sqlite"
	gomysql "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/internal/reliability"
	"github.com/idemkit/idem/internal/testdb"
)

// gormDialect is a database gormstore runs on in these tests.
type gormDialect int

const (
	onPostgres gormDialect = iota + 1
	onMariaDB
	onSQLite
)

func (d gormDialect) String() string {
	switch d {
	case onPostgres:
		return "PostgreSQL"
	case onMariaDB:
		return "MariaDB"
	}
	return "SQLite"
}

// sqliteParams are the demo's SQLite settings (examples/internal/demo/backend.go): WAL,
// a busy timeout, synchronous FULL.
const sqliteParams = "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)&_pragma=synchronous(FULL)"

// gormDB is one test's database for gormstore: a PostgreSQL schema, a MariaDB database
// or an SQLite file, holding the key table (gormstore's default name, made by Migrate)
// and the business table orders (without a unique constraint on the key, so a duplicate
// shows), and a small pool straight to it to look at them.
type gormDB struct {
	t       *testing.T
	dialect gormDialect
	dsn     string // straight to the database
	server  string // host:port of the server (not SQLite)
	check   *gorm.DB
}

// gormOrder is the business row.
type gormOrder struct {
	ID      int64  `gorm:"primaryKey"`
	Scope   string `gorm:"size:255;not null"`
	IdemKey string `gorm:"size:255;not null"`
	Amount  int    `gorm:"not null"`
}

func (gormOrder) TableName() string { return "orders" }

func init() {
	// The MySQL driver logs every connection the trials cut; the tests check the outcome.
	_ = gomysql.SetLogger(log.New(io.Discard, "", 0))
}

func newGormDB(t *testing.T, dialect gormDialect) *gormDB {
	t.Helper()
	d := &gormDB{t: t, dialect: dialect}
	switch dialect {
	case onPostgres:
		d.dsn, _ = testdb.PostgresSchema(t)
		u, err := url.Parse(d.dsn)
		require.NoError(t, err)
		d.server = u.Host
	case onMariaDB:
		d.dsn, _ = testdb.MySQLDatabase(t)
		cfg, err := gomysql.ParseDSN(d.dsn)
		require.NoError(t, err)
		d.server = cfg.Addr
	case onSQLite:
		d.dsn = testdb.SQLitePath(t) + sqliteParams
	}
	d.check = d.open("", 3)
	require.NoError(t, gormstore.New(d.check).Migrate(context.Background()), "migrate the key table")
	require.NoError(t, d.check.AutoMigrate(&gormOrder{}), "migrate orders")
	return d
}

// open opens a *gorm.DB of at most size connections on the database, through the proxy
// at addr unless addr is empty, closed at cleanup.
func (d *gormDB) open(addr string, size int) *gorm.DB {
	d.t.Helper()
	var dialector gorm.Dialector
	switch d.dialect {
	case onPostgres:
		u, err := url.Parse(d.dsn)
		require.NoError(d.t, err)
		if addr != "" {
			u.Host = addr
		}
		dialector = postgres.Open(u.String())
	case onMariaDB:
		cfg, err := gomysql.ParseDSN(d.dsn)
		require.NoError(d.t, err)
		if addr != "" {
			cfg.Addr = addr
		}
		dialector = mysql.Open(cfg.FormatDSN())
	case onSQLite:
		dialector = sqlite.Open(d.dsn)
	}
	db, err := gorm.Open(dialector, &gorm.Config{Logger: logger.Discard})
	require.NoError(d.t, err, "open %v", d.dialect)
	sqlDB, err := db.DB()
	require.NoError(d.t, err)
	sqlDB.SetMaxOpenConns(size)
	if addr == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(d.t, sqlDB.PingContext(ctx), "%v is unreachable", d.dialect)
	}
	d.t.Cleanup(func() { _ = sqlDB.Close() })
	return db
}

// count runs a query returning one integer, with ? placeholders.
func (d *gormDB) count(sql string, args ...any) int {
	d.t.Helper()
	var n int
	require.NoError(d.t, d.check.Raw(sql, args...).Scan(&n).Error, sql)
	return n
}

// orders is how many orders key has in scope.
func (d *gormDB) orders(scope, key string) int {
	d.t.Helper()
	return d.count(`SELECT count(*) FROM orders WHERE scope = ? AND idem_key = ?`, scope, key)
}

// gormAppConfig shapes one application instance on gormstore.
type gormAppConfig struct {
	direct   bool // no proxy (always so on SQLite)
	poolSize int  // default 4
	opts     []gormstore.Option
	deadline time.Duration // when positive, every request's context deadline
	cfg      core.Config   // Store is set by newGormApp
}

// gormApp is one application process on gormstore: a *gorm.DB (through its own proxy
// unless direct), the store on the test's key table, a core engine and an HTTP server
// creating orders in the request's transaction.
type gormApp struct {
	t     *testing.T
	db    *gormDB
	proxy *reliability.Proxy
	gdb   *gorm.DB
	store *gormstore.Store
	eng   *core.Engine
	*endpoint

	calls atomic.Int64 // handler runs
	hooks atomic.Pointer[hooks]
	log   *logRing // the engine's log lines, unless the config brought a logger
	stmts *stmtLog // the key-table statements the store sent
	// business, when set, runs after the order's INSERT in the request's transaction; a
	// non-nil error is answered as the application answers database errors.
	business atomic.Pointer[func(ctx context.Context, tx *gorm.DB, r *http.Request) error]
}

func newGormApp(t *testing.T, d *gormDB, ac gormAppConfig) *gormApp {
	t.Helper()
	a := &gormApp{t: t, db: d}
	if ac.poolSize == 0 {
		ac.poolSize = 4
	}
	addr := ""
	if !ac.direct && d.dialect != onSQLite {
		listen := reliability.Listen
		if d.dialect == onMariaDB {
			listen = reliability.ListenMySQL
		}
		p, err := listen(d.server)
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		a.proxy, addr = p, p.Addr()
	}
	a.stmts = &stmtLog{}
	a.gdb = d.open(addr, ac.poolSize).Session(&gorm.Session{Logger: a.stmts})
	a.store = gormstore.New(a.gdb, ac.opts...)
	cfg := ac.cfg
	cfg.Store = a.store
	if cfg.Logger == nil {
		a.log = &logRing{}
		cfg.Logger = slog.New(a.log)
	}
	eng, err := core.New(cfg)
	require.NoError(t, err, "core.New")
	a.eng = eng
	var h http.Handler = eng.Middleware(func(r *http.Request) string { return r.Header.Get("X-Account") })(http.HandlerFunc(a.orders))
	if ac.deadline > 0 {
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), ac.deadline)
			defer cancel()
			inner.ServeHTTP(w, r.WithContext(ctx))
		})
	}
	a.endpoint = newEndpoint(t, h)
	return a
}

func (a *gormApp) setHooks(h hooks) { a.hooks.Store(&h) }

// orders creates an order in the request's transaction (gormstore.MustDB).
func (a *gormApp) orders(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	op := core.MustOperation(ctx)
	h := a.hooks.Load()
	req, ok := startOrder(w, r, &a.calls, h)
	if !ok {
		return
	}
	tx := gormstore.MustDB(ctx)
	row := gormOrder{Scope: op.Scope(), IdemKey: op.Key(), Amount: req.Amount}
	if err := tx.Create(&row).Error; err != nil {
		appDBError(w, err)
		return
	}
	if b := a.business.Load(); b != nil {
		if err := (*b)(ctx, tx, r); err != nil {
			appDBError(w, err)
			return
		}
	}
	if h != nil && h.afterWrite != nil {
		if status := h.afterWrite(r); status != 0 {
			http.Error(w, "failed on purpose", status)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/orders/%d", row.ID))
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(order{ID: row.ID, Scope: row.Scope, Key: row.IdemKey, Amount: row.Amount})
}

// appDBError answers a failed business statement as an application would: 503 for what
// a retry may cure (MySQL's lock wait timeout 1205 and deadlock 1213, PostgreSQL's as in
// dbError), 500 otherwise. Neither is stored, so the key is released.
func appDBError(w http.ResponseWriter, err error) {
	var my *gomysql.MySQLError
	if errors.As(err, &my) && (my.Number == 1205 || my.Number == 1213) {
		w.Header().Set("Retry-After", "1")
		http.Error(w, fmt.Sprintf("try again: %d", my.Number), http.StatusServiceUnavailable)
		return
	}
	dbError(w, err)
}

// trialApp is a for runFaultTrials.
func (a *gormApp) trialApp() trialApp {
	d := a.db
	return trialApp{
		name:   "gormstore × " + d.dialect.String(),
		ep:     a.endpoint,
		proxy:  a.proxy,
		calls:  a.calls.Load,
		cuts:   wireCuts(a.proxy, a.setHooks),
		reset:  func() { a.setHooks(hooks{}) },
		form:   a.form(),
		steps:  a.stmts.steps,
		orders: d.orders,
		orderOf: func(id int64, key string) bool {
			return d.count(`SELECT count(*) FROM orders WHERE id = ? AND idem_key = ?`, id, key) == 1
		},
		duplicateKeys: func() int {
			return d.count(`SELECT count(*) FROM (SELECT scope, idem_key FROM orders GROUP BY scope, idem_key HAVING count(*) > 1) dup`)
		},
		completedKeys: func() int { return d.count(`SELECT count(*) FROM idempotency_keys WHERE state = 'completed'`) },
	}
}

// stmtLog is a GORM logger that keeps the store's claim and completion statements (each
// as GORM renders it, arguments inlined, sent or failed), so a fault trial can check which
// form of the atomic claim it cut. It logs nothing.
type stmtLog struct {
	mu   sync.Mutex
	sent []string
}

var _ logger.Interface = (*stmtLog)(nil)

func (l *stmtLog) LogMode(logger.LogLevel) logger.Interface { return l }
func (l *stmtLog) Info(context.Context, string, ...any)     {}
func (l *stmtLog) Warn(context.Context, string, ...any)     {}
func (l *stmtLog) Error(context.Context, string, ...any)    {}

// Trace keeps the statements on the key table that stepOf names.
func (l *stmtLog) Trace(_ context.Context, _ time.Time, fc func() (string, int64), _ error) {
	sql, _ := fc()
	if stepOf(sql) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent = append(l.sent, sql)
}

// steps returns the steps of the statements kept for key, and forgets every statement kept
// so far (a trial asks once, after its first request).
func (l *stmtLog) steps(key string) []step {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []step
	for _, sql := range l.sent {
		if strings.Contains(sql, "'"+key+"'") {
			out = append(out, stepOf(sql))
		}
	}
	l.sent = l.sent[:0]
	return out
}

// stepOf names a gormstore statement on the key table (PostgreSQL or MySQL, as GORM
// renders it with its arguments inlined), or 0.
func stepOf(sql string) step {
	if !strings.Contains(sql, "idempotency_keys") {
		return 0
	}
	switch {
	case strings.Contains(sql, "pg_try_advisory_xact_lock"):
		return claimLocked
	case strings.HasPrefix(sql, "INSERT") && strings.Contains(sql, "'completed'"):
		return completeInsert // its recovery point may be 'started' too
	case strings.HasPrefix(sql, "INSERT") && strings.Contains(sql, "'started'"):
		return claimRowFirst
	case strings.HasPrefix(sql, "UPDATE") && strings.Contains(sql, "SET state = 'completed'"):
		return completeUpdate
	}
	return 0
}

// form is the atomic claim the app's store makes by default: the single write on
// PostgreSQL, the key row first on MariaDB (a test with WithClaimRowFirst says so itself).
func (a *gormApp) form() form {
	if a.db.dialect == onPostgres {
		return singleWrite
	}
	return rowFirst
}

// keyState reads a key's state; ok is false when the table has no such key.
func (d *gormDB) keyState(scope, key string) (state string, ok bool) {
	d.t.Helper()
	var states []string
	require.NoError(d.t, d.check.Raw(`SELECT state FROM idempotency_keys WHERE scope = ? AND idem_key = ?`, scope, key).Scan(&states).Error)
	if len(states) == 0 {
		return "", false
	}
	return states[0], true
}

// isolation is the MariaDB session's default isolation level.
func (d *gormDB) isolation() string {
	d.t.Helper()
	var level string
	require.NoError(d.t, d.check.Raw(`SELECT @@SESSION.tx_isolation`).Scan(&level).Error)
	return level
}

// logRing is a slog.Handler keeping the last lines the engine logged (one per non-happy
// outcome, with the store's error), for a failing test to show.
type logRing struct {
	mu    sync.Mutex
	lines []string
}

const logRingSize = 20

func (l *logRing) Enabled(context.Context, slog.Level) bool { return true }

func (l *logRing) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Time.Format("15:04:05.000 ") + r.Message)
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, b.String())
	if len(l.lines) > logRingSize {
		l.lines = l.lines[len(l.lines)-logRingSize:]
	}
	return nil
}

func (l *logRing) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRing) WithGroup(string) slog.Handler      { return l }

// String is the lines kept, oldest first ("" for a nil ring).
func (l *logRing) String() string {
	if l == nil {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}
