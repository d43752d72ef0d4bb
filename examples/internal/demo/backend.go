package demo

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/pgxstore"
	"github.com/idemkit/idem/redisstore"
)

// poolSize caps the database connections of one server.
const poolSize = 8

// sqliteParams: WAL, so GETs read while a request holds the write lock; a busy timeout,
// so writers outside the key store's claims (the provider) wait for the lock instead of
// failing at once; FULL sync, because in WAL mode NORMAL syncs only at checkpoints: it
// survives a crash of the process, but a power loss may drop the last transactions that
// committed, and with them a key whose 201 the client already has. An acknowledged
// answer must be durable.
const sqliteParams = "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)&_pragma=synchronous(FULL)"

// backend is one of the ways the demo stores its data: SQLite or MySQL/MariaDB through
// GORM, or PostgreSQL through pgx or GORM; with -store redis, the payments' keys in Redis.
type backend struct {
	name    string                          // "sqlite (gorm)", "postgres (pgx)", "postgres (gorm)", "mysql (gorm)", plus Redis's
	dialect string                          // SQL dialect: kindSQLite, kindPostgres or kindMySQL
	store   storage.Store                   // the keys of the atomic routes (orders, webhooks), in the database
	migrate func(ctx context.Context) error // the key table
	// payments holds the payments' keys: store, or a redisstore with -store redis.
	payments storage.Store
	// paymentsInTx: the payments' store shares its transactions with the handler (the
	// SQL stores), so a payment's rows commit with its phase or its response.
	paymentsInTx bool
	db           querier // the plain pool: reads
	begin        func(ctx context.Context) (txQuerier, error)
	// tx returns the request's idempotency transaction (pgxstore.MustTx, gormstore.MustDB): the
	// claim's in atomic mode, a phase's inside a phase, the final one otherwise.
	tx    func(ctx context.Context) (querier, error)
	close func()
	// pool (pgx) or gorm (GORM) is the database handle, for River (receipts.go).
	pool *pgxpool.Pool
	gorm *gorm.DB
}

// openBackend connects to the database cfg names, and to Redis with -store redis, and
// returns the stores; nothing is created yet. go-redis's own messages (a failed dial,
// say) go to log.
func openBackend(ctx context.Context, cfg Config, log *slog.Logger) (*backend, error) {
	b, err := openDatabase(ctx, cfg)
	if err != nil {
		return nil, err
	}
	b.payments, b.paymentsInTx = b.store, true
	if cfg.Store != StoreRedis {
		return b, nil
	}
	redis.SetLogger(redisLog{log}) // the process's one client: go-redis's logger is global
	client := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:                 cfg.RedisAddrs(), // one address: one server; several: a cluster's nodes
		PoolSize:              poolSize,
		ContextTimeoutEnabled: true, // the engine's StoreTimeout bounds every call, so a paused Redis answers 503
	})
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		b.close()
		return nil, fmt.Errorf("connect to Redis at %s: %w", cfg.Redis, err)
	}
	opts := []redisstore.Option{redisstore.WithPrefix(cfg.RedisPrefix)}
	if cfg.RedisReplicaAcks > 0 {
		opts = append(opts, redisstore.WithReplicaAcks(cfg.RedisReplicaAcks, time.Second))
	}
	b.payments, b.paymentsInTx = redisstore.New(client, opts...), false
	b.name += fmt.Sprintf("; payments' keys on redis %s, prefix %q, %d replica acks", cfg.Redis, cfg.RedisPrefix, cfg.RedisReplicaAcks)
	closeDB := b.close
	b.close = func() {
		_ = client.Close()
		closeDB()
	}
	return b, nil
}

// redisLog writes go-redis's messages to the server's log, at Warn.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, fmt.Sprintf(format, v...)) // go-redis starts each with "redis: "
}

