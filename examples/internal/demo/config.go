package demo

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/redisstore"
)

// Phases of a payment, in order; the names are its recovery points and the values
// -crash-after accepts.
const (
	PhaseStarted       = storage.RecoveryStarted // the key is claimed
	PhaseChargeCreated = "charge_created"        // the provider's charge is recorded locally
)

// CrashPaymentWritten is the last point -crash-after accepts, after the phases: the
// payment row is written and its 201 not yet recorded. With -store redis the row has
// committed on its own, and the retry must find it rather than write a second; with a
// SQL store it is still uncommitted, and dies with the process.
const CrashPaymentWritten = "payment_written"

// Store names, for -store and IDEM_STORE.
const (
	StorePgx   = "pgx"
	StoreGorm  = "gorm"
	StoreRedis = "redis" // the payments' keys in Redis; every other key in the database
)

// DefaultRedis is the Redis server used with -store redis when neither -redis nor
// REDIS_ADDR is set.
const DefaultRedis = "127.0.0.1:6379"

// DefaultSQLiteFile is the database used when neither -db nor DATABASE_URL is set.
const DefaultSQLiteFile = "orders.db"

// Config is an example server's configuration, from its flags and environment (a flag
// wins over its environment variable, which wins over the default).
type Config struct {
	// Addr is the listen address (-addr, ADDR). Default: 127.0.0.1:8080.
	Addr string
	// DB is the database (-db, DATABASE_URL): a postgres:// or postgresql:// URL, a
	// mysql://user:password@host:port/database URL or a go-sql-driver DSN
	// (user:password@tcp(host:port)/database) for MySQL or MariaDB, or "sqlite:PATH".
	// Default: "" (the SQLite file orders.db in the working directory).
	DB string
	// Store picks the key store (-store, IDEM_STORE). pgx or gorm: every key in the
	// database, through pgxstore or gormstore on PostgreSQL (SQLite and MySQL/MariaDB
	// always use gormstore). redis: the payments' keys in Redis (see Redis), the orders'
	// and webhooks' in the database through its default store (pgxstore on PostgreSQL,
	// gormstore otherwise). Default: pgx.
	Store string
	// Redis is the host:port of the Redis server holding the payments' keys with -store
	// redis, or a comma-separated list of a Redis Cluster's nodes (-redis, REDIS_ADDR).
	// Default: DefaultRedis (127.0.0.1:6379).
	Redis string
	// RedisReplicaAcks is how many replicas must acknowledge a payment's completion and
	// recovery points, with -store redis (redisstore.WithReplicaAcks, 1s timeout): a
	// failover then cannot take back an answer a client got (-redis-replica-acks,
	// IDEM_REDIS_REPLICA_ACKS). Default: 0 (none waited for).
	RedisReplicaAcks int
	// RedisPrefix starts the name of every Redis key the server writes with -store redis
	// (-redis-prefix, IDEM_REDIS_PREFIX), so that several servers (or tests) can share one
	// Redis; it may not hold '{' or '}'. Default: redisstore.DefaultPrefix ("idem:").
	RedisPrefix string
	// Lease is how long an in-progress payment blocks takeover (-lease, IDEM_LEASE).
	// Default: 60s.
	Lease time.Duration
	// CrashAfter makes the process exit with status 3 right after this payment phase
	// commits, before any response (-crash-after, IDEM_CRASH_AFTER): started,
	// charge_created, or payment_written (CrashPaymentWritten). Default: "" (off).
	CrashAfter string
	// Completer runs core.Completer for the payments (-completer, IDEM_COMPLETER=1): the
	// payments engine keeps each request (core.Config.KeepRequest), and a payment whose
	// client never came back after a crash is finished without it, CompleterGrace after
	// its lease ended, by a pass every CompleterInterval. Default: off.
	Completer bool
	// CompleterGrace and CompleterInterval (-completer-grace, -completer-interval).
	// Default (0): 10s and 5s.
	CompleterGrace, CompleterInterval time.Duration
	// LogLevel is the lowest level logged (-log-level, LOG_LEVEL): debug shows the
	// sweeper and every idempotency outcome. Default: info.
	LogLevel slog.Level
}

// Database kinds a Config resolves to.
const (
	kindSQLite   = "sqlite"
	kindPostgres = "postgres"
	kindMySQL    = "mysql"
)

// database returns the kind of c.DB and what to open: the SQLite file, the PostgreSQL
// URL or the MySQL DSN. A kind of "" is a setting the demo cannot use.
func (c Config) database() (kind, target string) {
	switch {
	case c.DB == "":
		return kindSQLite, DefaultSQLiteFile
	case strings.HasPrefix(c.DB, "sqlite:"):
		return kindSQLite, strings.TrimPrefix(c.DB, "sqlite:")
	case strings.HasPrefix(c.DB, "postgres://"), strings.HasPrefix(c.DB, "postgresql://"):
		return kindPostgres, c.DB
	case isMySQL(c.DB):
		if dsn, err := mysqlDSN(c.DB); err == nil {
			return kindMySQL, dsn
		}
	}
	return "", c.DB
}

