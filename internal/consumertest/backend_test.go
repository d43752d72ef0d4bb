package consumertest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"

	"github.com/glebarez/sqlite"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgxstore"
)

// The stores under test.
const (
	kindPgx          = "pgxstore/postgres"
	kindGormPostgres = "gormstore/postgres"
	kindGormSQLite   = "gormstore/sqlite"
)

var kinds = []string{kindPgx, kindGormPostgres, kindGormSQLite}

const startPostgres = "start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"

// spec names one test's database, so that a child process opens the same one.
type spec struct {
	Kind string
	DSN  string // a PostgreSQL URL whose search_path is the test's schema, or a SQLite file
}

// backend is a store whose database also holds the business table applied: one row per
// application of a message, with no unique constraint, so that applying a message twice
// shows as two rows instead of failing.
type backend struct {
	store storage.Store
	// apply inserts the message's row through the transaction ctx carries (the claim's,
	// in atomic mode), as a consumer's business write does.
	apply func(ctx context.Context, msgID string, payload []byte) error
	// count reads what committed: rows, and distinct message IDs among them.
	count func(ctx context.Context) (rows, distinct int, err error)
	// rowsOf counts the committed rows of one message.
	rowsOf func(ctx context.Context, msgID string) (int, error)
	close  func()
}

// appliedRow is the business row on gormstore.
type appliedRow struct {
	ID      int64
	MsgID   string `gorm:"not null"`
	Payload string `gorm:"not null"`
}

func (appliedRow) TableName() string { return "applied" }

// setup creates a database of its own for the test (a PostgreSQL schema, dropped at
// cleanup, or a SQLite file), migrates the key table and creates applied, and returns
// its spec and a backend on it for the test process.
func setup(t *testing.T, kind string) (spec, *backend) {
	t.Helper()
	s := spec{Kind: kind}
	ctx := t.Context()
	if kind == kindGormSQLite {
		// WAL and synchronous FULL, as gormstore's docs recommend (NORMAL may lose the
		// last commits on a power cut).
		s.DSN = testdb.SQLitePath(t) + "?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)"
	} else {
		u, err := url.Parse(testdb.PostgresURL())
		require.NoError(t, err)
		schema := testdb.Name("t")
		q := u.Query()
		q.Set("search_path", schema)
		// Commits return before the WAL is flushed: the tests crash consumers, never the
		// server, so nothing they check depends on the flush, and 1,300 commits a test
		// would otherwise wait for the disk 1,300 times.
		q.Set("synchronous_commit", "off")
		u.RawQuery = q.Encode()
		s.DSN = u.String()
		admin, err := pgxpool.New(ctx, testdb.PostgresURL())
		require.NoError(t, err)
		if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
			admin.Close()
			t.Fatalf("PostgreSQL at %s: create the test's schema: %v; %s", testdb.PostgresURL(), err, startPostgres)
		}
		t.Cleanup(func() {
			_, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			admin.Close()
		})
	}
	b, err := open(ctx, s, true)
	require.NoError(t, err)
	t.Cleanup(b.close)
	return s, b
}

// open opens the backend s names; migrate creates the tables (the test process does, a
// child never). It takes no *testing.T: child processes open backends too.
func open(ctx context.Context, s spec, migrate bool) (*backend, error) {
	switch s.Kind {
	case kindPgx:
		return openPgx(ctx, s, migrate)
	case kindGormPostgres:
		return openGorm(ctx, postgres.Open(s.DSN), migrate)
	case kindGormSQLite:
		return openGorm(ctx, sqlite.Open(s.DSN), migrate)
	}
	return nil, fmt.Errorf("unknown backend %q", s.Kind)
}

func openPgx(ctx context.Context, s spec, migrate bool) (*backend, error) {
	cfg, err := pgxpool.ParseConfig(s.DSN)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 4 // the server is shared with other test runs
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL at %s is unreachable (%w); %s", testdb.PostgresURL(), err, startPostgres)
	}
	store := pgxstore.New(pool)
	if migrate {
		if err := store.Migrate(ctx); err != nil {
			pool.Close()
			return nil, err
		}
		if _, err := pool.Exec(ctx, `CREATE TABLE applied (id bigserial PRIMARY KEY, msg_id text NOT NULL, payload text NOT NULL)`); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return &backend{
		store: store,
		apply: func(ctx context.Context, msgID string, payload []byte) error {
			_, err := pgxstore.MustTx(ctx).Exec(ctx, `INSERT INTO applied (msg_id, payload) VALUES ($1, $2)`, msgID, string(payload))
			return err
		},
		count: func(ctx context.Context) (rows, distinct int, err error) {
			err = pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT msg_id) FROM applied`).Scan(&rows, &distinct)
			return rows, distinct, err
		},
		rowsOf: func(ctx context.Context, msgID string) (n int, err error) {
			err = pool.QueryRow(ctx, `SELECT count(*) FROM applied WHERE msg_id = $1`, msgID).Scan(&n)
			return n, err
		},
		close: pool.Close,
	}, nil
}

func openGorm(ctx context.Context, dialector gorm.Dialector, migrate bool) (*backend, error) {
	db, err := gorm.Open(dialector, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return nil, fmt.Errorf("open %s (%w); %s", dialector.Name(), err, startPostgres)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxOpenConns(4)
	if err := sqlDB.PingContext(ctx); err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("%s is unreachable (%w); %s", dialector.Name(), err, startPostgres)
	}
	store := gormstore.New(db)
	if migrate {
		if err := errors.Join(store.Migrate(ctx), db.WithContext(ctx).AutoMigrate(&appliedRow{})); err != nil {
			_ = sqlDB.Close()
			return nil, err
		}
	}
	return &backend{
		store: store,
		apply: func(ctx context.Context, msgID string, payload []byte) error {
			return gormstore.MustDB(ctx).Create(&appliedRow{MsgID: msgID, Payload: string(payload)}).Error
		},
		count: func(ctx context.Context) (rows, distinct int, err error) {
			var r struct{ NRows, NDistinct int }
			err = db.WithContext(ctx).Raw(`SELECT count(*) AS n_rows, count(DISTINCT msg_id) AS n_distinct FROM applied`).Scan(&r).Error
			return r.NRows, r.NDistinct, err
		},
		rowsOf: func(ctx context.Context, msgID string) (int, error) {
			var n int64
			err := db.WithContext(ctx).Model(&appliedRow{}).Where("msg_id = ?", msgID).Count(&n).Error
			return int(n), err
		},
		close: func() { _ = sqlDB.Close() },
	}, nil
}
