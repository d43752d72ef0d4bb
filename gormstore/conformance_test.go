package gormstore_test

import (
	"context"
	"database/sql"
	"net/url"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/core/storetest"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/internal/testdb"
)

// TestConformance runs core/storetest on each dialect at the database's default
// isolation (READ COMMITTED on PostgreSQL, REPEATABLE READ on MariaDB), with the default
// atomic claim (on PostgreSQL the single write). SQLite runs both modes too.
func TestConformance(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			storetest.RunHarness(t, d.harness(t))
		})
	}
}

// TestConformanceIsolation runs core/storetest on PostgreSQL at REPEATABLE READ, where
// twins meet serialization failures: the path distributed PostgreSQL engines take.
func TestConformanceIsolation(t *testing.T) {
	t.Run("postgres/"+sql.LevelRepeatableRead.String(), func(t *testing.T) {
		t.Parallel()
		storetest.RunHarness(t, dialects[0].harness(t, gormstore.WithIsolation(sql.LevelRepeatableRead)))
	})
}

// TestConformanceRowFirst runs core/storetest on PostgreSQL with WithClaimRowFirst (the
// started key row written first, then updated to completed) at READ COMMITTED. (TestConformance
// runs PostgreSQL's default claim, the single write: the key's advisory lock, the
// completed row inserted once. At REPEATABLE READ, TestConformanceIsolation, both claim
// with the row first.)
func TestConformanceRowFirst(t *testing.T) {
	t.Run("postgres/"+sql.LevelReadCommitted.String(), func(t *testing.T) {
		t.Parallel()
		storetest.RunHarness(t, dialects[0].harness(t, gormstore.WithClaimRowFirst(), gormstore.WithIsolation(sql.LevelReadCommitted)))
	})
}

// harness is storetest's Harness for d: each subject a migrated store with a key table
// and an orders table of its own, reached through gormstore.MustDB; on PostgreSQL and MariaDB
// a store behind a fault proxy for the stall and lost-reply tests. (SQLite is a file in the process:
// nothing between the store and it can stop answering.)
func (d dialect) harness(t *testing.T, opts ...gormstore.Option) storetest.Harness {
	newStores := d.newStores(t, opts...)
	h := storetest.Harness{New: func(t *testing.T) storetest.Subject {
		store, db := newStores(t)
		return storetest.Subject{Store: store, Tx: ordersTx(t, db)}
	}}
	if d.proxied != nil {
		h.Stalling = func(t *testing.T) (storage.Store, func() func()) {
			p, err := d.proxyListen()
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close() })
			db := d.proxied(t, p.Addr())
			sqlDB, err := db.DB()
			require.NoError(t, err)
			sqlDB.SetMaxOpenConns(4) // a stall test holds one or two: the servers are shared
			return migrated(t, db, opts...), func() func() { p.Stall(); return p.Resume }
		}
		h.LosingReplies = func(t *testing.T) (storage.Store, func() <-chan struct{}) {
			p, err := d.proxyListen()
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close() })
			return migrated(t, d.proxied(t, p.Addr()), opts...), p.LoseNextReply
		}
	}
	return h
}

// ordersTx is storetest's TxHooks on a fresh orders table of db: rows written through
// gormstore.MustDB, committed ones counted on db.
func ordersTx(t *testing.T, db *gorm.DB) *storetest.TxHooks {
	table := testdb.Name("orders")
	require.NoError(t, db.Table(table).AutoMigrate(&order{}), "migrate the orders table")
	return &storetest.TxHooks{
		Write: func(ctx context.Context, label string) error {
			tx, err := requestDB(ctx)
			if err != nil {
				return err
			}
			return tx.Table(table).Create(&order{Ref: label}).Error
		},
		Count: func(ctx context.Context, label string) (int, error) {
			var n int64
			err := db.WithContext(ctx).Table(table).Where("ref = ?", label).Count(&n).Error
			return int(n), err
		},
		Commit: func(ctx context.Context) error {
			tx, err := requestDB(ctx)
			if err != nil {
				return err
			}
			return tx.Commit().Error
		},
		Rollback: func(ctx context.Context) error {
			tx, err := requestDB(ctx)
			if err != nil {
				return err
			}
			return tx.Rollback().Error
		},
	}
}

// requestDB is the request's transaction, or the error that it has none or could not be
// opened.
func requestDB(ctx context.Context) (*gorm.DB, error) {
	tx, ok := gormstore.DBFromContext(ctx)
	switch {
	case !ok:
		return nil, gormstore.ErrNoTx
	case tx.Error != nil:
		return nil, tx.Error
	}
	return tx, nil
}

// openPostgresAt opens a fresh PostgreSQL schema through the server address addr (a
// proxy's).
func openPostgresAt(t testing.TB, addr string) *gorm.DB {
	t.Helper()
	raw, _ := testdb.PostgresSchema(t)
	u, err := url.Parse(raw)
	require.NoError(t, err)
	u.Host = addr
	return finish(t, postgres.Open(u.String()))
}

// openMySQLAt opens a fresh MariaDB database through the server address addr (a
// proxy's).
func openMySQLAt(t testing.TB, addr string) *gorm.DB {
	t.Helper()
	dsn, _ := testdb.MySQLDatabase(t)
	cfg, err := gomysql.ParseDSN(dsn)
	require.NoError(t, err)
	cfg.Addr = addr
	return finish(t, mysql.Open(cfg.FormatDSN()))
}

// postgresServer returns the host:port of the PostgreSQL server tests use.
func postgresServer() string {
	u, err := url.Parse(testdb.PostgresURL())
	if err != nil {
		panic(err)
	}
	return u.Host
}

// mysqlServer returns the host:port of the MariaDB server tests use.
func mysqlServer() string {
	cfg, err := gomysql.ParseDSN(testdb.MySQLDSN())
	if err != nil {
		panic(err)
	}
	return cfg.Addr
}
