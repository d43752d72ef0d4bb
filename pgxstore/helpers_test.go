package pgxstore_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgxstore"
)

func TestMain(m *testing.M) {
	code := m.Run()
	closePools()
	if code == 0 {
		// testdb keeps its admin pool for the whole run; ours are closed.
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
			goleak.IgnoreTopFunction("github.com/jackc/puddle/v2.(*Pool).createIdleResources")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

const startPostgres = "start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"

// poolSize is the size of the pools the tests and benchmarks use.
const poolSize = 16

var (
	poolMu sync.Mutex
	shared *pgxpool.Pool
)

func closePools() {
	poolMu.Lock()
	defer poolMu.Unlock()
	if shared != nil {
		shared.Close()
		shared = nil
	}
}

// newPool opens a pool of size connections on the test server, closed when the test (or
// benchmark run) ends, with tracer (if not nil) on every connection.
func newPool(t testing.TB, size int32, tracer pgx.QueryTracer) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testdb.PostgresURL())
	if err != nil {
		t.Fatalf("parse %s: %v", testdb.PostgresURL(), err)
	}
	cfg.MaxConns = size
	cfg.ConnConfig.Tracer = tracer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		if err = p.Ping(ctx); err != nil {
			p.Close()
		}
	}
	if err != nil {
		t.Fatalf("PostgreSQL at %s is unreachable (%v); %s", testdb.PostgresURL(), err, startPostgres)
	}
	t.Cleanup(p.Close)
	return p
}

// sharedPool is one pool for the tests that need nothing special, closed at the end of
// the run: each test keeps its tables in a schema of its own and names them
// schema-qualified.
func sharedPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	poolMu.Lock()
	defer poolMu.Unlock()
	if shared == nil {
		cfg, err := pgxpool.ParseConfig(testdb.PostgresURL())
		if err != nil {
			t.Fatalf("parse %s: %v", testdb.PostgresURL(), err)
		}
		cfg.MaxConns = poolSize
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err == nil {
			if err = p.Ping(ctx); err != nil {
				p.Close()
			}
		}
		if err != nil {
			t.Fatalf("PostgreSQL at %s is unreachable (%v); %s", testdb.PostgresURL(), err, startPostgres)
		}
		shared = p
	}
	return shared
}

// newStore returns a migrated store on db whose table lives in a fresh schema of the
// test's, and that schema's name.
func newStore(t testing.TB, db pgxstore.DB, opts ...pgxstore.Option) (*pgxstore.Store, string) {
	t.Helper()
	_, schema := testdb.PostgresSchema(t)
	store := pgxstore.New(db, append([]pgxstore.Option{pgxstore.WithTable(schema + "." + "idempotency_keys")}, opts...)...)
	if err := store.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return store, schema
}

// exec runs a statement the test needs and fails the test if it fails.
func exec(t testing.TB, db pgxstore.DB, sql string, args ...any) {
	t.Helper()
	if _, err := db.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// count returns the result of a count(*) query.
func count(t testing.TB, db pgxstore.DB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// waitLeaseEnd waits until the lease on (scope, key) in schema's key table has run out by
// the database's clock, the one the store judges leases by: waiting for the lease to
// run out is the point, and a fixed sleep would guess at it with the application's clock.
func waitLeaseEnd(t testing.TB, db pgxstore.DB, schema, scope, key string) {
	t.Helper()
	q := fmt.Sprintf(`SELECT count(*) FROM %s.idempotency_keys
		WHERE scope = $1 AND idem_key = $2 AND state = 'started' AND locked_until <= now()`, schema)
	deadline := time.Now().Add(10 * time.Second)
	for count(t, db, q, scope, key) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the lease on %q/%q did not run out within 10s", scope, key)
		}
		time.Sleep(5 * time.Millisecond) // polling the database's clock
	}
}
