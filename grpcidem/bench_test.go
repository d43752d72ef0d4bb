package grpcidem_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/grpcidem"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgxstore"
)

// benchService answers UnaryCall with a ~200-byte response. With a pool it first inserts
// an order: a keyed call through the claim's transaction (pgxstore.MustTx), a bare one in a
// transaction of its own (BEGIN; INSERT; COMMIT), as the HTTP benchmarks' bare handler.
type benchService struct {
	testpb.UnimplementedTestServiceServer
	pool *pgxpool.Pool
}

const insertOrder = `INSERT INTO orders (idem_key, amount) VALUES ($1, 42)`

func (s *benchService) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if s.pool != nil {
		var err error
		if op, ok := core.OperationFromContext(ctx); ok {
			_, err = pgxstore.MustTx(ctx).Exec(ctx, insertOrder, op.Key())
		} else {
			err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, insertOrder, "bare"); return err })
		}
		if err != nil {
			return nil, err
		}
	}
	return &testpb.SimpleResponse{Username: "order 1", Payload: req.GetPayload()}, nil
}

// CacheableUnaryCall is UnaryCall under a name the benchmark does not key: the bare call.
func (s *benchService) CacheableUnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return s.UnaryCall(ctx, req)
}

// benchPool returns a pool on a schema of the benchmark's own, with the key table and
// an orders table.
func benchPool(b *testing.B) *pgxpool.Pool {
	b.Helper()
	url, _ := testdb.PostgresSchema(b)
	pool, err := pgxpool.New(b.Context(), url)
	require.NoError(b, err)
	b.Cleanup(pool.Close)
	require.NoError(b, pgxstore.New(pool).Migrate(b.Context()))
	_, err = pool.Exec(b.Context(), `CREATE TABLE orders (id bigserial PRIMARY KEY, idem_key text NOT NULL, amount int NOT NULL)`)
	require.NoError(b, err)
	return pool
}

var benchKeys atomic.Int64

// BenchmarkUnary measures one unary call over loopback TCP, from a real client to a real
// grpc.Server, on memstore (phased) and pgxstore (atomic, the handler inserting one row):
// bare (the method is not keyed: the interceptor passes it through), first (a new key
// every call, through the client interceptor as well) and replay (one key). first − bare
// and replay − bare are idem's cost per call.
func BenchmarkUnary(b *testing.B) {
	for _, st := range []string{"memstore", "pgxstore"} {
		b.Run(st, func(b *testing.B) {
			svc := &benchService{}
			var eng *core.Engine
			var err error
			if st == "pgxstore" {
				svc.pool = benchPool(b)
				eng, err = core.New(core.Config{Store: pgxstore.New(svc.pool)})
			} else {
				eng, err = core.New(core.Config{Store: memstore.New()})
			}
			require.NoError(b, err)
			keyed := func(m string) bool { return m == unaryCall }
			addr := serve(b, eng, grpcidem.Config{Scope: func(context.Context) string { return "bench" }, Keyed: keyed}, svc, nil)
			bare := testpb.NewTestServiceClient(dial(b, addr))
			client := testpb.NewTestServiceClient(dial(b, addr, grpc.WithUnaryInterceptor(grpcidem.UnaryClientInterceptor(grpcidem.ClientConfig{}))))
			req := &testpb.SimpleRequest{Payload: &testpb.Payload{Body: make([]byte, 200)}}
			ctx := b.Context()

			b.Run("bare", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := bare.CacheableUnaryCall(ctx, req); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("first", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					key := grpcidem.Key("bench-" + strconv.FormatInt(benchKeys.Add(1), 10))
					if _, err := client.UnaryCall(ctx, req, key); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("replay", func(b *testing.B) {
				b.ReportAllocs()
				key := grpcidem.Key("bench-replayed-" + strconv.FormatInt(benchKeys.Add(1), 10))
				if _, err := client.UnaryCall(ctx, req, key); err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					var header metadata.MD
					if _, err := client.UnaryCall(ctx, req, key, grpc.Header(&header)); err != nil || header.Get(grpcidem.ReplayedMetadata) == nil {
						b.Fatalf("not a replay: %v", err)
					}
				}
			})
		})
	}
}
