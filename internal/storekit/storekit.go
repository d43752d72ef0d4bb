// Package storekit opens the real stores the adapter tests run against: pgxstore on
// PostgreSQL, gormstore on PostgreSQL and on SQLite, each in a schema or file of its own
// holding the key table and a business table orders, with the operations a test needs
// to check what committed. Test support only.
package storekit

import (
	"context"
	"net/url"
	"testing"

	"github.com/glebarez/sqlite"
	"github.com/jackc/pgx/v5/pgxpool"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgxstore"
)

// Backend is a migrated store with an orders table next to its key table.
type Backend struct {
	Store storage.Store
	// Insert writes one order for key through the transaction ctx carries, as a handler
	// does, and returns its id.
	Insert func(ctx context.Context, key string) (int64, error)
	// Orders counts the committed orders of key; Keys returns the committed key rows as
	// idem_key → state. Both read outside any request.
	Orders func(t *testing.T, key string) int
	Keys   func(t *testing.T) map[string]string
}

// Backends are the stores under test, each opening a fresh database for one test.
var Backends = []struct {
	Name string
	Open func(t *testing.T) *Backend
}{
	{"pgxstore/postgres", openPgx},
	{"gormstore/postgres", func(t *testing.T) *Backend {
		url, schema := postgresSchema(t)
		return openGorm(t, postgres.Open(url), schema)
	}},
	{"gormstore/sqlite", func(t *testing.T) *Backend {
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

func openPgx(t *testing.T) *Backend {
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
	return &Backend{
		Store: store,
		Insert: func(ctx context.Context, key string) (id int64, err error) {
			err = pgxstore.MustTx(ctx).QueryRow(ctx,
				`INSERT INTO orders (idem_key, amount) VALUES ($1, 42) RETURNING id`, key).Scan(&id)
			return id, err
		},
		Orders: func(t *testing.T, key string) int {
			t.Helper()
			var n int
			if err := pool.QueryRow(context.Background(),
				`SELECT count(*) FROM orders WHERE idem_key = $1`, key).Scan(&n); err != nil {
				t.Fatalf("count orders: %v", err)
			}
			return n
		},
		Keys: func(t *testing.T) map[string]string {
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
func openGorm(t *testing.T, dialector gorm.Dialector, schema string) *Backend {
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
	return &Backend{
		Store: store,
		Insert: func(ctx context.Context, key string) (int64, error) {
			o := orderRow{IdemKey: key, Amount: 42}
			err := gormstore.MustDB(ctx).Create(&o).Error
			return o.ID, err
		},
		Orders: func(t *testing.T, key string) int {
			t.Helper()
			var n int64
			if err := db.Model(&orderRow{}).Where("idem_key = ?", key).Count(&n).Error; err != nil {
				t.Fatalf("count orders: %v", err)
			}
			return int(n)
		},
		Keys: func(t *testing.T) map[string]string {
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
