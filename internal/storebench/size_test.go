package storebench_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/redistopo"
	"github.com/idemkit/idem/internal/seamtest"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgxstore"
	"github.com/idemkit/idem/redisstore"
)

func TestMain(m *testing.M) {
	code := m.Run()
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

// claim is the i-th operation's claim in mode.
func claim(i int, mode storage.Mode) storage.Claim {
	fp := sha256.Sum256([]byte(strconv.Itoa(i)))
	return storage.Claim{Scope: "acct-0001", Key: fmt.Sprintf("9f1c7a52-0e1d-4c9b-8a7e-%012d", i), Fingerprint: fp[:],
		Method: http.MethodPost, Path: "/v1/payments", Mode: mode, Lease: time.Minute, Retention: storage.DefaultRetention}
}

// response is every operation's recorded answer.
var response = &storage.Response{Status: http.StatusCreated,
	Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/payments/pay_8e03978e"}},
	Body:   []byte(`{"id":1,"amount":100,"status":"paid"}`)}

// complete claims and completes n operations on s in mode.
func complete(b *testing.B, s storage.Store, mode storage.Mode, n int) {
	b.Helper()
	ctx := context.Background()
	for i := range n {
		l, rec, err := seamtest.Split(s.Claim(ctx, claim(i, mode)))
		if err != nil || rec != nil {
			b.Fatalf("claim %d: %v %v", i, rec, err)
		}
		if err := l.Complete(ctx, response); err != nil {
			b.Fatalf("complete %d: %v", i, err)
		}
	}
}

// BenchmarkBytesPerCompletedKey writes b.N completed keys into each store and reports
// what they take, per key:
//
//   - redis: used-bytes/key is INFO used_memory's growth over the b.N keys (the hash,
//     its name, the expiry, the dictionaries' share) on a fresh redis-server;
//     memory-usage-bytes/key is MEMORY USAGE of one key. The stored header block is
//     over 64 bytes, so Redis keeps the hash as a hash table; redis-listpack-1024 is the
//     same with hash-max-listpack-value 1024, which keeps it a listpack.
//   - postgres: row-bytes/key is the average pg_column_size of a row (the tuple as
//     stored, TOAST-compressed fields included); relation-bytes/key is
//     pg_total_relation_size (heap, TOAST, the primary key and the created_at index)
//     over the rows, after VACUUM.
func BenchmarkBytesPerCompletedKey(b *testing.B) {
	for _, listpack := range []int{0, 1024} {
		name := "redis"
		if listpack > 0 {
			name = fmt.Sprintf("redis-listpack-%d", listpack)
		}
		b.Run(name, func(b *testing.B) { redisBytes(b, listpack) })
	}
	b.Run("postgres", func(b *testing.B) {
		ctx := context.Background()
		pool, err := pgxpool.New(ctx, testdb.PostgresURL())
		if err == nil {
			err = pool.Ping(ctx)
		}
		if err != nil {
			b.Fatalf("PostgreSQL at %s is unreachable: %v", testdb.PostgresURL(), err)
		}
		b.Cleanup(pool.Close)
		_, schema := testdb.PostgresSchema(b)
		table := schema + ".idempotency_keys"
		store := pgxstore.New(pool, pgxstore.WithTable(table))
		if err := store.Migrate(ctx); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		complete(b, store, storage.ModeAtomic, b.N)
		b.StopTimer()
		if _, err := pool.Exec(ctx, "VACUUM "+table); err != nil {
			b.Fatal(err)
		}
		var row, total float64
		var rows int
		if err := pool.QueryRow(ctx, `SELECT avg(pg_column_size(t.*)), pg_total_relation_size($1::regclass), count(*) FROM `+table+` t`,
			table).Scan(&row, &total, &rows); err != nil {
			b.Fatal(err)
		}
		if rows != b.N {
			b.Fatalf("%d rows for %d keys", rows, b.N)
		}
		b.ReportMetric(row, "row-bytes/key")
		b.ReportMetric(total/float64(rows), "relation-bytes/key")
	})
}

// redisBytes measures b.N completed keys on a fresh redis-server; listpack, when not 0,
// is its hash-max-listpack-value (default 64: a hash with a longer field, such as a
// stored body or header block over 64 bytes, is kept as a hash table instead).
func redisBytes(b *testing.B, listpack int) {
	srv := redistopo.NewServer(b)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	if listpack > 0 {
		if err := client.ConfigSet(ctx, "hash-max-listpack-value", strconv.Itoa(listpack)).Err(); err != nil {
			b.Fatal(err)
		}
	}
	store := redisstore.New(client)
	before, err := usedMemory(ctx, client)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	complete(b, store, storage.ModePhased, b.N)
	b.StopTimer()
	after, err := usedMemory(ctx, client)
	if err != nil {
		b.Fatal(err)
	}
	key := store.Key("acct-0001", claim(0, storage.ModePhased).Key)
	one, err := client.MemoryUsage(ctx, key, 0).Result()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(after-before)/float64(b.N), "used-bytes/key")
	b.ReportMetric(float64(one), "memory-usage-bytes/key")
}

// usedMemory returns INFO memory's used_memory.
func usedMemory(ctx context.Context, c *redis.Client) (int64, error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no used_memory in INFO memory")
}
