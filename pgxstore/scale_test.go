package pgxstore_test

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/seamtest"
	"github.com/idemkit/idem/pgxstore"
)

// The key table at scale: BenchmarkKeyTable (claims and replays beside 3 M completed keys)
// and BenchmarkSweep (the sweeper deleting a third of them). Both fill a table of their
// own with IDEM_SCALE_ROWS keys; the default, 100 000, keeps an accidental `-bench .` short.

// scaleEnv is the variable that sets how many keys the scale benchmarks fill in.
const scaleEnv = "IDEM_SCALE_ROWS"

// scaleRows returns IDEM_SCALE_ROWS, or 100 000 when it is unset.
func scaleRows(b *testing.B) int {
	b.Helper()
	v := os.Getenv(scaleEnv)
	if v == "" {
		return 100_000
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 3000 {
		b.Fatalf("%s=%q: want a number of keys of at least 3000, e.g. %s=3000000", scaleEnv, v, scaleEnv)
	}
	return n
}

// scaleScopes is how many scopes (callers) the filled keys are spread over.
const scaleScopes = 1000

// scaleKey returns the scope, key and fingerprint of filled key i, as fillKeys writes
// them: the key is a UUID-shaped MD5 of "k<i>" (keys arrive in random order, as UUIDs do),
// the fingerprint the SHA-256 of the same text.
func scaleKey(i int) (scope, key string, fingerprint []byte) {
	s := "k" + strconv.Itoa(i)
	m := md5.Sum([]byte(s))
	h := hex.EncodeToString(m[:])
	fp := sha256.Sum256([]byte(s))
	return "acct-" + strconv.Itoa(i%scaleScopes), h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], fp[:]
}

// fillKeys inserts the completed keys 1..n (see scaleKey) into the key table of schema in
// one statement, oldest first, their created_at spread evenly over the span before now:
// a 201 with Content-Type and Location and a 200-byte JSON body each, as an orders API
// records them. It then vacuums and analyses the table, as autovacuum would have.
func fillKeys(b *testing.B, db *pgxpool.Pool, schema string, n int, span time.Duration) {
	b.Helper()
	table := schema + ".idempotency_keys"
	exec(b, db, fmt.Sprintf(`INSERT INTO %s (scope, idem_key, request_hash, method, path, state,
	recovery_point, response_code, response_headers, response_body, created_at, completed_at)
SELECT 'acct-' || i %% %d, md5('k' || i)::uuid::text, sha256(convert_to('k' || i, 'UTF8')), 'POST',
	'/v1/orders', 'completed', 'started', 201,
	convert_to('Content-Type: application/json' || chr(10) || 'Location: /v1/orders/' || i || chr(10), 'UTF8'),
	convert_to(rpad(format('{"id":%%s,"status":"created","amount":%%s,"currency":"EUR","customer":"cus_%%s","items":[{"sku":"sku-%%s","quantity":1}]}',
		i, i %% 9973, md5(i::text), i %% 311), 200, ' '), 'UTF8'),
	t.at, t.at + interval '40 milliseconds'
FROM generate_series(1, $1::bigint) AS i,
	LATERAL (SELECT now() - ($1::bigint - i) * $2::bigint * interval '1 microsecond') AS t(at)
ORDER BY i`, table, scaleScopes), n, span.Microseconds()/int64(n))
	exec(b, db, "VACUUM ANALYZE "+table)
}

// perRow is the key table's size in bytes per row: heap (with TOAST), indexes, total.
type perRow struct{ heap, indexes, total float64 }

// tableSize measures the key table of schema, holding n rows.
func tableSize(b *testing.B, db *pgxpool.Pool, schema string, n int) perRow {
	b.Helper()
	var heap, indexes, total int64
	require.NoError(b, db.QueryRow(context.Background(), `SELECT pg_table_size($1), pg_indexes_size($1),
	pg_total_relation_size($1)`, schema+".idempotency_keys").Scan(&heap, &indexes, &total))
	return perRow{float64(heap) / float64(n), float64(indexes) / float64(n), float64(total) / float64(n)}
}

// scaleResponse is what a first request records: the size of a filled key's response.
var scaleResponse = storage.Response{
	Status: http.StatusCreated,
	Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/orders/1"}},
	Body:   []byte(fmt.Sprintf("%-200s", `{"id":1,"status":"created","amount":100,"currency":"EUR","customer":"cus_0","items":[{"sku":"sku-1","quantity":1}]}`)),
}

// scaleClaim is an atomic claim of key in scope with the engine's defaults.
func scaleClaim(scope, key string, fingerprint []byte) storage.Claim {
	return storage.Claim{Scope: scope, Key: key, Fingerprint: fingerprint, Method: http.MethodPost,
		Path: "/v1/orders", Mode: storage.ModeAtomic, Lease: time.Minute, LockWait: 2 * time.Second,
		Retention: storage.DefaultRetention}
}

