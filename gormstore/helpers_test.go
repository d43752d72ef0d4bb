package gormstore_test

import (
	"testing"

	"github.com/glebarez/sqlite"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/gormstore"
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
}

var dialects = []dialect{
	{name: "postgres", open: openPostgres},
	{name: "mysql", open: openMySQL},
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

// newStores returns storetest's newStore for d: each call a migrated store with a table
// of its own.
func (d dialect) newStores(t *testing.T, opts ...gormstore.Option) func(t *testing.T) core.Store {
	var shared *gorm.DB
	if !d.perStore {
		shared = d.open(t)
	}
	return func(t *testing.T) core.Store {
		db := shared
		if db == nil {
			db = d.open(t)
		}
		return migrated(t, db, opts...)
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
