package failover_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/internal/galeratopo"
	"github.com/idemkit/idem/internal/history"
)

const (
	// twins is how many identical requests a round sends at once, split between the two
	// instances.
	twins = 20
	// galeraClients send requests with twins per key, per instance, under a node's kill.
	galeraClients = 2
)

// causes counts the answers of failure outcomes by what caused them: the engine's
// outcome, the HTTP status and the MariaDB error number in the chain (or the lease).
type causes struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *causes) add(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[what]++
}

// take returns what was counted and starts again.
func (c *causes) take() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer func() { c.m = nil }()
	keys := make([]string, 0, len(c.m))
	for k := range c.m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k, c.m[k])
	}
	return strings.Join(parts, ", ")
}

// cause names err by its MariaDB error number and where it struck.
func cause(err error) string {
	var my *gomysql.MySQLError
	where := "claim"
	switch msg := err.Error(); {
	case strings.Contains(msg, "complete"):
		where = "commit"
	case strings.Contains(msg, "phase"):
		where = "phase"
	}
	switch {
	case errors.As(err, &my):
		return fmt.Sprintf("%d at %s", my.Number, where)
	case errors.Is(err, storage.ErrLeaseLost):
		return "lease lost"
	case errors.Is(err, storage.ErrInProgress):
		return "in progress"
	}
	return "other at " + where + " (" + strings.SplitN(err.Error(), "\n", 2)[0] + ")"
}

// hooks counts the engine's failure answers by cause.
func (c *causes) hooks() core.Hooks {
	return core.HookFunc(func(_ context.Context, ev core.Event) {
		switch ev.Outcome {
		case core.OutcomeConflict, core.OutcomeStoreError: // the handler's own 503s are counted by the handler
			what := "no error"
			if ev.Err != nil {
				what = cause(ev.Err)
			}
			c.add(fmt.Sprintf("%d %s (%s)", ev.Status, ev.Outcome, what))
		}
	})
}

// galeraMode is one application, atomic or phased, run as two instances: one on node 0,
// one on node 1, sharing the key table and the orders table.
type galeraMode struct {
	mode   core.Mode
	a, b   *app
	orders string
	causes causes
}

// galeraApps starts, for each mode, the application's two instances, each with gorm on
// its own node's DSN (the pool options a user writes first).
func galeraApps(t *testing.T, c *galeratopo.Cluster) []*galeraMode {
	t.Helper()
	var modes []*galeraMode
	for _, mode := range []core.Mode{core.ModeAtomic, core.ModePhased} {
		m := &galeraMode{mode: mode, orders: "orders_" + mode.String()}
		keys := "keys_" + mode.String()
		prov := &provider{}
		for i, slot := range []**app{&m.a, &m.b} {
			a := &app{name: fmt.Sprintf("%s@node%d", mode, i), mode: mode}
			if mode == core.ModePhased {
				a.prov = prov // one provider for both instances
			}
			db, err := gorm.Open(mysql.Open(c.Nodes[i].DSN(galeratopo.Database)), &gorm.Config{Logger: logger.Discard})
			require.NoError(t, err)
			sqlDB, err := db.DB()
			require.NoError(t, err)
			t.Cleanup(func() { _ = sqlDB.Close() })
			store := gormstore.New(db, gormstore.WithTable(keys))
			if i == 0 {
				require.NoError(t, store.Migrate(t.Context()))
				require.NoError(t, db.Exec(fmt.Sprintf(`CREATE TABLE %s (id bigint AUTO_INCREMENT PRIMARY KEY,
					scope varchar(255) NOT NULL, idem_key varchar(255) NOT NULL, run bigint NOT NULL)`, m.orders)).Error)
			}
			a.serve(t, store, core.Config{Lease: failoverLease, Hooks: m.causes.hooks()}, func(ctx context.Context, key string, run int64) error {
				err := gormstore.MustDB(ctx).Exec(fmt.Sprintf(`INSERT INTO %s (scope, idem_key, run) VALUES (?, ?, ?)`, m.orders), scope, key, run).Error
				var my *gomysql.MySQLError
				if errors.As(err, &my) {
					m.causes.add(fmt.Sprintf("503 from the handler (its INSERT: %d)", my.Number))
				} else if err != nil {
					m.causes.add("503 from the handler (its INSERT: " + err.Error() + ")")
				}
				return err
			})
			a.rows = func(ctx context.Context) (map[string]int, error) { return galeraRows(ctx, c, m.orders) }
			*slot = a
		}
		modes = append(modes, m)
	}
	return modes
}