// openDatabase connects to the database cfg names and returns its store.
func openDatabase(ctx context.Context, cfg Config) (*backend, error) {
	kind, target := cfg.database()
	switch {
	case kind == kindSQLite:
		db, err := gorm.Open(sqlite.Open(target+sqliteParams), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			return nil, fmt.Errorf("open SQLite file %s: %w", target, err)
		}
		return gormBackend("sqlite (gorm) file "+target, kindSQLite, db)
	case kind == kindMySQL:
		db, err := gorm.Open(mysql.Open(target), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			return nil, fmt.Errorf("connect to MySQL at %s: %w", redact(target), err)
		}
		return gormBackend("mysql (gorm)", kindMySQL, db)
	case cfg.Store == StoreGorm:
		db, err := gorm.Open(postgres.Open(target), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			return nil, fmt.Errorf("connect to PostgreSQL at %s: %w", redact(target), err)
		}
		return gormBackend("postgres (gorm)", kindPostgres, db)
	default:
		pc, err := pgxpool.ParseConfig(target)
		if err != nil {
			return nil, fmt.Errorf("parse DATABASE_URL %s: %w", redact(target), err)
		}
		pc.MaxConns = poolSize
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err == nil {
			err = pool.Ping(ctx)
		}
		if err != nil {
			if pool != nil {
				pool.Close()
			}
			return nil, fmt.Errorf("connect to PostgreSQL at %s: %w", redact(target), err)
		}
		store := pgxstore.New(pool)
		return &backend{
			name:    "postgres (pgx)",
			dialect: kindPostgres,
			store:   store,
			migrate: store.Migrate,
			db:      pgxQ{pool},
			begin: func(ctx context.Context) (txQuerier, error) {
				tx, err := pool.Begin(ctx)
				if err != nil {
					return nil, err
				}
				return pgxTx{pgxQ{tx}, tx}, nil
			},
			tx: func(ctx context.Context) (querier, error) {
				tx, ok := pgxstore.TxFromContext(ctx)
				if !ok {
					return nil, pgxstore.ErrNoTx
				}
				return pgxQ{tx}, nil
			},
			close: pool.Close,
			pool:  pool,
		}, nil
	}
}

func gormBackend(name, dialect string, db *gorm.DB) (*backend, error) {
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxOpenConns(poolSize)
	sqlDB.SetConnMaxIdleTime(time.Minute)
	if err := sqlDB.Ping(); err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	store := gormstore.New(db)
	return &backend{
		name:    name,
		dialect: dialect,
		store:   store,
		migrate: store.Migrate,
		db:      gormQ{db},
		begin: func(ctx context.Context) (txQuerier, error) {
			tx := db.WithContext(ctx).Begin()
			if tx.Error != nil {
				return nil, tx.Error
			}
			return gormTx{gormQ{tx}}, nil
		},
		tx: func(ctx context.Context) (querier, error) {
			tx, ok := gormstore.DBFromContext(ctx)
			switch {
			case !ok:
				return nil, gormstore.ErrNoTx
			case tx.Error != nil: // the transaction could not be opened
				return nil, tx.Error
			}
			return gormQ{tx}, nil
		},
		close: func() { _ = sqlDB.Close() },
		gorm:  db,
	}, nil
}

// createdAt is the value a created_at column stores: a timestamptz on PostgreSQL, a
// DATETIME(3) in UTC on MySQL, the printed text on SQLite (which has no time type).
func (b *backend) createdAt(t time.Time) any {
	if b.dialect == kindSQLite {
		return formatTime(t)
	}
	return t
}

// insertID runs an INSERT of one row on q and returns the row's generated id: with
// RETURNING id on PostgreSQL and SQLite, with LAST_INSERT_ID() on MySQL, which has no
// RETURNING (MariaDB has; MySQL has not). q is a transaction, so the second statement
// runs on the first one's connection.
func (b *backend) insertID(ctx context.Context, q querier, insert string, args ...any) (int64, error) {
	var id int64
	if b.dialect != kindMySQL {
		err := q.QueryRow(ctx, insert+` RETURNING id`, args...).Scan(&id)
		return id, err
	}
	if err := q.Exec(ctx, insert, args...); err != nil {
		return 0, err
	}
	err := q.QueryRow(ctx, `SELECT LAST_INSERT_ID()`).Scan(&id)
	return id, err
}

