package echoidem_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/glebarez/sqlite"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/echoidem"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgxstore"
)

// The tests in this file run an Echo handler that inserts an order through the transaction
// the request context carries, on real stores: pgxstore on PostgreSQL, gormstore on
// PostgreSQL and on SQLite. Each test gets a schema or file of its own, holding the key
// table (idempotency_keys, the stores' default) and the business table orders.

// backend is a migrated store with an orders table next to its key table.
type backend struct {
	store core.Store
	// insert writes one order for key through the transaction ctx carries, as a handler
	// does, and returns its id.
	insert func(ctx context.Context, key string) (int64, error)
	// orders counts the committed orders of key; keys returns the committed key rows as
	// idem_key → state. Both read outside any request.
	orders func(t *testing.T, key string) int
	keys   func(t *testing.T) map[string]string
}

// backends are the stores under test, each opening a fresh database for one test.
var backends = []struct {
	name string
	open func(t *testing.T) *backend
}{
	{"pgxstore/postgres", openPgx},
	{"gormstore/postgres", func(t *testing.T) *backend {
		url, schema := postgresSchema(t)
		return openGorm(t, postgres.Open(url), schema)
	}},
	{"gormstore/sqlite", func(t *testing.T) *backend {
		// The DSN gormstore's documentation recommends: WAL, so readers never wait.
		return openGorm(t, sqlite.Open(testdb.SQLitePath(t)+"?_pragma=journal_mode(WAL)"), "")
	}},
}

// postgresSchema names a fresh schema for the test and returns a URL of testdb's server
// whose search_path is that schema; the test's own pool creates it and drops it at
// cleanup. (testdb.PostgresSchema would do it through testdb's process-wide admin pool,
// whose health-check goroutine goleak.VerifyTestMain in TestMain reports as a leak.)
func postgresSchema(t *testing.T) (connURL, schema string) {
	t.Helper()
	u, err := url.Parse(testdb.PostgresURL())
	if err != nil {
		t.Fatalf("parse %q: %v", testdb.PostgresURL(), err)
	}
	schema = testdb.Name("t")
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), schema
}

// unreachable is the failure when the test's schema cannot be created.
func unreachable(t *testing.T, err error) {
	t.Helper()
	t.Fatalf("create the test's schema on PostgreSQL at %s: %v (is the server running? "+
		"pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start)", testdb.PostgresURL(), err)
}

func openPgx(t *testing.T) *backend {
	t.Helper()
	url, schema := postgresSchema(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("parse %q: %v", url, err)
	}
	cfg.MaxConns = 8 // the server is shared with other test runs
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatalf("pgxpool: %v", err)
	}
	if _, err := pool.Exec(t.Context(), "CREATE SCHEMA "+schema); err != nil {
		pool.Close()
		unreachable(t, err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		pool.Close()
	})
	store := pgxstore.New(pool)
	if err := store.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if _, err := pool.Exec(t.Context(),
		`CREATE TABLE orders (id bigserial PRIMARY KEY, idem_key text NOT NULL, amount int NOT NULL)`); err != nil {
		t.Fatalf("create orders: %v", err)
	}
	return &backend{
		store: store,
		insert: func(ctx context.Context, key string) (id int64, err error) {
			err = pgxstore.Tx(ctx).QueryRow(ctx,
				`INSERT INTO orders (idem_key, amount) VALUES ($1, 42) RETURNING id`, key).Scan(&id)
			return id, err
		},
		orders: func(t *testing.T, key string) int {
			t.Helper()
			var n int
			if err := pool.QueryRow(context.Background(),
				`SELECT count(*) FROM orders WHERE idem_key = $1`, key).Scan(&n); err != nil {
				t.Fatalf("count orders: %v", err)
			}
			return n
		},
		keys: func(t *testing.T) map[string]string {
			t.Helper()
			rows, err := pool.Query(context.Background(), `SELECT idem_key, state FROM idempotency_keys`)
			if err != nil {
				t.Fatalf("read keys: %v", err)
			}
			defer rows.Close()
			m := map[string]string{}
			for rows.Next() {
				var k, s string
				if err := rows.Scan(&k, &s); err != nil {
					t.Fatalf("read keys: %v", err)
				}
				m[k] = s
			}
			if err := rows.Err(); err != nil {
				t.Fatalf("read keys: %v", err)
			}
			return m
		},
	}
}

// orderRow is the business row the GORM handler creates (table orders).
type orderRow struct {
	ID      int64
	IdemKey string `gorm:"not null"`
	Amount  int    `gorm:"not null"`
}

