package gormstore_test

import (
	"context"
	"crypto/sha256"
	"net/http"
	"testing"
	"time"

	"github.com/glebarez/sqlite"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/internal/reliability"
	"github.com/idemkit/idem/internal/seamtest"
	"github.com/idemkit/idem/internal/testdb"
)

// poolSize caps each test's connections: PostgreSQL and MariaDB are shared with other
// test runs on this machine.
const poolSize = 16

// dialect opens a fresh database of its own for a test: a PostgreSQL schema, a MariaDB
// database or an SQLite file, dropped or deleted when the test ends.
type dialect struct {
	name string
	open func(t testing.TB) *gorm.DB
	// perStore: every store gets a database of its own (SQLite: a file, since its writers
	// serialize on the whole file); otherwise stores share one and get their own table.
	perStore bool
	// proxied opens a fresh database through the server address addr (a fault proxy's),
	// and proxyListen starts such a proxy; nil for SQLite, which has no server.
	proxied     func(t testing.TB, addr string) *gorm.DB
	proxyListen func() (*reliability.Proxy, error)
}

var dialects = []dialect{
	{name: "postgres", open: openPostgres, proxied: openPostgresAt,
		proxyListen: func() (*reliability.Proxy, error) { return reliability.Listen(postgresServer()) }},
	{name: "mysql", open: openMySQL, proxied: openMySQLAt,
		proxyListen: func() (*reliability.Proxy, error) { return reliability.ListenMySQL(mysqlServer()) }},
	{name: "sqlite", open: openSQLite, perStore: true},
}

func openPostgres(t testing.TB) *gorm.DB {
	t.Helper()
	url, _ := testdb.PostgresSchema(t)
	return finish(t, postgres.Open(url))
}

func openMySQL(t testing.TB) *gorm.DB {
	t.Helper()
	dsn, _ := testdb.MySQLDatabase(t)
	return finish(t, mysql.Open(dsn))
}

// sqliteDSNParams is what the package documentation recommends: WAL, so readers do not
// wait for the writer.
const sqliteDSNParams = "?_pragma=journal_mode(WAL)"

func openSQLite(t testing.TB) *gorm.DB {
	t.Helper()
	return finish(t, sqlite.Open(testdb.SQLitePath(t)+sqliteDSNParams))
}

func finish(t testing.TB, dialector gorm.Dialector) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(dialector, &gorm.Config{Logger: logger.Discard}) // gorm.Open keeps and changes its config
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatalf("db: %v", err)
	}
	sqlDB.SetMaxOpenConns(poolSize)
	t.Cleanup(func() { _ = sqlDB.Close() })
	return db
}

// newStores returns a maker of stores for d: each call a migrated store with a table of
// its own, and the database it is on.
func (d dialect) newStores(t *testing.T, opts ...gormstore.Option) func(t *testing.T) (storage.Store, *gorm.DB) {
	var shared *gorm.DB
	if !d.perStore {
		shared = d.open(t)
	}
	return func(t *testing.T) (storage.Store, *gorm.DB) {
		db := shared
		if db == nil {
			db = d.open(t)
		}
		return migrated(t, db, opts...), db
	}
}

// migrated returns a store on db with a fresh table.
func migrated(t testing.TB, db *gorm.DB, opts ...gormstore.Option) *gormstore.Store {
	t.Helper()
	s := gormstore.New(db, append([]gormstore.Option{gormstore.WithTable(testdb.Name("keys"))}, opts...)...)
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return s
}

// order is the business row handlers write in the tests.
type order struct {
	ID     int64  `gorm:"primaryKey"`
	Ref    string `gorm:"size:255"`
	Amount int
}

// withOrders creates the orders table on db.
func withOrders(t testing.TB, db *gorm.DB) *gorm.DB {
	t.Helper()
	if err := db.AutoMigrate(&order{}); err != nil {
		t.Fatalf("migrate orders: %v", err)
	}
	return db
}

// countOrders counts the committed orders with ref (all when ref is empty).
func countOrders(t testing.TB, db *gorm.DB, ref string) int64 {
	t.Helper()
	q := db.Model(&order{})
	if ref != "" {
		q = q.Where("ref = ?", ref)
	}
	var n int64
	if err := q.Count(&n).Error; err != nil {
		t.Fatalf("count orders: %v", err)
	}
	return n
}

// claimFor builds a claim for key in mode, with the engine's defaults.
func claimFor(key, body string, mode storage.Mode) storage.Claim {
	sum := sha256.Sum256([]byte("POST /orders\n" + body))
	return storage.Claim{Scope: "tenant", Key: key, Fingerprint: sum[:], Method: http.MethodPost, Path: "/orders",
		Mode: mode, Lease: 60 * time.Second, LockWait: 2 * time.Second, Retention: storage.DefaultRetention}
}

// mustLock claims c and requires a lock, released at the end of the test if still held.
func mustLock(t testing.TB, s storage.Store, c storage.Claim) storage.Lock {
	t.Helper()
	lock, rec, err := seamtest.Split(s.Claim(t.Context(), c))
	if err != nil || lock == nil {
		t.Fatalf("Claim(%q): lock %v, record %+v, error %v; want a lock", c.Key, lock, rec, err)
	}
	t.Cleanup(func() { _ = lock.Release(context.Background()) })
	return lock
}

// mustRecord claims c and requires a record.
func mustRecord(t testing.TB, s storage.Store, c storage.Claim) *storage.Record {
	t.Helper()
	lock, rec, err := seamtest.Split(s.Claim(t.Context(), c))
	if err != nil || rec == nil {
		if lock != nil {
			_ = lock.Release(context.Background())
		}
		t.Fatalf("Claim(%q): lock %v, error %v; want a record", c.Key, lock, err)
	}
	return rec
}

var created = &storage.Response{Status: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"ok":true}`)}

// takeOver claims c until the lease on its key has run out and the claim takes the key
// over, and returns the lock, released at the end of the test if still held. A claim
// before then must report the live lease. Waiting for the lease to run out is the point,
// and the store, on the database's clock (the application's on SQLite), is what tells.
func takeOver(t testing.TB, s storage.Store, c storage.Claim) storage.Lock {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		lock, rec, err := seamtest.Split(s.Claim(t.Context(), c))
		switch {
		case err != nil:
			t.Fatalf("Claim(%q) while waiting for the lease to run out: %v", c.Key, err)
		case lock != nil:
			t.Cleanup(func() { _ = lock.Release(context.Background()) })
			if !lock.Resumed() {
				t.Fatalf("Claim(%q) after the lease ran out got a lock that did not take over", c.Key)
			}
			return lock
		case rec == nil || rec.State != storage.StateStarted:
			t.Fatalf("Claim(%q) while the lease is live: %+v, want the started record", c.Key, rec)
		case time.Now().After(deadline):
			t.Fatalf("the lease on %q did not run out within 10s (locked until %v)", c.Key, rec.LockedUntil)
		}
		time.Sleep(5 * time.Millisecond) // polling the store
	}
}
