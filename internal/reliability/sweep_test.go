package reliability_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
)

// sweepTarget is an application and its key table for TestSweeperUnderLoad.
type sweepTarget struct {
	ep    *endpoint
	store storage.Store
	// seed inserts n completed keys in scope, created age ago, straight into the table.
	seed func(scope string, n int, age time.Duration)
	// keys counts the keys of scope.
	keys func(scope string) int
}

func pgxSweepTarget(t *testing.T, poolSize int32) sweepTarget {
	d := newDB(t)
	in := newInstance(t, d, instanceConfig{direct: true, poolSize: poolSize})
	return sweepTarget{
		ep:    in.endpoint,
		store: in.store,
		seed: func(scope string, n int, age time.Duration) {
			d.exec(`INSERT INTO idempotency_keys (scope, idem_key, request_hash, method, path, state, recovery_point,
				response_code, response_headers, response_body, created_at, completed_at)
				SELECT $1, 'k-' || g, '\x00'::bytea, 'POST', '/orders', 'completed', 'started', 201, ''::bytea, '{}'::bytea,
					now() - make_interval(secs => $2), now() - make_interval(secs => $2)
				FROM generate_series(1, $3) g`, scope, age.Seconds(), n)
		},
		keys: func(scope string) int {
			return d.count(`SELECT count(*) FROM idempotency_keys WHERE scope = $1`, scope)
		},
	}
}

func gormSweepTarget(t *testing.T, dialect gormDialect, poolSize int) sweepTarget {
	d := newGormDB(t, dialect)
	a := newGormApp(t, d, gormAppConfig{direct: true, poolSize: poolSize})
	const cols = `scope, idem_key, request_hash, method, path, state, recovery_point, response_code, response_headers,
		response_body, created_at, completed_at`
	return sweepTarget{
		ep:    a.endpoint,
		store: a.store,
		seed: func(scope string, n int, age time.Duration) {
			var err error
			switch dialect {
			case onMariaDB: // the Sequence engine's seq_1_to_N
				err = d.check.Exec(fmt.Sprintf(`INSERT INTO idempotency_keys (%s)
					SELECT ?, CONCAT('k-', seq), x'00', 'POST', '/orders', 'completed', 'started', 201, x'', x'7b7d',
						UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND, UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
					FROM seq_1_to_%d`, cols, n), scope, age.Microseconds(), age.Microseconds()).Error
			default: // SQLite: times as gormstore writes them, fixed-width UTC text
				at := time.Now().UTC().Add(-age).Format("2006-01-02 15:04:05.000000")
				err = d.check.Exec(fmt.Sprintf(`WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?)
					INSERT INTO idempotency_keys (%s)
					SELECT ?, 'k-' || n, x'00', 'POST', '/orders', 'completed', 'started', 201, x'', x'7b7d', ?, ? FROM g`, cols),
					n, scope, at, at).Error
			}
			require.NoError(t, err, "seed %d keys", n)
		},
		keys: func(scope string) int { return d.count(`SELECT count(*) FROM idempotency_keys WHERE scope = ?`, scope) },
	}
}

// sweepDone is a slog.Handler that reports the sweeper's "swept" line on a channel.
type sweepDone struct {
	deleted chan int64
}

func (s sweepDone) Enabled(context.Context, slog.Level) bool { return true }
func (s sweepDone) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "deleted" {
			select {
			case s.deleted <- a.Value.Int64():
			default:
			}
		}
		return true
	})
	if r.Level >= slog.LevelError {
		select {
		case s.deleted <- -1:
		default:
		}
	}
	return nil
}
func (s sweepDone) WithAttrs([]slog.Attr) slog.Handler { return s }
func (s sweepDone) WithGroup(string) slog.Handler      { return s }

// p99 is the 99th percentile of ds (nearest rank); 0 for none.
func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, (len(s)*99+99)/100-1)]
}