// openGorm opens dialector; schema, when not empty, is the PostgreSQL schema of the
// connection's search_path, created here and dropped at cleanup.
func openGorm(t *testing.T, dialector gorm.Dialector, schema string) *backend {
	t.Helper()
	db, err := gorm.Open(dialector, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatalf("db: %v", err)
	}
	sqlDB.SetMaxOpenConns(8) // the PostgreSQL server is shared with other test runs
	if schema != "" {
		if err := db.Exec("CREATE SCHEMA " + schema).Error; err != nil {
			_ = sqlDB.Close()
			unreachable(t, err)
		}
	}
	t.Cleanup(func() {
		if schema != "" {
			_ = db.Exec("DROP SCHEMA " + schema + " CASCADE").Error
		}
		_ = sqlDB.Close()
	})
	store := gormstore.New(db)
	if err := store.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if err := db.AutoMigrate(&orderRow{}); err != nil {
		t.Fatalf("create orders: %v", err)
	}
	return &backend{
		store: store,
		insert: func(ctx context.Context, key string) (int64, error) {
			o := orderRow{IdemKey: key, Amount: 42}
			err := gormstore.DB(ctx).Create(&o).Error
			return o.ID, err
		},
		orders: func(t *testing.T, key string) int {
			t.Helper()
			var n int64
			if err := db.Model(&orderRow{}).Where("idem_key = ?", key).Count(&n).Error; err != nil {
				t.Fatalf("count orders: %v", err)
			}
			return int(n)
		},
		keys: func(t *testing.T) map[string]string {
			t.Helper()
			var rows []struct{ IdemKey, State string }
			if err := db.Table(gormstore.DefaultTable).Select("idem_key, state").Scan(&rows).Error; err != nil {
				t.Fatalf("read keys: %v", err)
			}
			m := map[string]string{}
			for _, r := range rows {
				m[r.IdemKey] = r.State
			}
			return m
		},
	}
}

// shop is an Echo app whose POST /orders inserts an order through
// c.Request().Context()'s transaction and answers 201, behind middleware.Recover and
// echoidem.
type shop struct {
	http.Handler
	*backend
	runs     atomic.Int64 // handler runs
	inserted atomic.Int64 // inserts that succeeded inside a handler
}

// failure is what the handler does after its insert on its first run: nothing, return
// an error (Echo's 500 page), or panic. Later runs succeed.
type failure int

const (
	succeed failure = iota
	return500
	panicking
)

func newShop(t *testing.T, b *backend, fail failure) *shop {
	t.Helper()
	s := &shop{backend: b}
	e := newEcho()
	e.Use(middleware.Recover())
	e.Use(echoidem.NewWithConfig(echoidem.Config{
		Scope:  func(echo.Context) string { return "tenant" },
		Config: core.Config{Store: b.store},
	}))
	e.POST("/orders", func(c echo.Context) error {
		run := s.runs.Add(1)
		ctx := c.Request().Context()
		id, err := b.insert(ctx, core.OperationFrom(ctx).Key())
		if err != nil {
			return err
		}
		s.inserted.Add(1)
		if run == 1 {
			switch fail {
			case return500:
				return errors.New("payment provider down")
			case panicking:
				panic("after the insert")
			}
		}
		return c.JSON(http.StatusCreated, map[string]int64{"id": id, "run": run})
	})
	s.Handler = e
	return s
}

func (s *shop) post(t *testing.T, key string) resp {
	t.Helper()
	return do(t, s, http.MethodPost, "/orders", key, "", `{"item":"book"}`)
}

// check fails the test unless key has want committed orders and the key table holds
// exactly keys.
func (s *shop) check(t *testing.T, key string, want int, keys map[string]string) {
	t.Helper()
	if n := s.orders(t, key); n != want {
		t.Errorf("orders for %q: %d, want %d", key, n, want)
	}
	if got := s.keys(t); fmt.Sprint(got) != fmt.Sprint(keys) {
		t.Errorf("key rows: %v, want %v", got, keys)
	}
}

