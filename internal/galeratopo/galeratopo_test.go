package galeratopo_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"

	_ "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/galeratopo"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func open(t *testing.T, n *galeratopo.Node) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", n.DSN(galeratopo.Database))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// TestClusterReplicatesSurvivesAKillAndHeals: a row written on one node is read on
// another (wsrep_sync_wait); a SIGKILLed node leaves two that still take writes, and Heal
// brings it back with a state transfer; Stop leaves no server running. (A cluster that
// loses quorum is internal/failover's TestGalera.)
func TestClusterReplicatesSurvivesAKillAndHeals(t *testing.T) {
	t.Parallel()
	c := galeratopo.New(t)
	ctx := t.Context()
	db0, db1 := open(t, c.Nodes[0]), open(t, c.Nodes[1])
	_, err := db0.ExecContext(ctx, "CREATE TABLE t (id int PRIMARY KEY)")
	require.NoError(t, err)
	_, err = db0.ExecContext(ctx, "INSERT INTO t VALUES (1)")
	require.NoError(t, err)
	conn, err := db1.Conn(ctx)
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, "SET SESSION wsrep_sync_wait = 1")
	require.NoError(t, err)
	var n int
	require.NoError(t, conn.QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n))
	assert.Equal(t, 1, n)
	require.NoError(t, conn.Close())

	require.NoError(t, c.Nodes[2].Kill())
	wctx, cancel := context.WithTimeout(ctx, galeratopo.StartTimeout)
	defer cancel()
	require.NoError(t, c.WaitSynced(wctx, c.Nodes[0], c.Nodes[1]))
	_, err = db1.ExecContext(ctx, "INSERT INTO t VALUES (2)")
	require.NoError(t, err)
	require.NoError(t, c.Heal(wctx))
	assert.True(t, c.Nodes[2].Running(), "the killed node rejoined")
	require.NoError(t, c.Stop())
	for _, n := range c.Nodes {
		assert.False(t, n.Running())
	}
}
