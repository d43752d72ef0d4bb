package main

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/internal/pgtopo"
	"github.com/idemkit/idem/pgxstore"
)

// TestShowStatsOnAMultiHostURL: migrate, show and stats take the multi-host URL an
// application uses (target_session_attrs=read-write) and follow it to the promoted
// standby after the primary's SIGKILL, where the keys recorded before the failover are
// (synchronous replication).
func TestShowStatsOnAMultiHostURL(t *testing.T) {
	t.Parallel()
	c := pgtopo.New(t, true)
	url := c.URL()
	dbt := []string{"-db", url, "-table", "idem_keys"}
	_, stderr, code := idem(t, append([]string{"migrate"}, dbt...)...)
	require.Equal(t, 0, code, stderr)
	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	defer pool.Close()
	seed(t, pgxstore.New(pool, pgxstore.WithTable("idem_keys")), 2)

	_, _, err = c.KillPrimary()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	require.NoError(t, c.Promote(ctx))

	out, stderr, code := idem(t, append([]string{"show", "-scope", "alice", "-key", "k1"}, dbt...)...)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "state           completed")
	out, stderr, code = idem(t, append([]string{"stats"}, dbt...)...)
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `completed +2\n`, out)
}
