package failover_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/internal/history"
	"github.com/idemkit/idem/internal/pgtopo"
	"github.com/idemkit/idem/pgxstore"
)

const (
	// recoveryBound is the promise: requests recover within 10s of the promotion.
	recoveryBound = 10 * time.Second
	// pgClients send requests per application instance, each a fresh key after the other.
	pgClients = 2
	// failoverLease is the phased lease: a key whose claim committed before the primary
	// died, and that could not be released, is held that long.
	failoverLease = 2 * time.Second
	// answeredBound bounds the retries of one key after the failover.
	answeredBound = 30 * time.Second
)

// pgApps starts the four application instances of a PostgreSQL topology — pgxstore and
// gormstore, atomic and phased — each with a pool on the multi-host URL with the options
// a user writes first (pgxpool.New(ctx, url), gorm.Open(postgres.Open(url))), and a key
// table and an orders table of its own (orders without a unique key, so a doubled run
// shows).
func pgApps(t *testing.T, c *pgtopo.Cluster) []*app {
	t.Helper()
	ctx := t.Context()
	url := c.URL()
	var apps []*app
	for _, kind := range []string{"pgx", "gorm"} {
		for _, mode := range []core.Mode{core.ModeAtomic, core.ModePhased} {
			a := &app{name: kind + "-" + mode.String(), mode: mode}
			if mode == core.ModePhased {
				a.prov = &provider{}
			}
			keys, orders := "keys_"+strings.ReplaceAll(a.name, "-", "_"), "orders_"+strings.ReplaceAll(a.name, "-", "_")
			require.NoError(t, c.Primary().Exec(ctx, fmt.Sprintf(
				`CREATE TABLE %s (id bigserial PRIMARY KEY, scope text NOT NULL, idem_key text NOT NULL, run bigint NOT NULL)`, orders)))
			cfg := core.Config{Lease: failoverLease}
			switch kind {
			case "pgx":
				pool, err := pgxpool.New(ctx, url)
				require.NoError(t, err)
				t.Cleanup(pool.Close)
				store := pgxstore.New(pool, pgxstore.WithTable(keys))
				require.NoError(t, store.Migrate(ctx))
				a.serve(t, store, cfg, func(ctx context.Context, key string, run int64) error {
					_, err := pgxstore.MustTx(ctx).Exec(ctx, fmt.Sprintf(`INSERT INTO %s (scope, idem_key, run) VALUES ($1, $2, $3)`, orders), scope, key, run)
					return err
				})
			case "gorm":
				db, err := gorm.Open(postgres.Open(url), &gorm.Config{Logger: logger.Discard})
				require.NoError(t, err)
				sqlDB, err := db.DB()
				require.NoError(t, err)
				t.Cleanup(func() { _ = sqlDB.Close() })
				store := gormstore.New(db, gormstore.WithTable(keys))
				require.NoError(t, store.Migrate(ctx))
				a.serve(t, store, cfg, func(ctx context.Context, key string, run int64) error {
					return gormstore.MustDB(ctx).Exec(fmt.Sprintf(`INSERT INTO %s (scope, idem_key, run) VALUES (?, ?, ?)`, orders), scope, key, run).Error
				})
			}
			a.rows = func(ctx context.Context) (map[string]int, error) { return pgRows(ctx, c, orders) }
			apps = append(apps, a)
		}
	}
	return apps
}

