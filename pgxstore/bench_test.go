package pgxstore_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/seamtest"
	"github.com/idemkit/idem/pgxstore"
)

// benchParallelism makes b.RunParallel start (about) one goroutine per pool connection:
// it starts parallelism × GOMAXPROCS goroutines.
func benchParallelism() int { return max(1, poolSize/runtime.GOMAXPROCS(0)) }

// benchPool is one warmed-up pool of poolSize for a whole benchmark, so every variant
// runs on the same connections.
func benchPool(b *testing.B) *pgxpool.Pool {
	b.Helper()
	db := newPool(b, poolSize, nil)
	ctx := context.Background()
	conns := make([]*pgxpool.Conn, 0, poolSize)
	for range poolSize {
		c, err := db.Acquire(ctx)
		require.NoError(b, err)
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	return db
}

// benchTables creates a fresh schema holding a key table and an orders table and returns
// a store on it with opts and the schema.
func benchTables(b *testing.B, db *pgxpool.Pool, opts []pgxstore.Option) (*pgxstore.Store, string) {
	b.Helper()
	store, schema := newStore(b, db, opts...)
	exec(b, db, fmt.Sprintf(`CREATE TABLE %s.orders (id bigserial PRIMARY KEY, idem_key text NOT NULL, amount int NOT NULL)`, schema))
	return store, schema
}

func benchClaim(key string, mode storage.Mode) storage.Claim {
	fp := sha256.Sum256([]byte("POST /orders\n" + `{"amount":100}`))
	return storage.Claim{Scope: "bench", Key: key, Fingerprint: fp[:], Method: http.MethodPost, Path: "/orders",
		Mode: mode, Lease: time.Minute, LockWait: 2 * time.Second, Retention: 24 * time.Hour}
}

var benchResponse = storage.Response{
	Status: http.StatusCreated,
	Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/orders/1"}},
	Body:   []byte(`{"id":1,"amount":100,"status":"created"}`),
}

// floorVariant is one way of creating an order, run by BenchmarkFloor.
type floorVariant struct {
	name string
	opts []pgxstore.Option // nil: no store (bare, floor)
	mode storage.Mode
	// op creates one order for key.
	op func(ctx context.Context, e *floorEnv, key string) error
}

// floorEnv is what one variant's operations share: the pool, the store (nil for bare
// and floor) and the statements, built once.
type floorEnv struct {
	db          *pgxpool.Pool
	store       *pgxstore.Store
	insertOrder string
	insertKey   string
}

// bareOp is the business transaction alone: BEGIN; INSERT order; COMMIT.
func bareOp(ctx context.Context, e *floorEnv, key string) error {
	tx, err := e.db.Begin(ctx)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, e.insertOrder, key, 100); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	return tx.Commit(ctx)
}

// floorOp is the least any idempotent design can write: the business transaction plus
// one completed key row, inserted with the response just before COMMIT (the two sent
// together, as the store sends its completion). Three round trips, like bare.
func floorOp(ctx context.Context, e *floorEnv, key string) error {
	conn, err := e.db.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, e.insertOrder, key, 100); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	c := benchClaim(key, storage.ModeAtomic)
	b := &pgx.Batch{}
	b.Queue(e.insertKey, c.Scope, c.Key, c.Fingerprint, c.Method, c.Path, int32(benchResponse.Status),
		storage.EncodeHeader(benchResponse.Header), benchResponse.Body)
	b.Queue("commit")
	err = tx.Conn().SendBatch(ctx, b).Close()
	if err == nil && tx.Conn().PgConn().TxStatus() != 'I' {
		err = fmt.Errorf("floor: still in a transaction after COMMIT")
	}
	if err != nil {
		_ = tx.Rollback(ctx)
	}
	return err
}

// idemOp creates the order through the store: Claim, the INSERT through pgxstore.MustTx,
// Complete.
func idemOp(mode storage.Mode) func(ctx context.Context, e *floorEnv, key string) error {
	return func(ctx context.Context, e *floorEnv, key string) error {
		lock, _, err := seamtest.Split(e.store.Claim(ctx, benchClaim(key, mode)))
		if err != nil {
			return err
		}
		if lock == nil {
			return fmt.Errorf("key %q: no lock", key)
		}
		lctx := lock.Context(ctx)
		if _, err := pgxstore.MustTx(lctx).Exec(lctx, e.insertOrder, key, 100); err != nil {
			_ = lock.Release(ctx)
			return err
		}
		resp := benchResponse
		return lock.Complete(ctx, &resp)
	}
}

