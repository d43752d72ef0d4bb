package pgtopo_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/pgtopo"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// TestFailoverAndHeal: a row committed on the primary is on the standby once the primary
// is killed and the standby promoted (synchronous replication); a pool on the multi-host
// URL writes again after the promotion; Heal rebuilds the killed node as the new primary's
// standby; Stop leaves no server running.
func TestFailoverAndHeal(t *testing.T) {
	t.Parallel()
	c := pgtopo.New(t, true)
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, c.URL("pool_max_conns=2"))
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, "CREATE TABLE t (id int PRIMARY KEY)")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "INSERT INTO t VALUES (1)")
	require.NoError(t, err)

	old := c.Primary()
	_, _, err = c.KillPrimary()
	require.NoError(t, err)
	assert.False(t, old.Running())
	_, err = pgx.Connect(ctx, old.URL()+"&connect_timeout=2")
	assert.Error(t, err, "nothing answers on the killed primary's port")
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, c.Promote(wctx))
	require.NotEqual(t, old, c.Primary())

	require.Eventually(t, func() bool {
		_, err := pool.Exec(ctx, "INSERT INTO t VALUES (2)")
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "the pool writes on the promoted standby")
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n))
	assert.Equal(t, 2, n, "the synchronously replicated row survived")

	require.NoError(t, c.Heal(wctx))
	assert.True(t, old.Running(), "the killed node runs again, as a standby")
	require.NoError(t, c.Stop())
	for _, nd := range c.Nodes {
		assert.False(t, nd.Running())
	}
}
