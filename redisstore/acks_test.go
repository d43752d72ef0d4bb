package redisstore_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/core/storetest"
	"github.com/idemkit/idem/internal/redistopo"
	"github.com/idemkit/idem/internal/seamtest"
	"github.com/idemkit/idem/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ackTimeout is how long the tests' stores wait for replicas: long enough for a loaded
// machine, shorter than the clients' ReadTimeout (5s) and the claims' Timeout (5s).
const ackTimeout = time.Second

func TestReplicaAcksPanicsOnProgrammingErrors(t *testing.T) {
	t.Parallel()
	assert.PanicsWithValue(t, "redisstore: WithReplicaAcks(0, 1s): n must be at least 1", func() { redisstore.WithReplicaAcks(0, time.Second) })
	assert.PanicsWithValue(t, "redisstore: WithReplicaAcks(1, 0s): the timeout must be at least 1ms", func() { redisstore.WithReplicaAcks(1, 0) })
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": redisAddr()}})
	t.Cleanup(func() { _ = ring.Close() })
	assert.PanicsWithValue(t, "redisstore: New: WithReplicaAcks needs a *redis.Client (one server or Sentinel) or a *redis.ClusterClient, not *redis.Ring",
		func() { redisstore.New(ring, redisstore.WithReplicaAcks(1, time.Second)) })
	assert.NotPanics(t, func() { redisstore.New(ring) }, "a Ring without the option")
}

// requireNoReplicas fails the test unless the test Redis has no replica: the tests below
// need WAIT to come back short.
func requireNoReplicas(t *testing.T, c *redis.Client) {
	t.Helper()
	n, err := c.Do(t.Context(), "wait", 1, 1).Int()
	require.NoError(t, err)
	require.Zero(t, n, "the test Redis at %s has a replica; these tests need one without", redisAddr())
}