// floorVariants are the rows of the floor table.
var floorVariants = []floorVariant{
	{name: "bare", op: bareOp},
	{name: "floor", op: floorOp},
	{name: "atomic", opts: []pgxstore.Option{}, mode: storage.ModeAtomic, op: idemOp(storage.ModeAtomic)},
	{name: "atomic-row-first", opts: []pgxstore.Option{pgxstore.WithClaimRowFirst()}, mode: storage.ModeAtomic, op: idemOp(storage.ModeAtomic)},
	{name: "phased", opts: []pgxstore.Option{}, mode: storage.ModePhased, op: idemOp(storage.ModePhased)},
}

// BenchmarkFloor creates orders in parallel (16 clients on a pool of 16, a fresh key
// each) in every way of floorVariants, side by side in one run: bare (BEGIN; INSERT order;
// COMMIT), the floor (bare plus one completed key row before COMMIT) and the store in each
// mode through Store.Claim / pgxstore.MustTx / Lock.Complete. Each variant writes to tables of
// its own. It logs each variant's throughput relative to the floor; compare ratios within
// one run only (the machine is shared):
//
//	go test -run '^$' -bench 'BenchmarkFloor$' -benchtime 2s -count 3 ./pgxstore
func BenchmarkFloor(b *testing.B) {
	db := benchPool(b)
	nsPerOp := make(map[string]float64, len(floorVariants))
	var seq atomic.Int64
	for _, v := range floorVariants {
		b.Run(v.name, func(b *testing.B) {
			store, schema := benchTables(b, db, v.opts)
			e := &floorEnv{db: db, store: store,
				insertOrder: "INSERT INTO " + schema + ".orders (idem_key, amount) VALUES ($1, $2)",
				insertKey: `INSERT INTO ` + schema + `.idempotency_keys (scope, idem_key, request_hash, method, path, state,
	recovery_point, response_code, response_headers, response_body, created_at, completed_at)
VALUES ($1, $2, $3, $4, $5, 'completed', 'started', $6, $7, $8, now(), statement_timestamp())`}
			b.ReportAllocs()
			b.SetParallelism(benchParallelism())
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					if err := v.op(ctx, e, "k"+strconv.FormatInt(seq.Add(1), 10)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			nsPerOp[v.name] = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		})
	}
	if floor := nsPerOp["floor"]; floor > 0 {
		var sb strings.Builder
		for _, v := range floorVariants {
			if ns := nsPerOp[v.name]; ns > 0 {
				fmt.Fprintf(&sb, " %s=%.2f", v.name, floor/ns)
			}
		}
		b.Logf("throughput relative to the floor:%s", sb.String())
	}
}

// BenchmarkFloorMixed runs the variants of floorVariants interleaved: each of 16 clients
// (on a pool of 16) creates one order in every way in turn, starting with a different one
// each time, and times each. On a machine whose load changes from second to second (the
// shared one these figures come from), BenchmarkFloor's variants, run one after another,
// each meet a different load; here every variant meets the same. It reports each
// variant's throughput relative to the floor (the floor's mean time per order divided by
// the variant's) as a metric; allocations are per round of all the variants:
//
//	go test -run '^$' -bench BenchmarkFloorMixed -benchtime 4000x -count 5 ./pgxstore
func BenchmarkFloorMixed(b *testing.B) {
	db := benchPool(b)
	envs := make([]*floorEnv, len(floorVariants))
	for i, v := range floorVariants {
		store, schema := benchTables(b, db, v.opts)
		envs[i] = &floorEnv{db: db, store: store,
			insertOrder: "INSERT INTO " + schema + ".orders (idem_key, amount) VALUES ($1, $2)",
			insertKey: `INSERT INTO ` + schema + `.idempotency_keys (scope, idem_key, request_hash, method, path, state,
	recovery_point, response_code, response_headers, response_body, created_at, completed_at)
VALUES ($1, $2, $3, $4, $5, 'completed', 'started', $6, $7, $8, now(), statement_timestamp())`}
	}
	spent := make([]atomic.Int64, len(floorVariants)) // ns, summed over the clients
	var seq, start atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(benchParallelism())
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		first := int(start.Add(1))
		for pb.Next() {
			first++
			for j := range floorVariants {
				i := (first + j) % len(floorVariants)
				began := time.Now()
				if err := floorVariants[i].op(ctx, envs[i], "k"+strconv.FormatInt(seq.Add(1), 10)); err != nil {
					b.Error(err)
					return
				}
				spent[i].Add(int64(time.Since(began)))
			}
		}
	})
	b.StopTimer()
	var floor float64
	for i, v := range floorVariants {
		if v.name == "floor" {
			floor = float64(spent[i].Load())
		}
	}
	for i, v := range floorVariants {
		if ns := float64(spent[i].Load()); ns > 0 && v.name != "floor" {
			b.ReportMetric(floor/ns, v.name+"/floor")
		}
	}
}