// galeraRows counts the business rows by key on the first running node, reading after
// every write the cluster committed (wsrep_sync_wait).
func galeraRows(ctx context.Context, c *galeratopo.Cluster, table string) (map[string]int, error) {
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		cfg, err := gomysql.ParseDSN(n.DSN(galeratopo.Database))
		if err != nil {
			return nil, err
		}
		cfg.Params = map[string]string{"wsrep_sync_wait": "1"}
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			return nil, err
		}
		defer db.Close()
		rows, err := db.QueryContext(ctx, fmt.Sprintf(`SELECT idem_key, count(*) FROM %s GROUP BY idem_key`, table))
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		m := map[string]int{}
		for rows.Next() {
			var k string
			var n int
			if err := rows.Scan(&k, &n); err != nil {
				return nil, err
			}
			m[k] = n
		}
		return m, rows.Err()
	}
	return nil, errors.New("no node runs")
}

// twinsOf sends twins identical requests for key at once, alternately to a and b.
func twinsOf(ctx context.Context, rec *history.Recorder, a, b *app, key string) []*sent {
	out := make([]*sent, twins)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range twins {
		to := a
		if i%2 == 1 {
			to = b
		}
		wg.Go(func() {
			<-start
			out[i] = post(ctx, rec, to, key)
		})
	}
	close(start)
	wg.Wait()
	return out
}

// settle sends every key whose answers so far hold no response again, on the instance
// given, until it has one; and checks that each key has exactly one business row (and,
// phased, one charge) and that the history holds.
func settle(t *testing.T, rec *history.Recorder, m *galeraMode, answers []*sent, retryOn func(s *sent) *app) {
	t.Helper()
	answered := map[string]bool{}
	for _, s := range answers {
		if s.out.Kind == history.Fresh || s.out.Kind == history.Replayed {
			answered[s.key] = true
		}
	}
	for _, s := range answers {
		if s.out.Kind == history.Wrong {
			t.Errorf("%s on %s: %d %s, want 201, 409 or 503 with Retry-After", s.key, s.app.name, s.status, s.body)
		}
		if !answered[s.key] || s.out.Kind == history.InProgress || s.out.Kind == history.Failed {
			r := untilAnswered(t, rec, retryOn(s), s.key, answeredBound)
			if answered[s.key] {
				assert.Equal(t, history.Replayed, r.out.Kind, "%s: the retry of a %s after a response was given", s.key, s.out.Kind)
			}
			answered[s.key] = true
		}
	}
	rows, err := m.a.rows(t.Context())
	require.NoError(t, err)
	for key := range answered {
		assert.Equal(t, 1, rows[key], "%s (%s): business rows", key, m.mode)
		if m.mode == core.ModePhased {
			assert.True(t, m.a.prov.charged(key), "%s: charged", key)
		}
	}
}