// pgRows counts the business rows by key on the primary.
func pgRows(ctx context.Context, c *pgtopo.Cluster, table string) (map[string]int, error) {
	conn, err := pgx.Connect(ctx, c.Primary().URL())
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT idem_key, count(*) FROM %s GROUP BY idem_key`, table))
	if err != nil {
		return nil, err
	}
	m := map[string]int{}
	var key string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&key, &n}, func() error { m[key] = n; return nil })
	return m, err
}

// pgTally is what kill trials saw, per application instance.
type pgTally struct {
	trials   int
	acked    map[string]int // keys answered 201 (fresh) under load
	failed   map[string]int // requests failed closed (503 + Retry-After, or no answer)
	lost     map[string]int // acknowledged keys that ran again after the failover
	recovery []time.Duration
}

func newTally() *pgTally {
	return &pgTally{acked: map[string]int{}, failed: map[string]int{}, lost: map[string]int{}}
}

func (p *pgTally) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d kills", p.trials)
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range p.acked {
			if !yield(k) {
				return
			}
		}
	}) {
		fmt.Fprintf(&b, "; %s: %d acknowledged, %d failed closed, %d acknowledged lost", name, p.acked[name], p.failed[name], p.lost[name])
	}
	if len(p.recovery) > 0 {
		r := slices.Clone(p.recovery)
		sort.Slice(r, func(i, j int) bool { return r[i] < r[j] })
		fmt.Fprintf(&b, "; first success after the promotion: median %v, max %v", r[len(r)/2].Round(time.Millisecond), r[len(r)-1].Round(time.Millisecond))
	}
	return b.String()
}

// TestPostgresFailover: pgxstore and gormstore, atomic and phased, serve requests with
// fresh keys through core's middleware, on a pool over a multi-host URL with
// target_session_attrs=read-write, while the primary is SIGKILLed and the standby promoted
// at once; then every key is sent again until it has an answer. With synchronous and with
// asynchronous replication:
//
//   - every request fails closed: 201, or 503 with Retry-After (never a 500; never a 409
//     for a fresh key, except in phased mode where asynchronous replication lost its
//     claim);
//   - each instance's first request sent after the promotion that succeeds does so within
//     recoveryBound of it (pools on the multi-host URL find the new primary by themselves);
//   - every key ends with exactly one business row (and, phased, one provider charge);
//   - with synchronous replication no acknowledged completion is lost, and the history is
//     linearizable against the model of one key; with asynchronous replication an
//     acknowledged completion can be lost (its retry runs again): counted and logged, and
//     the checker must find the history illegal exactly when one was lost.
//
// IDEM_FAILOVER_TRIALS sets the kills per replication mode (default 1); the topology is
// healed (the killed node rebuilt as the new primary's standby) between kills.
func TestPostgresFailover(t *testing.T) {
	t.Parallel()
	trials := envInt(t, "IDEM_FAILOVER_TRIALS", 1)
	for _, sync := range []bool{true, false} {
		name := map[bool]string{true: "synchronous", false: "asynchronous"}[sync]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := pgtopo.New(t, sync)
			apps := pgApps(t, c)
			total := newTally()
			for i := range trials {
				pgTrial(t, c, apps, fmt.Sprintf("t%d", i), total)
				if t.Failed() {
					break
				}
				ctx, cancel := context.WithTimeout(t.Context(), pgtopo.StartTimeout)
				require.NoError(t, c.Heal(ctx))
				cancel()
			}
			t.Logf("%s replication: %s", name, total)
			if sync {
				for name, n := range total.lost {
					assert.Zero(t, n, "%s: acknowledged completions lost with synchronous replication", name)
				}
			}
		})
	}
}

// pgTrial runs one kill on c under load and checks its history.
func pgTrial(t *testing.T, c *pgtopo.Cluster, apps []*app, tag string, total *pgTally) {
	rec := history.NewRecorder()
	l := startLoad(t.Context(), rec, tag, apps, pgClients)
	start := time.Now()
	for _, a := range apps {
		await(t, time.Minute, a.name+" warm", func() bool { _, ok := l.firstFresh(a, start.Add(200*time.Millisecond)); return ok })
	}
	_, _, err := c.KillPrimary()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	require.NoError(t, c.Promote(ctx))
	promoted := time.Now()
	for _, a := range apps {
		for {
			first, ok := l.firstFresh(a, promoted)
			if ok {
				total.recovery = append(total.recovery, first.end.Sub(promoted))
				break
			}
			if time.Since(promoted) > recoveryBound {
				l.halt()
				t.Fatalf("%s: no request sent after the promotion succeeded within %s; its last answers: %s; handler 503s: %s",
					a.name, recoveryBound, l.lastOf(a, 5), errorsOf(apps))
			}
			time.Sleep(10 * time.Millisecond) // polling the load's progress
		}
	}
	all := l.halt()
	total.trials++

	// Every answer under load was a 201 or failed closed; with asynchronous replication
	// also a 409 in phased mode: a claim the failover took back leaves the worker's next
	// fenced write (a renewal, the phase) without its row, which is a lost lease.
	var acked, failed []*sent
	for _, s := range all {
		switch {
		case s.out.Kind == history.Fresh:
			acked = append(acked, s)
			total.acked[s.app.name]++
		case s.out.Kind == history.Failed, s.out.Kind == history.InProgress && !c.Sync && s.app.mode == core.ModePhased:
			failed = append(failed, s)
			total.failed[s.app.name]++
		default:
			t.Errorf("%s on %s: %d %s (%s), want 201, or 503 with Retry-After", s.key, s.app.name, s.status, s.body, s.out.Kind)
		}
	}
	// Every acknowledged key sent again: a replay means its completion survived.
	lost := 0
	for _, s := range acked {
		r := untilAnswered(t, rec, s.app, s.key, answeredBound)
		if r.out.Kind == history.Fresh {
			lost++
			total.lost[s.app.name]++
			t.Logf("%s on %s: acknowledged at %s, run again after the failover", s.key, s.app.name, s.end.Format("15:04:05.000000"))
		}
	}
	for _, s := range failed {
		untilAnswered(t, rec, s.app, s.key, answeredBound)
	}
	// One business row, and one charge, per key.
	for _, a := range apps {
		rows, err := a.rows(t.Context())
		require.NoError(t, err)
		for _, s := range all {
			if s.app == a {
				assert.Equal(t, 1, rows[s.key], "%s on %s: business rows", s.key, a.name)
				if a.prov != nil {
					assert.True(t, a.prov.charged(s.key), "%s on %s: charged", s.key, a.name)
				}
			}
		}
	}
	if c.Sync {
		history.Require(t, rec)
	} else {
		res, _ := rec.Check(history.CheckTimeout)
		want := porcupine.Ok
		if lost > 0 {
			want = porcupine.Illegal
		}
		assert.Equal(t, want, res, "the checker's verdict on a history with %d lost completions", lost)
	}
	t.Logf("%s: %d requests, %v; handler 503s: %s", tag, rec.Len(), rec.Count(), errorsOf(apps))
}

// errorsOf lists the database errors the handlers answered 503 for.
func errorsOf(apps []*app) string {
	var b strings.Builder
	for _, a := range apps {
		fmt.Fprintf(&b, "%s %s; ", a.name, &a.fails)
	}
	return b.String()
}
