package phasedtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idem/internal/testdb"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	code := m.Run()
	closeShared()
	if code == 0 {
		// testdb keeps its admin pool for the whole run; ours are closed.
		if err := goleak.Find(
			goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
			goleak.IgnoreTopFunction("github.com/jackc/puddle/v2.(*Pool).createIdleResources"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

const startPostgres = "start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"

// Pool sizes. PostgreSQL is shared with other test runs on this machine, so the tests
// share a few small pools (each test keeps its tables in a schema of its own and names
// them schema-qualified), and the child servers open smaller ones.
const (
	storePoolSize = 8 // pgxstore's pool, and gormstore's on PostgreSQL
	auxPoolSize   = 6 // the provider's pool, also used to look at the tables
	childPoolSize = 3
)

// shared holds the pools of the test process, opened on first use and closed by TestMain.
var shared struct {
	mu     sync.Mutex
	store  *pgxpool.Pool
	aux    *pgxpool.Pool
	gormPG *gorm.DB
}

// openPool opens a pgx pool of size connections on the test server.
func openPool(ctx context.Context, size int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(testdb.PostgresURL())
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = size
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := p.Ping(ctx); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// openGormPG opens GORM on the test PostgreSQL server with at most size connections.
func openGormPG(size int) (*gorm.DB, error) {
	db, err := gorm.Open(postgres.Open(testdb.PostgresURL()), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxOpenConns(size)
	return db, nil
}

// sharedPools returns the test process's pools, opening them on first use.
func sharedPools(t testing.TB) pools {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	if shared.store == nil {
		if shared.store, err = openPool(ctx, storePoolSize); err != nil {
			t.Fatalf("PostgreSQL at %s is unreachable (%v); %s", testdb.PostgresURL(), err, startPostgres)
		}
	}
	if shared.aux == nil {
		if shared.aux, err = openPool(ctx, auxPoolSize); err != nil {
			t.Fatalf("PostgreSQL at %s is unreachable (%v); %s", testdb.PostgresURL(), err, startPostgres)
		}
	}
	if shared.gormPG == nil {
		if shared.gormPG, err = openGormPG(storePoolSize); err != nil {
			t.Fatalf("PostgreSQL at %s is unreachable through GORM (%v); %s", testdb.PostgresURL(), err, startPostgres)
		}
	}
	return pools{store: shared.store, aux: shared.aux, gormPG: shared.gormPG}
}

// closeShared closes the shared pools. A pool whose connection is still held (a leaked
// transaction) would block Close for ever, so each close is bounded.
func closeShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	closeBounded := func(name string, fn func()) {
		done := make(chan struct{})
		go func() { fn(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			fmt.Fprintf(os.Stderr, "phasedtest: closing the %s pool took over 10s: a connection was never given back\n", name)
		}
	}
	if shared.store != nil {
		closeBounded("store", shared.store.Close)
	}
	if shared.aux != nil {
		closeBounded("aux", shared.aux.Close)
	}
	if shared.gormPG != nil {
		if sqlDB, err := shared.gormPG.DB(); err == nil {
			closeBounded("gorm", func() { _ = sqlDB.Close() })
		}
	}
}