// firstRequest claims a fresh random key (a UUID, in a random one of the scopes) through
// store and completes it with scaleResponse: a first request whose handler writes nothing.
func firstRequest(ctx context.Context, store storage.Store) error {
	var u [16]byte
	_, _ = rand.Read(u[:])
	h := hex.EncodeToString(u[:])
	key := h[:8] + "-" + h[8:12] + "-4" + h[13:16] + "-a" + h[17:20] + "-" + h[20:]
	fp := sha256.Sum256(u[:])
	lock, rec, err := seamtest.Split(store.Claim(ctx, scaleClaim("acct-"+strconv.Itoa(int(u[0])%scaleScopes), key, fp[:])))
	if err != nil {
		return err
	}
	if lock == nil {
		return fmt.Errorf("first request %s: got record %+v, want the key", key, rec)
	}
	resp := scaleResponse
	return lock.Complete(ctx, &resp)
}

// replay claims filled key i through store and checks that it comes back completed.
func replay(ctx context.Context, store storage.Store, i int) error {
	scope, key, fp := scaleKey(i)
	lock, rec, err := seamtest.Split(store.Claim(ctx, scaleClaim(scope, key, fp)))
	if err != nil {
		return err
	}
	if lock != nil || rec.State != storage.StateCompleted || rec.Response.Status != http.StatusCreated {
		if lock != nil {
			_ = lock.Release(ctx)
		}
		return fmt.Errorf("replay of key %d (%s/%s): lock %v, record %+v", i, scope, key, lock, rec)
	}
	return nil
}

// side is one of the two tables BenchmarkKeyTable compares.
type side struct {
	name  string
	store *pgxstore.Store
	rows  int
}

// compare runs op on both sides in turn, b.N times, one client, each side first every
// other time, so that both meet the same load; it reports each side's mean time and the
// ratio of the full table's to the small one's (mean and median).
func compare(b *testing.B, sides [2]side, op func(ctx context.Context, s side, rnd *mrand.Rand) error) {
	ctx := context.Background()
	rnd := mrand.New(mrand.NewPCG(1, 2))
	var took [2][]time.Duration
	b.ResetTimer()
	for i := range b.N {
		for j := range 2 {
			k := (i + j) % 2
			began := time.Now()
			if err := op(ctx, sides[k], rnd); err != nil {
				b.Fatalf("%s: %v", sides[k].name, err)
			}
			took[k] = append(took[k], time.Since(began))
		}
	}
	b.StopTimer()
	var mean, median [2]float64
	for k := range 2 {
		var sum time.Duration
		for _, d := range took[k] {
			sum += d
		}
		mean[k] = float64(sum.Microseconds()) / float64(len(took[k]))
		slices.Sort(took[k])
		median[k] = float64(took[k][len(took[k])/2].Microseconds())
		b.ReportMetric(mean[k], sides[k].name+"-µs")
	}
	b.ReportMetric(mean[1]/mean[0], "full/small")
	b.ReportMetric(median[1]/median[0], "full/small-p50")
}

// BenchmarkKeyTable measures an atomic first request (Claim and Complete of a fresh UUID
// key, no handler write) and a replay (Claim of a random completed key) on a key table
// holding IDEM_SCALE_ROWS completed keys beside the same on a small one (1000 keys, plus
// the first requests'), interleaved by one client in one run: `full/small` is the figure
// to report. The full table's created_at spans 90% of the retention, so every key is
// replayed, none expired. The replay also reports the full table's bytes per row just
// after the fill (heap with TOAST, indexes, total) and how long the fill took. Each run
// fills the table anew (one to four minutes at 3 M here), so run it once, with a fixed
// count:
//
//	IDEM_SCALE_ROWS=3000000 go test -run '^$' -bench BenchmarkKeyTable -benchtime 3000x -timeout 30m ./pgxstore
func BenchmarkKeyTable(b *testing.B) {
	n := scaleRows(b)
	db := benchPool(b)
	small, smallSchema := newStore(b, db)
	full, fullSchema := newStore(b, db)
	fillKeys(b, db, smallSchema, 1000, 9*storage.DefaultRetention/10)
	began := time.Now()
	fillKeys(b, db, fullSchema, n, 9*storage.DefaultRetention/10)
	filled := time.Since(began)
	size := tableSize(b, db, fullSchema, n)
	sides := [2]side{{"small", small, 1000}, {"full", full, n}}

	b.Run(fmt.Sprintf("rows=%d/first", n), func(b *testing.B) {
		compare(b, sides, func(ctx context.Context, s side, _ *mrand.Rand) error { return firstRequest(ctx, s.store) })
	})
	b.Run(fmt.Sprintf("rows=%d/replay", n), func(b *testing.B) {
		compare(b, sides, func(ctx context.Context, s side, rnd *mrand.Rand) error {
			return replay(ctx, s.store, 1+rnd.IntN(s.rows))
		})
		b.ReportMetric(size.total, "full-B/row")
		b.ReportMetric(size.heap, "full-heap-B/row")
		b.ReportMetric(size.indexes, "full-index-B/row")
		b.ReportMetric(filled.Seconds(), "fill-s")
	})
}

