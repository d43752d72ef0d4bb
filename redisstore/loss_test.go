package redisstore_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/internal/history"
	"github.com/idemkit/idem/redisstore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// IDEM_REDIS_KILL_TRIALS sets how many kills TestAcknowledgedCompletionsSurviveFailover
// makes per topology and row (default 1); BENCHMARKS.md's loss table is its output for
// 20:
//
//	IDEM_REDIS_KILL_TRIALS=20 go test -race -count=1 -timeout 30m -run TestAcknowledgedCompletionsSurviveFailover -v ./redisstore/
const envKillTrials = "IDEM_REDIS_KILL_TRIALS"

const (
	lossClients    = 16                     // concurrent clients, every key on the master killed
	lossLoad       = 300 * time.Millisecond // load before the kill
	lossAckTimeout = 500 * time.Millisecond // WithReplicaAcks' timeout in the row with it
)

// lossCount is what kill trials saw.
type lossCount struct {
	trials int
	acked  int // keys answered 201 (before the kill, or after it on the new master)
	failed int // keys answered 503 while the master died
	lost   int // acknowledged keys whose completion was gone after the failover: they ran again
	// twice counts the trials in which the topology failed over more than once (a
	// second failover onto a replica still syncing loses what it had not received, with
	// or without replica acks); twiceLost the keys they lost. Neither is in the above.
	twice, twiceLost int
}

func (c *lossCount) add(o lossCount) {
	c.trials += o.trials
	c.acked += o.acked
	c.failed += o.failed
	c.lost += o.lost
	c.twice += o.twice
	c.twiceLost += o.twiceLost
}

func (c lossCount) String() string {
	s := fmt.Sprintf("%d trials: %d completions acknowledged, %d requests failed closed at the kill, %d acknowledged completions lost",
		c.trials, c.acked, c.failed, c.lost)
	if c.twice > 0 {
		s += fmt.Sprintf("; besides, %d trials failed over twice and lost %d", c.twice, c.twiceLost)
	}
	return s
}

// TestAcknowledgedCompletionsSurviveFailover: clients complete operations as fast as
// they can, every key on one master, until that master is SIGKILLed; once its replica
// is promoted, every key answered 201 is sent again. A replay means its completion
// survived; a fresh run means the failover took back a completion a client had been
// told of. Without WithReplicaAcks that can happen (replication is asynchronous: the
// row is measured and logged); with WithReplicaAcks(1, …) it must not. Each row runs
// IDEM_REDIS_KILL_TRIALS kills (default 1) on a Redis Cluster and on a Sentinel group,
// the killed node healed back as a replica between trials. A trial whose topology failed
// over more than once (its epoch rose by more than one: on a loaded machine a sentinel
// can take a just-promoted master for dead) is counted apart: a second failover onto a
// replica that was still syncing loses what it had not received, which no
// acknowledgement from the first master's replica can prevent.
func TestAcknowledgedCompletionsSurviveFailover(t *testing.T) {
	t.Parallel()
	trials := 1
	if v := os.Getenv(envKillTrials); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, envKillTrials)
		require.Positive(t, n, envKillTrials)
		trials = n
	}
	for name, start := range deployments {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := start(t)
			for _, acks := range []bool{false, true} {
				var total lossCount
				for i := range trials {
					c := lossTrial(t, d, acks, fmt.Sprintf("%s-t%d-%t", name, i, acks))
					total.add(c)
					if t.Failed() {
						break
					}
				}
				row := "without WithReplicaAcks"
				if acks {
					row = fmt.Sprintf("with WithReplicaAcks(1, %s)", lossAckTimeout)
					assert.Zero(t, total.lost, "acknowledged completions lost with the option")
				}
				t.Logf("%s, %s: %s", name, row, total)
			}
		})
	}
}

// lossTrial runs one kill on d and heals it.
func lossTrial(t *testing.T, d deployment, acks bool, tag string) (c lossCount) {
	opts := []redisstore.Option{redisstore.WithPrefix(newPrefix(t))}
	if acks {
		opts = append(opts, redisstore.WithReplicaAcks(1, lossAckTimeout))
	}
	store := redisstore.New(d.client, opts...)
	var runs counts
	srv := serve(t, store, core.Config{Lease: failoverLease}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.add(core.MustOperation(r.Context()).Key())
		created(w, r)
	}))
	served, kill := d.victim(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	before, err := d.epoch(ctx)
	require.NoError(t, err)
	rec := history.NewRecorder()
	hctx := withHistory(t.Context(), rec)
	l := startLoad(hctx, srv.URL, tag, store, lossClients, served)
	l.awaitSuccesses(t, 1)
	time.Sleep(lossLoad) // the load runs; the kill lands in the middle of it
	kill(t)
	all := l.halt()
	require.NoError(t, d.heal(ctx))
	after, err := d.epoch(ctx)
	require.NoError(t, err)

	c = lossCount{trials: 1}
	defer func() {
		if after-before > 1 {
			t.Logf("%s: %d failovers", tag, after-before)
			c = lossCount{twice: 1, twiceLost: c.lost}
		}
	}()
	for _, s := range all {
		require.NoError(t, s.err, s.key)
		switch s.status {
		case http.StatusCreated:
			c.acked++
		case http.StatusServiceUnavailable:
			c.failed++
			continue
		default:
			t.Fatalf("%s: %d %s, want 201 or 503", s.key, s.status, s.body)
		}
		r, _, err := untilCreated(hctx, srv.URL, "acct", s.key, `{"amount":100}`, 20*time.Second, true)
		require.NoError(t, err, s.key)
		if !r.replayed() {
			c.lost++
			t.Logf("%s: acknowledged at %s, gone after the failover (handler runs: %d)", s.key, s.end.Format("15:04:05.000000"), runs.get(s.key))
		}
	}
	// The history holds exactly when no acknowledged completion was lost: a lost one ran
	// again after its 201, which the model forbids.
	if c.lost == 0 {
		history.Require(t, rec)
	} else {
		assert.NotEmpty(t, rec.Violations(), "%d acknowledged completions lost, and the history breaks no rule", c.lost)
	}
	return c
}