// TestStoreInsertCommitsWithKey: the handler's insert through the request's transaction
// is committed with the key: after the 201 there is exactly one order and the key row is
// completed; the replay answers the same bytes and adds no order.
func TestStoreInsertCommitsWithKey(t *testing.T) {
	t.Parallel()
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			s := newShop(t, be.open(t), succeed)
			first := s.post(t, "k1")
			if first.status != http.StatusCreated || first.replayed() {
				t.Fatalf("first: %d replayed=%t %s", first.status, first.replayed(), first.body)
			}
			s.check(t, "k1", 1, map[string]string{"k1": string(core.StateCompleted)})

			again := s.post(t, "k1")
			if again.status != http.StatusCreated || !again.replayed() || again.body != first.body {
				t.Fatalf("replay: %d replayed=%t %s, want 201 replayed %s", again.status, again.replayed(), again.body, first.body)
			}
			if r := s.runs.Load(); r != 1 {
				t.Errorf("handler ran %d times, want 1", r)
			}
			s.check(t, "k1", 1, map[string]string{"k1": string(core.StateCompleted)})
		})
	}
}

// TestStoreHandler500RollsBackInsert: a handler that inserted and then returned an error
// (Echo's 500 page) leaves neither the order nor the key; the retry with the same key
// runs again and commits exactly one order.
func TestStoreHandler500RollsBackInsert(t *testing.T) {
	t.Parallel()
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			s := newShop(t, be.open(t), return500)
			failed := s.post(t, "k1")
			if failed.status != http.StatusInternalServerError || failed.replayed() {
				t.Fatalf("failing run: %d replayed=%t %s", failed.status, failed.replayed(), failed.body)
			}
			if n := s.inserted.Load(); n != 1 {
				t.Fatalf("the failing run inserted %d orders before answering, want 1", n)
			}
			s.check(t, "k1", 0, map[string]string{})

			retry := s.post(t, "k1")
			if retry.status != http.StatusCreated || retry.replayed() {
				t.Fatalf("retry: %d replayed=%t %s", retry.status, retry.replayed(), retry.body)
			}
			if r := s.runs.Load(); r != 2 {
				t.Errorf("handler ran %d times, want 2", r)
			}
			s.check(t, "k1", 1, map[string]string{"k1": string(core.StateCompleted)})
		})
	}
}

// TestStorePanicRollsBackInsert: a handler that inserted and then panicked leaves neither
// the order nor the key, middleware.Recover answers 500, and the retry commits one order.
func TestStorePanicRollsBackInsert(t *testing.T) {
	t.Parallel()
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			s := newShop(t, be.open(t), panicking)
			failed := s.post(t, "k1")
			if failed.status != http.StatusInternalServerError || failed.replayed() {
				t.Fatalf("panicking run: %d replayed=%t %s", failed.status, failed.replayed(), failed.body)
			}
			if n := s.inserted.Load(); n != 1 {
				t.Fatalf("the panicking run inserted %d orders before panicking, want 1", n)
			}
			s.check(t, "k1", 0, map[string]string{})

			retry := s.post(t, "k1")
			if retry.status != http.StatusCreated || retry.replayed() {
				t.Fatalf("retry: %d replayed=%t %s", retry.status, retry.replayed(), retry.body)
			}
			s.check(t, "k1", 1, map[string]string{"k1": string(core.StateCompleted)})
		})
	}
}

// TestStoreParallelDuplicatesInsertOnce: 20 identical requests at once commit one order.
// One of them runs the handler; the others replay its answer, or get 409 with
// Retry-After when the store's lock wait ran out first.
func TestStoreParallelDuplicatesInsertOnce(t *testing.T) {
	t.Parallel()
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			s := newShop(t, be.open(t), succeed)
			const n = 20
			res := make([]resp, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range res {
				wg.Go(func() {
					<-start
					res[i] = s.post(t, "dup")
				})
			}
			close(start)
			wg.Wait()

			var original string
			firsts, replays, conflicts := 0, 0, 0
			for _, r := range res {
				switch {
				case r.status == http.StatusCreated && !r.replayed():
					firsts++
					original = r.body
				case r.status == http.StatusCreated:
					replays++
				case r.status == http.StatusConflict && r.header.Get("Retry-After") != "":
					conflicts++
				default:
					t.Errorf("unexpected answer %d %s", r.status, r.body)
				}
			}
			if firsts != 1 {
				t.Fatalf("%d original answers, want 1 (replays %d, conflicts %d)", firsts, replays, conflicts)
			}
			for _, r := range res {
				if r.replayed() && r.body != original {
					t.Errorf("replay %s differs from the original %s", r.body, original)
				}
			}
			if r := s.runs.Load(); r != 1 {
				t.Errorf("handler ran %d times, want 1", r)
			}
			s.check(t, "dup", 1, map[string]string{"dup": string(core.StateCompleted)})
			t.Logf("1 original, %d replays, %d conflicts", replays, conflicts)
		})
	}
}
