package e2e

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/internal/redistopo"
)

// TestRedisMasterKillUnderLoad: gin-orders keeps the payments' keys on a Redis Cluster
// of its own (three masters, each with a replica) with -redis-replica-acks 1, and the
// kill run's mixed load SIGKILLs the master of the slots' first range instead of the
// server, which keeps running. Every key is then re-sent until it gets its final answer
// (503s while the replica is promoted are waited out per Retry-After), and the same
// checks as TestKillUnderLoad hold: every answer seen before the kill is replayed byte
// for byte, every key has exactly one order, or one payment with one provider charge.
func TestRedisMasterKillUnderLoad(t *testing.T) {
	t.Parallel()
	cluster := redistopo.NewCluster(t)
	slots, err := cluster.SlotMap(t.Context())
	require.NoError(t, err)
	victim := slots[0]

	dir, env := sqlite.setup(t)
	env = append(env, "IDEM_STORE=redis", "REDIS_ADDR="+strings.Join(cluster.Addrs(), ","), "IDEM_REDIS_PREFIX=e2e:",
		"IDEM_REDIS_REPLICA_ACKS=1")
	s := start(t, "gin-orders", dir, env, "-lease", killLease.String())
	run := newKillRun(randomSeed())
	run.killRedis = func() { assert.NoError(t, victim.Kill()) }
	t.Logf("seed %d: kill Redis master %s when request %d of %d is written", run.seed, victim.Addr, run.killAt, run.requests)
	run.load(t, s)
	run.recover(t, s)
	c := run.check(t, s)
	t.Logf("gin-orders/sqlite-redis-cluster: %s", c)
	assert.Zero(t, c.twice, "keys executed twice")
	assert.Zero(t, c.lost, "acknowledged keys lost")
	s.shutdown(t)
}
