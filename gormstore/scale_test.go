package gormstore_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/internal/seamtest"
	"github.com/idemkit/idem/internal/testdb"
)

// scaleEnv is the variable that sets how many keys BenchmarkSweepMariaDB fills in.
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

// fillMariaDB inserts n completed keys into table on MariaDB in one statement (the
// SEQUENCE engine's seq_1_to_n), oldest first, their created_at (UTC wall clock, as the
// store keeps it) spread evenly over the span before now, with UUID-shaped random keys
// in 1000 scopes, a 32-byte fingerprint, a 201 with Content-Type and Location and a
// 200-byte JSON body each (as pgxstore's BenchmarkKeyTable fills them); then it analyses
// the table.
func fillMariaDB(b *testing.B, db *gorm.DB, table string, n int, span time.Duration) {
	b.Helper()
	q := fmt.Sprintf(`INSERT INTO %[1]s (scope, idem_key, request_hash, method, path, state, recovery_point,
	response_code, response_headers, response_body, created_at, completed_at)
SELECT CONCAT('acct-', seq %% 1000), CONCAT_WS('-', SUBSTR(h, 1, 8), SUBSTR(h, 9, 4), SUBSTR(h, 13, 4),
		SUBSTR(h, 17, 4), SUBSTR(h, 21)),
	UNHEX(SHA2(CONCAT('k', seq), 256)), 'POST', '/v1/orders', 'completed', 'started', 201,
	CONCAT('Content-Type: application/json', CHAR(10), 'Location: /v1/orders/', seq, CHAR(10)),
	RPAD(CONCAT('{"id":', seq, ',"status":"created","amount":', seq %% 9973, ',"currency":"EUR","customer":"cus_',
		MD5(seq), '","items":[{"sku":"sku-', seq %% 311, '","quantity":1}]}'), 200, ' '),
	at, at + INTERVAL 40000 MICROSECOND
FROM (SELECT seq, MD5(CONCAT('k', seq)) AS h,
	UTC_TIMESTAMP(6) - INTERVAL ((%[2]d - seq) * %[3]d) MICROSECOND AS at FROM seq_1_to_%[2]d) AS g
ORDER BY seq`, table, n, span.Microseconds()/int64(n))
	require.NoError(b, db.Exec(q).Error)
	require.NoError(b, db.Exec("ANALYZE TABLE "+table).Error)
}

// firstRequest claims a fresh random key through store (atomic) and completes it.
func firstRequest(ctx context.Context, store storage.Store) error {
	var u [16]byte
	_, _ = rand.Read(u[:])
	h := hex.EncodeToString(u[:])
	fp := sha256.Sum256(u[:])
	lock, rec, err := seamtest.Split(store.Claim(ctx, storage.Claim{Scope: "acct-" + strconv.Itoa(int(u[0])), Key: h, Fingerprint: fp[:],
		Method: http.MethodPost, Path: "/v1/orders", Mode: storage.ModeAtomic, Lease: time.Minute,
		LockWait: 2 * time.Second, Retention: storage.DefaultRetention}))
	if err != nil {
		return err
	}
	if lock == nil {
		return fmt.Errorf("first request %s: got record %+v, want the key", h, rec)
	}
	return lock.Complete(ctx, &storage.Response{Status: http.StatusCreated,
		Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/orders/1"}},
		Body:   []byte(fmt.Sprintf("%-200s", `{"id":1,"status":"created"}`))})
}

// timedStore times each DeleteExpired call (one batch) of the store it wraps.
type timedStore struct {
	*gormstore.Store
	batches []time.Duration
}

// DeleteExpired deletes one batch through the wrapped store and records how long it took.
func (s *timedStore) DeleteExpired(ctx context.Context, before time.Time, limit int) (int, error) {
	began := time.Now()
	n, err := s.Store.DeleteExpired(ctx, before, limit)
	s.batches = append(s.batches, time.Since(began))
	return n, err
}

// BenchmarkSweepMariaDB is pgxstore's BenchmarkSweep on MariaDB: core.Sweeper with its
// defaults (batches of 5000, resting as long as the batch took) deleting the expired third
// of IDEM_SCALE_ROWS completed keys (created_at spanning 1.5 × the 24h retention) while
// one client keeps sending first requests on fresh keys. One op is one sweep of a freshly
// filled table. It reports keys deleted per second of sweep and inside the batches, the
// longest batch (one transaction: the longest it holds its row locks) and the first
// requests' mean, 99th percentile and longest time before the sweep and during it. Run
// it once:
//
//	IDEM_SCALE_ROWS=3000000 go test -run '^$' -bench BenchmarkSweepMariaDB -benchtime 1x -timeout 30m ./gormstore
func BenchmarkSweepMariaDB(b *testing.B) {
	b.StopTimer() // only the sweeps are timed
	n := scaleRows(b)
	db := openMySQL(b)
	ctx := context.Background()
	var deleted, claimedDuring int
	var sweeping time.Duration
	var batches, before, during []time.Duration
	for range b.N {
		table := testdb.Name("keys")
		store := migrated(b, db, gormstore.WithTable(table))
		fillMariaDB(b, db, table, n, 3*storage.DefaultRetention/2)
		for range 300 {
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
		var left int64
		require.NoError(b, db.Raw("SELECT count(*) FROM "+table+" WHERE created_at < ?",
			began.Add(-storage.DefaultRetention).UTC().Format("2006-01-02 15:04:05.999999")).Scan(&left).Error)
		require.Zero(b, left, "keys expired when the sweep began are left")
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
