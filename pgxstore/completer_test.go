package pgxstore_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgxstore"
)

// TestMigrateAddsCompleterColumns: a table made before the completer's columns existed
// gets them from Migrate, and then keeps requests.
func TestMigrateAddsCompleterColumns(t *testing.T) {
	t.Parallel()
	db := sharedPool(t)
	_, schema := testdb.PostgresSchema(t)
	table := schema + ".before_completer"
	exec(t, db, `CREATE TABLE `+table+` (
    scope text NOT NULL, idem_key text NOT NULL, request_hash bytea NOT NULL,
    method text NOT NULL DEFAULT '', path text NOT NULL DEFAULT '',
    state text NOT NULL DEFAULT 'started' CHECK (state IN ('started', 'completed')),
    recovery_point text NOT NULL DEFAULT 'started', locked_until timestamptz, lease_token uuid,
    response_code integer, response_headers bytea, response_body bytea,
    created_at timestamptz NOT NULL DEFAULT now(), completed_at timestamptz,
    PRIMARY KEY (scope, idem_key))`)
	store := pgxstore.New(db, pgxstore.WithTable(table))
	require.NoError(t, store.Migrate(t.Context()))

	c := testClaim("migrated", storage.ModePhased)
	c.Request = &storage.Request{Method: http.MethodPost, URI: "/pay?x=1", Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{}`)}
	lock := mustLock(t, store, c)
	require.NoError(t, lock.Phase(t.Context(), "charged", func(context.Context) error { return nil }))
	require.NoError(t, lock.Release(t.Context()))
	recs, err := store.Abandoned(t.Context(), storage.AbandonedQuery{Horizon: time.Hour, MaxAttempts: 1, Limit: 10})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, c.Request, recs[0].Request)
}