// paymentTx runs fn on the transaction a payment's writes belong in. When the payments'
// keys are in the database that is the request's idempotency transaction (tx): a
// phase's, or the final one, so the rows commit together with the recovery point or the
// recorded response. Redis has no transaction to share: fn runs in one of its own, which
// commits before the point or the response reaches Redis, and a crash between the two
// makes the retry run fn again. That is why every write of a payment is idempotent by
// itself (an upsert or an insert-or-get on a unique key), whichever store holds the keys.
func (b *backend) paymentTx(ctx context.Context, fn func(q querier) error) error {
	if b.paymentsInTx {
		tx, err := b.tx(ctx)
		if err != nil {
			return err
		}
		return fn(tx)
	}
	tx, err := b.begin(ctx)
	if err != nil {
		return err
	}
	committed := false
	defer func() {
		if !committed { // fn failed or panicked, or the commit failed
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	committed = true
	return nil
}

// upsert is the dialect's "INSERT … ON CONFLICT (cols) DO UPDATE SET col = the new
// value" (set "" for DO NOTHING), appended to an INSERT statement.
func (b *backend) upsert(conflict, set string) string {
	if b.dialect == kindMySQL {
		if set == "" {
			col, _, _ := strings.Cut(conflict, ",")
			return ` ON DUPLICATE KEY UPDATE ` + col + ` = ` + col // a no-op update: no error, no change
		}
		return ` ON DUPLICATE KEY UPDATE ` + set + ` = VALUES(` + set + `)`
	}
	if set == "" {
		return ` ON CONFLICT (` + conflict + `) DO NOTHING`
	}
	return ` ON CONFLICT (` + conflict + `) DO UPDATE SET ` + set + ` = excluded.` + set
}

// createSchema creates the business tables when missing, then the key table.
func (b *backend) createSchema(ctx context.Context) error {
	ddl := map[string][]string{kindSQLite: sqliteSchema, kindPostgres: postgresSchema, kindMySQL: mysqlSchema}[b.dialect]
	for _, stmt := range append(ddl[:len(ddl):len(ddl)], webhookSchema[b.dialect]...) {
		if err := b.db.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("create schema: %w", err)
		}
	}
	// CREATE TABLE IF NOT EXISTS keeps a payments table made by an older demo as it was.
	if err := b.db.Exec(ctx, `SELECT idempotency_key FROM payments WHERE 1 = 0`); err != nil {
		return fmt.Errorf("the payments table predates its idempotency_key column (%w): "+
			"start on a new database, or drop the old payments table", err)
	}
	if err := b.migrate(ctx); err != nil {
		return fmt.Errorf("create the key table: %w", err)
	}
	return nil
}

// The business tables. orders and payments are the API's; payment_charges records the
// charge_created phase (which provider charge a payment key got); provider_charges is the
// fake provider's own table. The payment tables are unique by (account, idempotency key),
// and the provider's by (account, derived key): each write of a payment is idempotent by
// itself (see paymentTx).
var postgresSchema = []string{
	`CREATE TABLE IF NOT EXISTS orders (
		id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
		account text NOT NULL,
		item text NOT NULL,
		quantity bigint NOT NULL CHECK (quantity >= 1),
		created_at timestamptz NOT NULL
	)`,
	`CREATE INDEX IF NOT EXISTS orders_account_id ON orders (account, id)`,
	`CREATE TABLE IF NOT EXISTS payments (
		id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
		account text NOT NULL,
		idempotency_key text NOT NULL,
		amount_cents bigint NOT NULL CHECK (amount_cents >= 1),
		currency text NOT NULL,
		charge_id text NOT NULL,
		created_at timestamptz NOT NULL,
		UNIQUE (account, idempotency_key)
	)`,
	`CREATE INDEX IF NOT EXISTS payments_account_id ON payments (account, id)`,
	`CREATE TABLE IF NOT EXISTS payment_charges (
		account text NOT NULL,
		idempotency_key text NOT NULL,
		charge_id text NOT NULL,
		PRIMARY KEY (account, idempotency_key)
	)`,
	`CREATE TABLE IF NOT EXISTS provider_charges (
		seq bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
		id text NOT NULL UNIQUE,
		account text NOT NULL,
		idempotency_key text NOT NULL,
		amount_cents bigint NOT NULL,
		currency text NOT NULL,
		created_at timestamptz NOT NULL,
		UNIQUE (account, idempotency_key)
	)`,
}

var sqliteSchema = []string{
	`CREATE TABLE IF NOT EXISTS orders (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		account TEXT NOT NULL,
		item TEXT NOT NULL,
		quantity INTEGER NOT NULL CHECK (quantity >= 1),
		created_at TEXT NOT NULL
	)`,
	`CREATE INDEX IF NOT EXISTS orders_account_id ON orders (account, id)`,
	`CREATE TABLE IF NOT EXISTS payments (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		account TEXT NOT NULL,
		idempotency_key TEXT NOT NULL,
		amount_cents INTEGER NOT NULL CHECK (amount_cents >= 1),
		currency TEXT NOT NULL,
		charge_id TEXT NOT NULL,
		created_at TEXT NOT NULL,
		UNIQUE (account, idempotency_key)
	)`,
	`CREATE INDEX IF NOT EXISTS payments_account_id ON payments (account, id)`,
	`CREATE TABLE IF NOT EXISTS payment_charges (
		account TEXT NOT NULL,
		idempotency_key TEXT NOT NULL,
		charge_id TEXT NOT NULL,
		PRIMARY KEY (account, idempotency_key)
	)`,
	`CREATE TABLE IF NOT EXISTS provider_charges (
		seq INTEGER PRIMARY KEY AUTOINCREMENT,
		id TEXT NOT NULL UNIQUE,
		account TEXT NOT NULL,
		idempotency_key TEXT NOT NULL,
		amount_cents INTEGER NOT NULL,
		currency TEXT NOT NULL,
		created_at TEXT NOT NULL,
		UNIQUE (account, idempotency_key)
	)`,
}

// mysqlSchema is for InnoDB on MySQL 8 and MariaDB 10.6 or later. Accounts and keys are
// VARBINARY, compared byte for byte like the key table's (a utf8mb4 VARCHAR would make
// "Alice" and "alice" one account); created_at holds UTC to the millisecond.
var mysqlSchema = []string{
	`CREATE TABLE IF NOT EXISTS orders (
		id BIGINT AUTO_INCREMENT PRIMARY KEY,
		account VARBINARY(255) NOT NULL,
		item TEXT NOT NULL,
		quantity BIGINT NOT NULL CHECK (quantity >= 1),
		created_at DATETIME(3) NOT NULL,
		INDEX orders_account_id (account, id)
	) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
	`CREATE TABLE IF NOT EXISTS payments (
		id BIGINT AUTO_INCREMENT PRIMARY KEY,
		account VARBINARY(255) NOT NULL,
		idempotency_key VARBINARY(255) NOT NULL,
		amount_cents BIGINT NOT NULL CHECK (amount_cents >= 1),
		currency TEXT NOT NULL,
		charge_id VARCHAR(64) NOT NULL,
		created_at DATETIME(3) NOT NULL,
		INDEX payments_account_id (account, id),
		UNIQUE KEY payments_account_key (account, idempotency_key)
	) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
	`CREATE TABLE IF NOT EXISTS payment_charges (
		account VARBINARY(255) NOT NULL,
		idempotency_key VARBINARY(255) NOT NULL,
		charge_id VARCHAR(64) NOT NULL,
		PRIMARY KEY (account, idempotency_key)
	) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
	`CREATE TABLE IF NOT EXISTS provider_charges (
		seq BIGINT AUTO_INCREMENT PRIMARY KEY,
		id VARCHAR(64) NOT NULL UNIQUE,
		account VARBINARY(255) NOT NULL,
		idempotency_key VARBINARY(300) NOT NULL,
		amount_cents BIGINT NOT NULL,
		currency TEXT NOT NULL,
		created_at DATETIME(3) NOT NULL,
		UNIQUE (account, idempotency_key)
	) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
}