// TestGalera: gormstore on a three-node MariaDB Galera cluster, atomic and phased, each
// application run as two instances on two different nodes (a twin on another node is not
// held off by the key row's lock: both run, and one loses at COMMIT).
//
//   - identical requests: rounds of twins identical requests at once, split between the
//     instances; every certification loser gets 409 or 503 with Retry-After (never a
//     500), its retry the replay; each key has one business row and one charge; the
//     history is linearizable.
//   - a node killed under load: clients send pairs of twins, one to each instance, while
//     node 1 (the second instance's) is SIGKILLed; every answer is a response, a 409 or a
//     503 with Retry-After; every key, retried on the surviving instance, ends with one
//     row and one charge; the history is linearizable.
//   - quorum lost: with a second node killed, the last one is not Primary, and every
//     request gets 503 with Retry-After (1047 at the claim).
//
// IDEM_GALERA_TRIALS sets the rounds per mode (default 2) and IDEM_GALERA_KILLS the node
// kills under load (default 1; the killed node rejoins between kills).
func TestGalera(t *testing.T) {
	t.Parallel()
	c := galeratopo.New(t)
	modes := galeraApps(t, c)
	rounds, kills := envInt(t, "IDEM_GALERA_TRIALS", 2), envInt(t, "IDEM_GALERA_KILLS", 1)

	t.Run("identical requests on two nodes", func(t *testing.T) {
		for _, m := range modes {
			t.Run(m.mode.String(), func(t *testing.T) {
				t.Parallel()
				rec := history.NewRecorder()
				var all []*sent
				for r := range rounds {
					all = append(all, twinsOf(t.Context(), rec, m.a, m.b, fmt.Sprintf("twins-%d", r))...)
				}
				settle(t, rec, m, all, func(s *sent) *app { return s.app })
				history.Require(t, rec)
				t.Logf("%s: %d rounds of %d: answers %v; failures by cause: %s", m.mode, rounds, twins, rec.Count(), m.causes.take())
			})
		}
	})
	if t.Failed() {
		return
	}

	t.Run("a node killed under load", func(t *testing.T) {
		for k := range kills {
			if k > 0 {
				ctx, cancel := context.WithTimeout(t.Context(), galeratopo.StartTimeout)
				require.NoError(t, c.Heal(ctx))
				cancel()
			}
			galeraKill(t, c, modes, fmt.Sprintf("kill%d", k))
		}
	})
	if t.Failed() {
		return
	}

	t.Run("quorum lost", func(t *testing.T) {
		require.NoError(t, c.Nodes[1].Kill())
		require.NoError(t, c.Nodes[2].Kill())
		rec := history.NewRecorder()
		for _, m := range modes {
			// The node sees its peers gone after the group's suspect timeout; until then
			// it may still answer.
			await(t, time.Minute, "node 0 refuses requests", func() bool {
				s := post(t.Context(), rec, m.a, fmt.Sprintf("quorum-probe-%s-%d", m.mode, rec.Len()))
				require.Contains(t, []history.Kind{history.Fresh, history.Failed}, s.out.Kind, "%d %s", s.status, s.body)
				return s.out.Kind == history.Failed
			})
			for i := range 5 {
				s := post(t.Context(), rec, m.a, fmt.Sprintf("quorum-%s-%d", m.mode, i))
				assert.Equal(t, history.Failed, s.out.Kind, "%d %s", s.status, s.body)
				assert.Equal(t, 503, s.status)
			}
			t.Logf("%s without quorum: failures by cause: %s", m.mode, m.causes.take())
		}
		history.Require(t, rec)
	})
}

// galeraKill sends pairs of twins from clients to both instances of every mode while
// node 1 is SIGKILLed, then settles every key on the instance of node 0.
func galeraKill(t *testing.T, c *galeratopo.Cluster, modes []*galeraMode, tag string) {
	rec := history.NewRecorder()
	var mu sync.Mutex
	var all []*sent
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, m := range modes {
		for w := range galeraClients {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					key := fmt.Sprintf("%s-%s-%d-%d", tag, m.mode, w, i)
					var pair [2]*sent
					var pw sync.WaitGroup
					for j, a := range []*app{m.a, m.b} {
						pw.Go(func() { pair[j] = post(t.Context(), rec, a, key) })
					}
					pw.Wait()
					mu.Lock()
					all = append(all, pair[:]...)
					mu.Unlock()
				}
			})
		}
	}
	freshOf := func(a *app, since time.Time) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range all {
			if s.app == a && s.out.Kind == history.Fresh && !s.start.Before(since) {
				return true
			}
		}
		return false
	}
	start := time.Now()
	for _, m := range modes {
		await(t, time.Minute, m.b.name+" warm", func() bool { return freshOf(m.b, start) })
	}
	require.NoError(t, c.Nodes[1].Kill())
	killed := time.Now()
	for _, m := range modes {
		await(t, time.Minute, m.a.name+" succeeds after the kill", func() bool { return freshOf(m.a, killed) })
	}
	close(stop)
	wg.Wait()
	for _, m := range modes {
		var mine []*sent
		for _, s := range all {
			if s.app == m.a || s.app == m.b {
				mine = append(mine, s)
			}
		}
		settle(t, rec, m, mine, func(*sent) *app { return m.a })
		t.Logf("%s, node 1 killed: %d requests; failures by cause: %s", m.mode, len(mine), m.causes.take())
	}
	history.Require(t, rec)
	t.Logf("%s: %d requests, %v", tag, rec.Len(), rec.Count())
}
