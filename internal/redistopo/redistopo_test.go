package redistopo_test

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/redistopo"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := redistopo.StopShared(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// alive reports whether a process with pid runs (or is a zombie not yet reaped).
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// TestClusterFailsOverAndHeals: the cluster serves keys on every master through a
// ClusterClient; a master SIGKILLed is replaced by its replica; Heal brings the killed
// node back as a replica; Stop leaves no process.
func TestClusterFailsOverAndHeals(t *testing.T) {
	t.Parallel()
	c := redistopo.NewCluster(t)
	ctx := t.Context()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer client.Close()
	for i := range 30 {
		require.NoError(t, client.Set(ctx, fmt.Sprintf("k%d", i), i, 0).Err())
	}
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	require.Len(t, masters, 3)
	victim, err := c.MasterOf(ctx, "k0")
	require.NoError(t, err)
	require.NoError(t, victim.Kill())
	require.False(t, victim.Running())

	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, c.Heal(wctx))
	after, err := c.MasterOf(ctx, "k0")
	require.NoError(t, err)
	assert.NotEqual(t, victim.Addr, after.Addr, "the replica took the killed master's slots")
	require.NoError(t, c.Stop())
	for _, s := range c.Nodes {
		assert.False(t, s.Running(), s.Addr)
	}
}

// TestSentinelFailsOverAndHeals: the sentinels promote the replica of a SIGKILLed master;
// Heal brings the killed node back as the new master's replica.
func TestSentinelFailsOverAndHeals(t *testing.T) {
	t.Parallel()
	s := redistopo.NewSentinel(t)
	ctx := t.Context()
	m, err := s.Master(ctx)
	require.NoError(t, err)
	require.Equal(t, s.Data[0], m)
	client := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistopo.MasterName, SentinelAddrs: s.SentinelAddrs()})
	defer client.Close()
	require.NoError(t, client.Set(ctx, "k", "v", 0).Err())
	require.NoError(t, m.Kill())

	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, s.Heal(wctx))
	now, err := s.Master(ctx)
	require.NoError(t, err)
	assert.Equal(t, s.Data[1], now)
	require.NoError(t, s.Stop())
}

// TestSlotIsRedisKeySlot: Slot agrees with CLUSTER KEYSLOT, hash tags included.
func TestSlotIsRedisKeySlot(t *testing.T) {
	t.Parallel()
	c := redistopo.SharedCluster(t)
	ctx := t.Context()
	for _, k := range []string{"", "a", "foo", "user:{1000}:x", "{}", "{a}{b}", "x{}y", "{user1000}.following", "idem:{0123abcd}", "\xff\x00"} {
		got, err := c.Nodes[0].Do(ctx, "cluster", "keyslot", k)
		require.NoError(t, err)
		assert.EqualValues(t, got, redistopo.Slot(k), "%q", k)
	}
	m, err := c.SlotMap(ctx)
	require.NoError(t, err)
	owners := map[*redistopo.Server]int{}
	for _, s := range m {
		owners[s]++
	}
	assert.Len(t, owners, 3, "three masters share the slots")
}
