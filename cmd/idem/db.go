package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/pgxstore"
)

// connectWait bounds connecting to the database: an unreachable server is an error
// after this long, not a hang.
const connectWait = 5 * time.Second

// dialect is the kind of database behind -db.
type dialect int

const (
	postgres dialect = iota + 1
	mysqlDB
	sqliteDB
)

func (d dialect) String() string {
	switch d {
	case postgres:
		return "PostgreSQL"
	case mysqlDB:
		return "MySQL/MariaDB"
	default:
		return "SQLite"
	}
}

// dbURL is a parsed -db value.
type dbURL struct {
	dialect dialect
	dsn     string // what the driver takes
	shown   string // for messages: the password masked
}

// errUsage marks an error in the command line: exit status 2.
var errUsage = errors.New("usage")

// parseDB reads -db: postgres://…; mysql://user:pass@tcp(host:port)/db, mysql://user:pass@host:port/db
// or a bare go-sql-driver DSN (user@tcp(host)/db); sqlite:PATH or a file path.
func parseDB(raw string) (dbURL, error) {
	if raw == "" {
		return dbURL{}, fmt.Errorf("%w: -db is required (postgres://…, mysql://…, sqlite:PATH)", errUsage)
	}
	scheme, rest, hasScheme := strings.Cut(raw, "://")
	switch {
	case scheme == "postgres" || scheme == "postgresql":
		if _, err := pgxpool.ParseConfig(raw); err != nil {
			return dbURL{}, fmt.Errorf("%w: -db: not a PostgreSQL URL: %w", errUsage, err)
		}
		return dbURL{dialect: postgres, dsn: raw, shown: redact(raw)}, nil
	case scheme == "mysql" || scheme == "mariadb":
		return parseMySQL(raw, rest)
	case strings.Contains(raw, "@tcp(") || strings.Contains(raw, "@unix("):
		return parseMySQL(raw, raw)
	case strings.HasPrefix(raw, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(raw, "sqlite:"), "//")
		if path == "" {
			return dbURL{}, fmt.Errorf("%w: -db %q: no file after sqlite:", errUsage, raw)
		}
		return dbURL{dialect: sqliteDB, dsn: path, shown: path}, nil
	case hasScheme:
		return dbURL{}, fmt.Errorf("%w: -db: scheme %q is not supported (postgres://, mysql://, sqlite:PATH)", errUsage, scheme)
	default: // a file path
		return dbURL{dialect: sqliteDB, dsn: raw, shown: raw}, nil
	}
}

// parseMySQL reads a go-sql-driver DSN, or the URL form mysql://user:pass@host:port/db?params.
func parseMySQL(raw, rest string) (dbURL, error) {
	var cfg *mysql.Config
	if strings.Contains(rest, "@tcp(") || strings.Contains(rest, "@unix(") || strings.HasPrefix(rest, "tcp(") {
		c, err := mysql.ParseDSN(rest)
		if err != nil {
			return dbURL{}, fmt.Errorf("%w: -db: not a MySQL DSN: %w", errUsage, err)
		}
		cfg = c
	} else {
		u, err := url.Parse(raw)
		if err != nil {
			return dbURL{}, fmt.Errorf("%w: -db: not a MySQL URL: %w", errUsage, err)
		}
		cfg = mysql.NewConfig()
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
		cfg.Net, cfg.Addr = "tcp", u.Host
		if u.Port() == "" {
			cfg.Addr = net.JoinHostPort(u.Hostname(), "3306")
		}
		cfg.DBName = strings.TrimPrefix(u.Path, "/")
		for k, vs := range u.Query() {
			if cfg.Params == nil {
				cfg.Params = map[string]string{}
			}
			cfg.Params[k] = vs[len(vs)-1]
		}
	}
	if cfg.DBName == "" {
		return dbURL{}, fmt.Errorf("%w: -db: the MySQL URL names no database (…/dbname)", errUsage)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.Timeout = connectWait
	shown := *cfg
	if shown.Passwd != "" {
		shown.Passwd = "xxxxx"
	}
	return dbURL{dialect: mysqlDB, dsn: cfg.FormatDSN(), shown: shown.FormatDSN()}, nil
}

// redact masks the password of a URL.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Redacted()
}

// conn is an open database: the store (for migrate and sweep) and a *sql.DB for the
// CLI's own reads (sql.go).
type conn struct {
	url   dbURL
	table string
	db    *sql.DB
	store storage.Store
	// migrate is the store's Migrate.
	migrate func(ctx context.Context) error
	close   func()
}

// open connects to u, waiting at most connectWait, and makes the store on table with
// retention. For SQLite, create says whether a missing file may be created (migrate) or
// is an error (every other command).
func open(ctx context.Context, u dbURL, table string, retention time.Duration, create bool) (*conn, error) {
	ctx, cancel := context.WithTimeout(ctx, connectWait)
	defer cancel()
	unreachable := func(err error) error {
		var ne net.Error
		if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("cannot reach %s at %s within %s: %w", u.dialect, u.shown, connectWait, err)
		}
		return fmt.Errorf("cannot connect to %s at %s: %w", u.dialect, u.shown, err)
	}
	switch u.dialect {
	case postgres:
		cfg, err := pgxpool.ParseConfig(u.dsn)
		if err != nil {
			return nil, fmt.Errorf("%w: -db: %w", errUsage, err)
		}
		cfg.ConnConfig.ConnectTimeout = connectWait
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, unreachable(err)
		}
		if err := pool.Ping(ctx); err != nil {
			pool.Close()
			return nil, unreachable(err)
		}
		st := pgxstore.New(pool, pgxstore.WithTable(table), pgxstore.WithRetention(retention))
		db := stdlib.OpenDBFromPool(pool)
		return &conn{url: u, table: table, db: db, store: st, migrate: st.Migrate,
			close: func() { _ = db.Close(); pool.Close() }}, nil
	case mysqlDB:
		db, err := sql.Open("mysql", u.dsn)
		if err != nil {
			return nil, fmt.Errorf("%w: -db: %w", errUsage, err)
		}
		if err := db.PingContext(ctx); err != nil {
			_ = db.Close()
			return nil, unreachable(err)
		}
		return gormConn(u, table, retention, db, gormmysql.New(gormmysql.Config{Conn: db}))
	default:
		if !create {
			if _, err := os.Stat(u.dsn); err != nil {
				return nil, fmt.Errorf("SQLite file %s: %w (run idem migrate first, or check the path)", u.dsn, err)
			}
		}
		dsn := u.dsn
		if !strings.HasPrefix(dsn, "file:") {
			dsn += "?_pragma=busy_timeout(5000)"
		}
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			return nil, fmt.Errorf("%w: -db: %w", errUsage, err)
		}
		if err := db.PingContext(ctx); err != nil {
			_ = db.Close()
			return nil, unreachable(err)
		}
		return gormConn(u, table, retention, db, &sqlite.Dialector{Conn: db})
	}
}

// gormConn makes a gormstore on db.
func gormConn(u dbURL, table string, retention time.Duration, db *sql.DB, d gorm.Dialector) (*conn, error) {
	g, err := gorm.Open(d, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open %s at %s: %w", u.dialect, u.shown, err)
	}
	st := gormstore.New(g, gormstore.WithTable(table), gormstore.WithRetention(retention))
	return &conn{url: u, table: table, db: db, store: st, migrate: st.Migrate, close: func() { _ = db.Close() }}, nil
}