// mysqlDSN turns a mysql:// URL or a go-sql-driver DSN into the DSN the demo opens:
// parseTime on and times in UTC, since the demo's created_at columns are DATETIME(3)
// holding UTC.
func mysqlDSN(s string) (string, error) {
	if rest, ok := strings.CutPrefix(s, "mysql://"); ok {
		u, err := url.Parse("mysql://" + rest)
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			return "", ue.Err // url.Error repeats the URL, password included
		}
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "3306")
		}
		cfg := mysql.NewConfig()
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
		cfg.Net, cfg.Addr, cfg.DBName = "tcp", host, strings.TrimPrefix(u.Path, "/")
		if cfg.DBName == "" {
			return "", errors.New("the URL names no database")
		}
		// The query holds driver options (tls, timeout…) as in a DSN: let the driver read them.
		parsed, err := mysql.ParseDSN(cfg.FormatDSN() + "?" + u.RawQuery)
		if err != nil {
			return "", err
		}
		s = parsed.FormatDSN()
	}
	cfg, err := mysql.ParseDSN(s)
	if err != nil {
		return "", err
	}
	if cfg.DBName == "" {
		return "", errors.New("the DSN names no database")
	}
	cfg.ParseTime, cfg.Loc = true, time.UTC
	return cfg.FormatDSN(), nil
}

// ParseConfig reads the configuration of the example called name from its arguments
// (without the program name) and the environment getenv reads. It returns flag.ErrHelp
// for -h, after printing the usage to out.
func ParseConfig(name string, args []string, getenv func(string) string, out io.Writer) (Config, error) {
	env := func(key, def string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return def
	}
	c := Config{
		Addr:        env("ADDR", "127.0.0.1:8080"),
		DB:          getenv("DATABASE_URL"),
		Store:       env("IDEM_STORE", StorePgx),
		Redis:       env("REDIS_ADDR", DefaultRedis),
		RedisPrefix: env("IDEM_REDIS_PREFIX", redisstore.DefaultPrefix),
		CrashAfter:  getenv("IDEM_CRASH_AFTER"),
	}
	acks, err := strconv.Atoi(env("IDEM_REDIS_REPLICA_ACKS", "0"))
	if err != nil {
		return Config{}, fmt.Errorf("IDEM_REDIS_REPLICA_ACKS: %w", err)
	}
	c.RedisReplicaAcks = acks
	lease, err := parseLease(env("IDEM_LEASE", "60s"))
	if err != nil {
		return Config{}, fmt.Errorf("IDEM_LEASE: %w", err)
	}
	c.Lease = lease
	if err := c.LogLevel.UnmarshalText([]byte(env("LOG_LEVEL", "info"))); err != nil {
		return Config{}, fmt.Errorf("LOG_LEVEL: %w", err)
	}

	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.Addr, "addr", c.Addr, "listen `address` (env ADDR)")
	fs.StringVar(&c.DB, "db", c.DB, "database: a postgres:// URL, a mysql:// URL or DSN (MySQL, MariaDB), or sqlite:PATH (env DATABASE_URL; default: the SQLite file "+DefaultSQLiteFile+" in the working directory)")
	fs.StringVar(&c.Store, "store", c.Store, "key store: pgx or gorm for a PostgreSQL database (SQLite and MySQL always use gorm), "+
		"or redis to keep the payments' keys in Redis and the other keys in the database (env IDEM_STORE)")
	fs.StringVar(&c.Redis, "redis", c.Redis, "Redis `host:port` holding the payments' keys with -store redis, or a Redis Cluster's nodes, comma-separated (env REDIS_ADDR)")
	fs.IntVar(&c.RedisReplicaAcks, "redis-replica-acks", c.RedisReplicaAcks, "replicas that must acknowledge a payment's completion and phases with -store redis (env IDEM_REDIS_REPLICA_ACKS)")
	fs.StringVar(&c.RedisPrefix, "redis-prefix", c.RedisPrefix, "start of every Redis key's name with -store redis (env IDEM_REDIS_PREFIX)")
	fs.Func("lease", "how long an in-progress payment blocks takeover: a `duration` such as 60s (env IDEM_LEASE; default "+c.Lease.String()+")", func(s string) error {
		d, err := parseLease(s)
		c.Lease = d
		return err
	})
	fs.StringVar(&c.CrashAfter, "crash-after", c.CrashAfter, "exit with status 3 right after this payment `phase` commits: started or charge_created, "+
		"or payment_written, after the payment row (env IDEM_CRASH_AFTER)")
	fs.BoolVar(&c.Completer, "completer", getenv("IDEM_COMPLETER") == "1" || getenv("IDEM_COMPLETER") == "true",
		"finish payments whose client never came back after a crash, without a retry (env IDEM_COMPLETER=1)")
	fs.DurationVar(&c.CompleterGrace, "completer-grace", 0, "with -completer: how long after a payment's lease ended the completer leaves it to its client (default 10s)")
	fs.DurationVar(&c.CompleterInterval, "completer-interval", 0, "with -completer: time between the completer's passes (default 5s)")
	fs.TextVar(&c.LogLevel, "log-level", c.LogLevel, "lowest `level` logged: debug, info, warn or error (env LOG_LEVEL)")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var unused error // a Redis flag given without -store redis would silently do nothing
	fs.Visit(func(f *flag.Flag) {
		if (f.Name == "redis" || f.Name == "redis-prefix" || f.Name == "redis-replica-acks") && c.Store != StoreRedis && unused == nil {
			unused = fmt.Errorf("-%s: only used with -store %s, not %s", f.Name, StoreRedis, c.Store)
		}
	})
	if unused != nil {
		return Config{}, unused
	}
	return c, c.validate()
}