// timedStore times each DeleteExpired call (one batch, one statement) of the store it
// wraps.
type timedStore struct {
	*pgxstore.Store
	batches []time.Duration
}

// DeleteExpired deletes one batch through the wrapped store and records how long it took.
func (s *timedStore) DeleteExpired(ctx context.Context, before time.Time, limit int) (int, error) {
	began := time.Now()
	n, err := s.Store.DeleteExpired(ctx, before, limit)
	s.batches = append(s.batches, time.Since(began))
	return n, err
}

// claimsBefore is how many first requests BenchmarkSweep times before each sweep.
const claimsBefore = 300

// BenchmarkSweep measures core.Sweeper with its defaults (batches of 5000, resting as long
// as the batch took) deleting the expired third of IDEM_SCALE_ROWS completed keys (their
// created_at spans 1.5 × the 24h retention), while one client keeps sending first
// requests on fresh keys. One op is one sweep of a freshly filled table. It reports keys
// deleted per second of sweep (`keys/s`) and per second inside the batches
// (`keys/s-batches`: the database's rate), the longest batch (one DELETE statement: the
// longest any of its row locks is held), and the first requests' mean, 99th percentile
// and longest time before the sweep and during it. Run it once:
//
//	IDEM_SCALE_ROWS=3000000 go test -run '^$' -bench BenchmarkSweep -benchtime 1x -timeout 30m ./pgxstore
func BenchmarkSweep(b *testing.B) {
	b.StopTimer() // only the sweeps are timed
	n := scaleRows(b)
	db := benchPool(b)
	ctx := context.Background()
	var deleted, claimedDuring int
	var sweeping time.Duration
	var batches, before, during []time.Duration
	for range b.N {
		store, schema := newStore(b, db)
		fillKeys(b, db, schema, n, 3*storage.DefaultRetention/2)
		for range claimsBefore {
			began := time.Now()
			require.NoError(b, firstRequest(ctx, store))
			before = append(before, time.Since(began))
		}

		ts := &timedStore{Store: store}
		sw := &core.Sweeper{Store: ts}
		stop := make(chan struct{})
		claims := make(chan []time.Duration)
		go func() {
			var took []time.Duration
			for {
				select {
				case <-stop:
					claims <- took
					return
				default:
				}
				began := time.Now()
				if err := firstRequest(ctx, store); err != nil {
					b.Errorf("first request during the sweep: %v", err)
				}
				took = append(took, time.Since(began))
			}
		}()
		b.StartTimer()
		began := time.Now()
		d, err := sw.Sweep(ctx)
		sweeping += time.Since(began)
		b.StopTimer()
		close(stop)
		took := <-claims
		require.NoError(b, err)
		require.Positive(b, d)
		require.NotEmpty(b, took, "no first request ran during the sweep")
		require.Zero(b, count(b, db, fmt.Sprintf(`SELECT count(*) FROM %s.idempotency_keys WHERE created_at < $1`, schema),
			began.Add(-storage.DefaultRetention)), "keys expired when the sweep began are left")
		deleted += d
		claimedDuring += len(took)
		batches = append(batches, ts.batches...)
		b.Logf("%d rows: %d keys deleted in %v by %d batches, taking in turn %s", n, d,
			sweeping.Round(time.Millisecond), len(ts.batches), trend(ts.batches))
		during = append(during, took...)
	}
	var inBatches time.Duration
	for _, d := range batches {
		inBatches += d
	}
	b.ReportMetric(float64(deleted)/float64(b.N), "deleted/op")
	b.ReportMetric(float64(deleted)/sweeping.Seconds(), "keys/s")
	b.ReportMetric(float64(deleted)/inBatches.Seconds(), "keys/s-batches")
	b.ReportMetric(float64(slices.Max(batches).Microseconds())/1000, "batch-max-ms")
	b.ReportMetric(float64(claimedDuring)/float64(b.N), "claims-during/op")
	for _, c := range []struct {
		name string
		took []time.Duration
	}{{"before", before}, {"during", during}} {
		var sum time.Duration
		for _, d := range c.took {
			sum += d
		}
		b.ReportMetric(float64(sum.Microseconds())/float64(len(c.took)), "claim-µs-"+c.name)
		slices.Sort(c.took)
		b.ReportMetric(float64(c.took[len(c.took)*99/100].Microseconds())/1000, "claim-p99-ms-"+c.name)
		b.ReportMetric(float64(c.took[len(c.took)-1].Microseconds())/1000, "claim-max-ms-"+c.name)
	}
}

// trend shows how batch times moved over a sweep: the first, the quartiles' and the last.
func trend(batches []time.Duration) string {
	var parts []string
	for _, i := range []int{0, len(batches) / 4, len(batches) / 2, len(batches) * 3 / 4, len(batches) - 1} {
		parts = append(parts, batches[i].Round(time.Millisecond).String())
	}
	return strings.Join(parts, ", ")
}
