package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/jackc/pgx/v5/pgxpool"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/pgxstore"
)

// poolSize caps the database connections of one server.
const poolSize = 8

// sqliteParams: WAL, so GETs read while a request holds the write lock; a busy timeout,
// so writers outside the key store's claims (the provider) wait for the lock instead of
// failing at once; NORMAL sync, which WAL keeps crash-safe.
const sqliteParams = "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)&_pragma=synchronous(NORMAL)"

// backend is one of the three ways the demo stores its data: SQLite through GORM, or
// PostgreSQL through pgx or GORM.
type backend struct {
	name     string // "sqlite (gorm)", "postgres (pgx)", "postgres (gorm)"
	postgres bool   // SQL dialect: PostgreSQL, or else SQLite
	store    storage.Store
	migrate  func(ctx context.Context) error // the key table
	db       querier                         // the plain pool: reads
	begin    func(ctx context.Context) (txQuerier, error)
	// tx returns the request's idempotency transaction (pgxstore.Tx, gormstore.DB): the
	// claim's in atomic mode, a phase's inside a phase, the final one otherwise.
	tx    func(ctx context.Context) (querier, error)
	close func()
}

// openBackend connects to the database cfg names and returns its store; nothing is
// created yet.
func openBackend(ctx context.Context, cfg Config) (*backend, error) {
	kind, target := cfg.database()
	switch {
	case kind == kindSQLite:
		db, err := gorm.Open(sqlite.Open(target+sqliteParams), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			return nil, fmt.Errorf("open SQLite file %s: %w", target, err)
		}
		return gormBackend("sqlite (gorm) file "+target, false, db)
	case cfg.Store == StoreGorm:
		db, err := gorm.Open(postgres.Open(target), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			return nil, fmt.Errorf("connect to PostgreSQL at %s: %w", redact(target), err)
		}
		return gormBackend("postgres (gorm)", true, db)
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
			name:     "postgres (pgx)",
			postgres: true,
			store:    store,
			migrate:  store.Migrate,
			db:       pgxQ{pool},
			begin: func(ctx context.Context) (txQuerier, error) {
				tx, err := pool.Begin(ctx)
				if err != nil {
					return nil, err
				}
				return pgxTx{pgxQ{tx}, tx}, nil
			},
			tx: func(ctx context.Context) (querier, error) {
				tx, err := pgxstore.TxSafely(ctx)
				if err != nil {
					return nil, err
				}
				return pgxQ{tx}, nil
			},
			close: pool.Close,
		}, nil
	}
}

func gormBackend(name string, postgres bool, db *gorm.DB) (*backend, error) {
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
		name:     name,
		postgres: postgres,
		store:    store,
		migrate:  store.Migrate,
		db:       gormQ{db},
		begin: func(ctx context.Context) (txQuerier, error) {
			tx := db.WithContext(ctx).Begin()
			if tx.Error != nil {
				return nil, tx.Error
			}
			return gormTx{gormQ{tx}}, nil
		},
		tx: func(ctx context.Context) (querier, error) {
			tx, err := gormstore.DBSafely(ctx)
			if err != nil {
				return nil, err
			}
			return gormQ{tx}, nil
		},
		close: func() { _ = sqlDB.Close() },
	}, nil
}

// createdAt is the value a created_at column stores: a timestamptz on PostgreSQL, the
// printed text on SQLite (which has no time type).
func (b *backend) createdAt(t time.Time) any {
	if b.postgres {
		return t
	}
	return formatTime(t)
}

// createSchema creates the business tables when missing, then the key table.
func (b *backend) createSchema(ctx context.Context) error {
	ddl := sqliteSchema
	if b.postgres {
		ddl = postgresSchema
	}
	for _, stmt := range ddl {
		if err := b.db.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("create schema: %w", err)
		}
	}
	if err := b.migrate(ctx); err != nil {
		return fmt.Errorf("create the key table: %w", err)
	}
	return nil
}

// The business tables. orders and payments are the API's; payment_charges records the
// charge_created phase (which provider charge a payment key got); provider_charges is the
// fake provider's own table.
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
		amount_cents bigint NOT NULL CHECK (amount_cents >= 1),
		currency text NOT NULL,
		charge_id text NOT NULL,
		created_at timestamptz NOT NULL
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
		amount_cents INTEGER NOT NULL CHECK (amount_cents >= 1),
		currency TEXT NOT NULL,
		charge_id TEXT NOT NULL,
		created_at TEXT NOT NULL
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