// parseLease accepts a Go duration ("90s", "2m") or a whole number of seconds.
func parseLease(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		n, nerr := strconv.Atoi(s)
		if nerr != nil {
			return 0, fmt.Errorf("%q is not a duration (such as 60s)", s)
		}
		d = time.Duration(n) * time.Second
	}
	return d, nil
}

func (c Config) validate() error {
	switch {
	case c.Addr == "":
		return errors.New("-addr: empty")
	case c.Store != StorePgx && c.Store != StoreGorm && c.Store != StoreRedis:
		return fmt.Errorf("-store: %q is not pgx, gorm or redis", c.Store)
	case c.Lease <= 0:
		return fmt.Errorf("-lease: %s is not positive", c.Lease)
	case c.Lease > storage.DefaultRetention:
		return fmt.Errorf("-lease: %s is longer than the keys' retention (%s)", c.Lease, storage.DefaultRetention)
	case c.CrashAfter != "" && c.CrashAfter != PhaseStarted && c.CrashAfter != PhaseChargeCreated && c.CrashAfter != CrashPaymentWritten:
		return fmt.Errorf("-crash-after: %q is not a payment phase (%s or %s) nor %s", c.CrashAfter, PhaseStarted, PhaseChargeCreated, CrashPaymentWritten)
	}
	switch kind, target := c.database(); {
	case kind == kindSQLite && target == "":
		return errors.New("-db: sqlite: needs a file path")
	case kind == "" && isMySQL(c.DB):
		_, err := mysqlDSN(c.DB)
		return fmt.Errorf("-db: %q is not a usable MySQL URL or DSN: %v", redact(c.DB), err)
	case kind == "":
		return fmt.Errorf("-db: want a postgres:// URL, a mysql:// URL or DSN, or sqlite:PATH, not %q", redact(c.DB))
	}
	if c.Store == StoreRedis {
		return c.validateRedis()
	}
	return nil
}

// validateRedis checks the settings -store redis uses.
func (c Config) validateRedis() error {
	for _, addr := range c.RedisAddrs() {
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("-redis: %q is not host:port: %v", addr, err)
		}
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return fmt.Errorf("-redis: %q: the port %q is not a number from 1 to 65535", addr, port)
		}
	}
	if c.RedisReplicaAcks < 0 {
		return fmt.Errorf("-redis-replica-acks: %d is negative", c.RedisReplicaAcks)
	}
	if strings.ContainsAny(c.RedisPrefix, "{}") {
		return fmt.Errorf("-redis-prefix: %q holds '{' or '}', which Redis Cluster would read as the key's hash tag", c.RedisPrefix)
	}
	return nil
}

// RedisAddrs returns the addresses -redis names: one server, or a cluster's nodes.
func (c Config) RedisAddrs() []string { return strings.Split(c.Redis, ",") }

// redact hides a password in a database URL or a MySQL DSN before it is printed.
func redact(s string) string {
	prefix, rest := "", s
	if scheme, r, ok := strings.Cut(s, "://"); ok {
		prefix, rest = scheme+"://", r
	}
	at := strings.LastIndex(rest, "@") // a password may hold an @; the host does not
	if at < 0 {
		return s
	}
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if !hasPass {
		return s
	}
	return prefix + user + ":xxxxx" + rest[at:]
}

// isMySQL reports whether s is meant as a MySQL database: a mysql:// URL, or a
// go-sql-driver DSN such as user:password@tcp(host:3306)/database.
func isMySQL(s string) bool {
	if strings.HasPrefix(s, "mysql://") {
		return true
	}
	return !strings.Contains(s, "://") && (strings.Contains(s, "@") || strings.Contains(s, "tcp(") || strings.Contains(s, "unix("))
}
