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
	"github.com/redis/go-redis/v9"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/pgxstore"
	"github.com/idemkit/idem/redisstore"
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
	redisDB
)

func (d dialect) String() string {
	switch d {
	case postgres:
		return "PostgreSQL"
	case mysqlDB:
		return "MySQL/MariaDB"
	case redisDB:
		return "Redis"
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
// or a bare go-sql-driver DSN (user@tcp(host)/db); sqlite:PATH or a file path; redis://… or
// rediss://… (a Cluster: ?addr=host:port for each further node).
func parseDB(raw string) (dbURL, error) {
	if raw == "" {
		return dbURL{}, fmt.Errorf("%w: -db is required (postgres://…, mysql://…, sqlite:PATH, redis://…)", errUsage)
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
	case scheme == "redis" || scheme == "rediss":
		if _, err := redisOptions(raw); err != nil {
			return dbURL{}, fmt.Errorf("%w: -db: not a Redis URL: %w", errUsage, err)
		}
		return dbURL{dialect: redisDB, dsn: raw, shown: redact(raw)}, nil
	case strings.Contains(raw, "@tcp(") || strings.Contains(raw, "@unix("):
		return parseMySQL(raw, raw)
	case strings.HasPrefix(raw, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(raw, "sqlite:"), "//")
		if path == "" {
			return dbURL{}, fmt.Errorf("%w: -db %q: no file after sqlite:", errUsage, raw)
		}
		return dbURL{dialect: sqliteDB, dsn: path, shown: path}, nil
	case hasScheme:
		return dbURL{}, fmt.Errorf("%w: -db: scheme %q is not supported (postgres://, mysql://, sqlite:PATH, redis://)", errUsage, scheme)
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

// conn is an open database and the store on it: show, stats, migrate and sweep go through
// the store; db (nil on Redis) is for tableExists, the one question the stores do not
// answer.
type conn struct {
	url   dbURL
	table string // the table, or on Redis the key prefix
	db    *sql.DB
	store storage.Store
	// migrate is the store's Migrate (nil on Redis: nothing to create).
	migrate func(ctx context.Context) error
	close   func()
}

// open connects to u, waiting at most connectWait, and makes the store on table (on
// Redis, the key prefix) with retention. For SQLite, create says whether a missing file
// may be created (migrate) or is an error (every other command).
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
	case redisDB:
		return redisConn(ctx, u, table, retention, unreachable)
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

// redisOptions parses a Redis URL: one node (a Sentinel-managed master is one node too),
// or a Cluster when the URL names further nodes with addr= (go-redis's ParseClusterURL).
func redisOptions(raw string) (*redis.UniversalOptions, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	if u.Query().Has("addr") {
		o, err := redis.ParseClusterURL(raw)
		if err != nil {
			return nil, err
		}
		return &redis.UniversalOptions{Addrs: o.Addrs, Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig,
			IsClusterMode: true}, nil
	}
	o, err := redis.ParseURL(raw)
	if err != nil {
		return nil, err
	}
	return &redis.UniversalOptions{Addrs: []string{o.Addr}, Username: o.Username, Password: o.Password, DB: o.DB,
		TLSConfig: o.TLSConfig}, nil
}

// redisConn connects to the Redis of u and makes a redisstore with prefix.
func redisConn(ctx context.Context, u dbURL, prefix string, retention time.Duration, unreachable func(error) error) (*conn, error) {
	o, err := redisOptions(u.dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: -db: %w", errUsage, err)
	}
	o.DialTimeout, o.ContextTimeoutEnabled, o.MaxRetries = connectWait, true, -1
	client := redis.NewUniversalClient(o)
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		return nil, unreachable(err)
	}
	st := redisstore.New(client, redisstore.WithPrefix(prefix), redisstore.WithRetention(retention))
	return &conn{url: u, table: prefix, store: st, close: func() { _ = client.Close() }}, nil
}