// TestReplicaAcksShortAnswers503: on a Redis without replicas, a store that asks for one
// acknowledgement cannot get it. The completion is written on the master but the call
// fails with ErrNotReplicated, so the client gets 503 not-recorded with Retry-After,
// never a 201 that a failover could take back; its retry finds the completion and
// replays it without running the handler again.
func TestReplicaAcksShortAnswers503(t *testing.T) {
	t.Parallel()
	c := newClient(t, "")
	requireNoReplicas(t, c)
	store := redisstore.New(c, redisstore.WithPrefix(newPrefix(t)), redisstore.WithReplicaAcks(1, 20*time.Millisecond))
	var runs counts
	var errs errorsByKey
	srv := serve(t, store, core.Config{Hooks: errs.hooks()}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.add(core.MustOperation(r.Context()).Key())
		created(w, r)
	}))

	first, err := post(t.Context(), srv.URL, "acct", "k", `{"amount":100}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, first.Status, "%v", first)
	assert.Equal(t, "1", first.Header.Get("Retry-After"))
	var p struct{ Type string }
	require.NoError(t, json.Unmarshal(first.Body, &p))
	assert.Equal(t, core.DefaultProblemBase+string(core.ProblemNotRecorded), p.Type, "%v", first)
	require.ErrorIs(t, errs.get("k"), redisstore.ErrNotReplicated)

	again, err := post(t.Context(), srv.URL, "acct", "k", `{"amount":100}`)
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, again.Status, "%v", again)
	assert.True(t, again.replayed(), "the completion stayed on the master")
	assert.Equal(t, 1, runs.get("k"), "handler runs")
}

// TestReplicaAcksShortPhase: a phase whose recovery point too few replicas acknowledged
// returns an error wrapping ErrNotReplicated; the point stays on the master, so a retry
// after the release resumes from it. A fenced write (the lease lost) reports
// ErrLeaseLost, not a missing acknowledgement: it wrote nothing to wait for.
func TestReplicaAcksShortPhase(t *testing.T) {
	t.Parallel()
	c := newClient(t, "")
	requireNoReplicas(t, c)
	store := redisstore.New(c, redisstore.WithPrefix(newPrefix(t)), redisstore.WithReplicaAcks(1, 20*time.Millisecond))
	ctx := t.Context()
	claim := phasedClaim("k", "a")
	l, _, err := seamtest.Split(store.Claim(ctx, claim))
	require.NoError(t, err)
	ran := 0
	err = l.Phase(ctx, "charged", func(ctx context.Context) error { ran++; return nil })
	require.ErrorIs(t, err, redisstore.ErrNotReplicated)
	assert.Equal(t, 1, ran)
	require.NoError(t, l.Release(ctx))
	l, rec, err := seamtest.Split(store.Claim(ctx, claim))
	require.NoError(t, err)
	require.Nil(t, rec)
	assert.True(t, l.Resumed())
	assert.Equal(t, "charged", l.RecoveryPoint(), "the point recorded on the master")

	stale, _, err := seamtest.Split(store.Claim(ctx, phasedClaim("fenced", "a")))
	require.NoError(t, err)
	c.Del(ctx, store.Key("tenant", "fenced"))
	_, _, err = seamtest.Split(store.Claim(ctx, phasedClaim("fenced", "a"))) // a new claim, a new token
	require.NoError(t, err)
	require.ErrorIs(t, stale.Complete(ctx, &storage.Response{Status: http.StatusCreated}), storage.ErrLeaseLost)
}

// TestReplicaAcksOnTopologies runs core/storetest with WithReplicaAcks(1, …) on a Redis
// Cluster and on a Sentinel group, whose masters have one replica each: every
// completion and phase gets its acknowledgement, on the key's own master.
func TestReplicaAcksOnTopologies(t *testing.T) {
	t.Parallel()
	for _, topo := range []topology{cluster, sentinel} {
		t.Run(topo.name, func(t *testing.T) {
			t.Parallel()
			spec := topo.spec(t)
			storetest.Run(t, func(t *testing.T) storage.Store {
				return redisstore.New(topoClient(t, spec), redisstore.WithPrefix(newPrefix(t)), redisstore.WithReplicaAcks(1, ackTimeout))
			})
		})
	}
}

// TestReplicaAcksWaitOnTheKeysOwnMaster: on a cluster whose one master has lost its
// replica, a completion of a key on that master fails with ErrNotReplicated, and one on
// another master succeeds: WAIT goes to the key's own master, on the connection that
// wrote the key (on another connection it would count replicas that acknowledged nothing
// of this write).
func TestReplicaAcksWaitOnTheKeysOwnMaster(t *testing.T) {
	t.Parallel()
	c := redistopo.NewCluster(t)
	ctx := t.Context()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	store := redisstore.New(client, redisstore.WithReplicaAcks(1, 100*time.Millisecond))
	slots, err := c.SlotMap(ctx)
	require.NoError(t, err)
	alone := slots[0]
	replica, err := c.ReplicaOf(ctx, alone)
	require.NoError(t, err)
	require.NoError(t, replica.Kill())

	var onAlone, elsewhere string
	for i := 0; onAlone == "" || elsewhere == ""; i++ {
		key := fmt.Sprintf("k%d", i)
		if slots.Of(store.Key("tenant", key)) == alone {
			onAlone = cmp.Or(onAlone, key)
		} else {
			elsewhere = cmp.Or(elsewhere, key)
		}
	}
	complete := func(key string) error {
		l, rec, err := seamtest.Split(store.Claim(ctx, phasedClaim(key, "a")))
		require.NoError(t, err)
		require.Nil(t, rec)
		return l.Complete(ctx, &storage.Response{Status: http.StatusCreated})
	}
	require.ErrorIs(t, complete(onAlone), redisstore.ErrNotReplicated, "a key on the master without a replica")
	require.NoError(t, complete(elsewhere), "a key on a master with its replica")
}
