// Package testdb gives tests their own PostgreSQL schema or MariaDB/MySQL database on the
// local servers, so tests run in parallel and re-run cleanly. Nothing is mocked: when a
// server is unreachable the test fails with a message saying how to start it.
//
// TEST_DATABASE_URL overrides the PostgreSQL server (default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable) and TEST_MYSQL_DSN the
// MariaDB/MySQL one (default root@tcp(127.0.0.1:3306)/test).
package testdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	defaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	defaultMySQL    = "root@tcp(127.0.0.1:3306)/test"
	startPostgres   = "start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"
	startMySQL      = "start it with: start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd"
)

// PostgresURL is the server tests use: TEST_DATABASE_URL or the local default.
func PostgresURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return defaultPostgres
}

// MySQLDSN is the server tests use: TEST_MYSQL_DSN or the local default.
func MySQLDSN() string {
	if d := os.Getenv("TEST_MYSQL_DSN"); d != "" {
		return d
	}
	return defaultMySQL
}

var (
	adminOnce sync.Once
	admin     *pgxpool.Pool
	adminErr  error
)

func adminPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := openAdmin()
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	return pool
}

// openAdmin opens testdb's own pool once; its error says how to start the server.
func openAdmin() (*pgxpool.Pool, error) {
	adminOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		admin, adminErr = pgxpool.New(ctx, PostgresURL())
		if adminErr == nil {
			adminErr = admin.Ping(ctx)
		}
		if adminErr != nil {
			adminErr = fmt.Errorf("PostgreSQL at %s is unreachable (%w); %s", PostgresURL(), adminErr, startPostgres)
		}
	})
	return admin, adminErr
}

// Name returns a fresh identifier with the given prefix, safe as a schema, database or
// table name in every dialect.
func Name(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

// PostgresSchema creates a schema of its own for the test, dropped at cleanup, and
// returns a connection URL whose search_path is that schema, so unqualified table names
// land in it.
func PostgresSchema(t testing.TB) (connURL, schema string) {
	t.Helper()
	pool := adminPool(t)
	schema = Name("t")
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("testdb: create schema: %v", err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
	})
	u, err := url.Parse(PostgresURL())
	if err != nil {
		t.Fatalf("testdb: parse %q: %v", PostgresURL(), err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), schema
}

// MySQLDatabase creates a database of its own for the test, dropped at cleanup, and
// returns a DSN for it (with parseTime=true).
func MySQLDatabase(t testing.TB) (dsn, database string) {
	t.Helper()
	cfg, err := mysql.ParseDSN(MySQLDSN())
	if err != nil {
		t.Fatalf("testdb: parse %q: %v", MySQLDSN(), err)
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("testdb: MariaDB/MySQL at %s is unreachable (%v); %s", MySQLDSN(), err, startMySQL)
	}
	database = Name("t")
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+database); err != nil {
		t.Fatalf("testdb: create database: %v", err)
	}
	t.Cleanup(func() {
		if db, err := sql.Open("mysql", cfg.FormatDSN()); err == nil {
			_, _ = db.Exec("DROP DATABASE IF EXISTS " + database)
			_ = db.Close()
		}
	})
	cfg.DBName = database
	cfg.ParseTime = true
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	return cfg.FormatDSN(), database
}

// SQLitePath returns a fresh SQLite file path in the test's temp dir.
func SQLitePath(t testing.TB) string {
	t.Helper()
	return strings.TrimSuffix(t.TempDir(), "/") + "/" + Name("idem") + ".db"
}