// TestSweeperUnderLoad: IDEM_SWEEP_KEYS expired keys (default 10000; the issue asks for
// 100000) and a tenth as many kept ones close to the retention's edge (23h old), then a
// steady keyed load of parallel clients through the engine over HTTP while Sweeper.Run
// deletes in batches of IDEM_SWEEP_BATCH (default 1000), on pgxstore × PostgreSQL and
// gormstore × MariaDB and × SQLite. Every expired key goes, every kept one stays, and
// every key the load got a 201 for still replays afterwards. The p99 latency of the
// load's requests (each one a claim) without and during the sweep is logged, never
// asserted.
func TestSweeperUnderLoad(t *testing.T) {
	t.Parallel()
	expired := envInt(t, "IDEM_SWEEP_KEYS", 10000)
	batch := envInt(t, "IDEM_SWEEP_BATCH", 1000)
	const clients = 4
	targets := map[string]func(t *testing.T) sweepTarget{
		"pgxstore × PostgreSQL": func(t *testing.T) sweepTarget { return pgxSweepTarget(t, clients+2) },
		"gormstore × MariaDB":   func(t *testing.T) sweepTarget { return gormSweepTarget(t, onMariaDB, clients+2) },
		"gormstore × SQLite":    func(t *testing.T) sweepTarget { return gormSweepTarget(t, onSQLite, clients+2) },
	}
	for name, open := range targets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st := open(t)
			kept := max(expired/10, 1)
			st.seed("expired", expired, 48*time.Hour)
			st.seed("kept", kept, 23*time.Hour)
			require.Equal(t, expired, st.keys("expired"))

			// The load: each client sends new keys one after the other until stopped.
			const (
				baseline = 0
				sweeping = 1
				after    = 2
			)
			var phase atomic.Int32
			type acked struct {
				scope, key, body string
				r                reply
			}
			var mu sync.Mutex
			var lat [3][]time.Duration
			var acks []acked
			statuses := map[int]int{}            // final answers
			firsts := [3]map[int]int{{}, {}, {}} // first answers, by phase
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					scope := fmt.Sprintf("live-%d", c)
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						key, body := fmt.Sprintf("k-%06d", i), jsonBody(i)
						p := phase.Load()
						began := time.Now()
						r := st.ep.post(scope, key, "", body)
						took := time.Since(began)
						first := r.status
						if r.err == nil && (r.status == http.StatusConflict || r.status >= 500) {
							if rs := st.ep.retryUntilDone(scope, key, "", body, 30); len(rs) > 0 {
								r = rs[len(rs)-1]
							}
						}
						mu.Lock()
						lat[p] = append(lat[p], took)
						firsts[p][first]++
						statuses[r.status]++
						if r.err == nil && r.status == http.StatusCreated {
							acks = append(acks, acked{scope, key, body, r})
						} else {
							t.Errorf("%s/%s: %v", scope, key, r)
						}
						mu.Unlock()
					}
				}()
			}
			samples := func(p int) int {
				mu.Lock()
				defer mu.Unlock()
				return len(lat[p])
			}
			deadline := time.Now().Add(2 * time.Minute)
			for samples(baseline) < 300 && time.Now().Before(deadline) && !t.Failed() {
				time.Sleep(10 * time.Millisecond) // polling the load's progress
			}

			done := sweepDone{deleted: make(chan int64, 1)}
			sw := core.Sweeper{Store: st.store, BatchSize: batch, Interval: time.Hour, Logger: slog.New(done)}
			ctx, cancel := context.WithCancel(context.Background())
			phase.Store(sweeping)
			began := time.Now()
			ran := make(chan error, 1)
			go func() { ran <- sw.Run(ctx) }()
			var deleted int64
			select {
			case deleted = <-done.deleted:
			case <-time.After(10 * time.Minute):
				t.Error("the sweep never finished")
			}
			took := time.Since(began)
			phase.Store(after)
			close(stop)
			wg.Wait()
			cancel()
			require.NoError(t, <-ran)

			assert.EqualValues(t, expired, deleted, "keys the sweep deleted")
			assert.Zero(t, st.keys("expired"), "expired keys left")
			assert.Equal(t, kept, st.keys("kept"), "keys within retention")
			// Every key the load was answered 201 for is still there and replays.
			var replayed atomic.Int64
			var rg sync.WaitGroup
			for c := range clients {
				rg.Add(1)
				go func() {
					defer rg.Done()
					for i := c; i < len(acks); i += clients {
						a := acks[i]
						r := st.ep.post(a.scope, a.key, "", a.body)
						if r.status != http.StatusCreated || !r.replayed() || !sameBody(r, a.r) {
							t.Errorf("%s/%s after the sweep: %v, want the replay of %v", a.scope, a.key, r, a.r)
							continue
						}
						replayed.Add(1)
					}
				}()
			}
			rg.Wait()
			assert.EqualValues(t, len(acks), replayed.Load())

			b, s := p99(lat[baseline]), p99(lat[sweeping])
			ratio := 0.0
			if b > 0 {
				ratio = float64(s) / float64(b)
			}
			t.Logf("%s: swept %d expired keys in %v (batches of %d), kept %d in retention; %d acknowledged keys all replay; "+
				"request p99 without the sweep %v (%d requests, first answers %v), during it %v (%d requests, first answers %v): "+
				"%.2f× (target ≤ 2×); final answers %v",
				name, deleted, took.Round(time.Millisecond), batch, kept, len(acks),
				b.Round(10*time.Microsecond), len(lat[baseline]), firsts[baseline], s.Round(10*time.Microsecond), len(lat[sweeping]),
				firsts[sweeping], ratio, statuses)
		})
	}
}