// BenchmarkReplay claims a completed key over and over (the store answers with its
// record), in parallel on a pool of 16; lookup-first reads it outside a transaction.
func BenchmarkReplay(b *testing.B) {
	db := benchPool(b)
	for _, v := range []struct {
		name string
		mode storage.Mode
		opts []pgxstore.Option
	}{
		{"atomic", storage.ModeAtomic, nil},
		{"atomic-row-first", storage.ModeAtomic, []pgxstore.Option{pgxstore.WithClaimRowFirst()}},
		{"atomic-lookup-first", storage.ModeAtomic, []pgxstore.Option{pgxstore.WithLookupFirst()}},
		{"phased", storage.ModePhased, nil},
	} {
		b.Run(v.name, func(b *testing.B) {
			store, _ := newStore(b, db, v.opts...)
			ctx := context.Background()
			c := benchClaim("replayed", v.mode)
			lock, _, err := seamtest.Split(store.Claim(ctx, c))
			require.NoError(b, err)
			require.NotNil(b, lock)
			resp := benchResponse
			require.NoError(b, lock.Complete(ctx, &resp))
			b.ReportAllocs()
			b.SetParallelism(benchParallelism())
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_, rec, err := seamtest.Split(store.Claim(ctx, c))
					if err != nil || rec == nil || rec.State != storage.StateCompleted {
						b.Errorf("replay: rec %v, err %v", rec, err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkMiddleware counts what one request costs in Go through core's net/http
// middleware and the store (allocations above all): a first request whose handler
// inserts an order, and a replay. One client at a time.
//
//	go test -run '^$' -bench BenchmarkMiddleware -benchmem ./pgxstore
func BenchmarkMiddleware(b *testing.B) {
	db := benchPool(b)
	for _, v := range []struct {
		name string
		mode core.Mode
		opts []pgxstore.Option
	}{
		{"atomic", core.ModeAtomic, nil},
		{"atomic-row-first", core.ModeAtomic, []pgxstore.Option{pgxstore.WithClaimRowFirst()}},
		{"phased", core.ModePhased, nil},
	} {
		store, schema := benchTables(b, db, v.opts)
		eng, err := core.New(core.Config{Store: store, Mode: v.mode})
		require.NoError(b, err)
		insert := "INSERT INTO " + schema + ".orders (idem_key, amount) VALUES ($1, $2)"
		h := eng.Middleware(func(*http.Request) string { return "bench" })(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			if _, err := pgxstore.MustTx(ctx).Exec(ctx, insert, core.MustOperation(ctx).Key(), 100); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Location", "/orders/1")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(benchResponse.Body)
		}))
		run := func(b *testing.B, key func(i int) string) {
			body := strings.NewReader(`{"amount":100}`)
			r := httptest.NewRequest(http.MethodPost, "/orders", nil)
			r.Header.Set("Content-Type", "application/json")
			w := &discard{h: make(http.Header)}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				body.Reset(`{"amount":100}`)
				r.Body = io.NopCloser(body)
				r.Header["Idempotency-Key"] = []string{key(i)}
				clear(w.h)
				h.ServeHTTP(w, r)
				if w.status != http.StatusCreated {
					b.Fatalf("status %d", w.status)
				}
			}
		}
		var seq atomic.Int64
		b.Run(v.name+"/first", func(b *testing.B) {
			run(b, func(int) string { return "first-" + strconv.FormatInt(seq.Add(1), 10) })
		})
		b.Run(v.name+"/replay", func(b *testing.B) { run(b, func(int) string { return "first-1" }) })
	}
}

// discard is a minimal ResponseWriter, so that the benchmark measures the middleware and
// the store, not httptest.ResponseRecorder.
type discard struct {
	h      http.Header
	status int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(status int)      { d.status = status }
