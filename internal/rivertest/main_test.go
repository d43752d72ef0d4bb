package rivertest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idem/internal/testdb"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	code := m.Run()
	closeShared()
	if code == 0 {
		if err := goleak.Find(
			goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
			goleak.IgnoreTopFunction("github.com/jackc/puddle/v2.(*Pool).createIdleResources"),
			goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

const startPostgres = "start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"

// pools are the connections to the test server: the test process shares one set between
// its tests (each keeps its tables in a schema of its own); a child server opens its own.
type pools struct {
	pgx  *pgxpool.Pool // pgxstore's and River's on pgx, and the tests' look at the tables
	gorm *gorm.DB      // gormstore's, and River's on database/sql
}

var shared struct {
	mu sync.Mutex
	p  pools
}

func openPools(size int) (pools, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(testdb.PostgresURL())
	if err != nil {
		return pools{}, err
	}
	cfg.MaxConns = int32(size)
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return pools{}, err
	}
	if err := p.Ping(ctx); err != nil {
		p.Close()
		return pools{}, err
	}
	db, err := gorm.Open(postgres.Open(testdb.PostgresURL()), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		p.Close()
		return pools{}, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		p.Close()
		return pools{}, err
	}
	sqlDB.SetMaxOpenConns(size)
	return pools{pgx: p, gorm: db}, nil
}

func (p pools) close() {
	if p.pgx != nil {
		p.pgx.Close()
	}
	if p.gorm != nil {
		if sqlDB, err := p.gorm.DB(); err == nil {
			_ = sqlDB.Close()
		}
	}
}

// sharedPools returns the test process's pools, opened on first use.
func sharedPools(t testing.TB) pools {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.p.pgx == nil {
		p, err := openPools(6)
		if err != nil {
			t.Fatalf("PostgreSQL at %s is unreachable (%v); %s", testdb.PostgresURL(), err, startPostgres)
		}
		shared.p = p
	}
	return shared.p
}

func closeShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.p.close()
}
