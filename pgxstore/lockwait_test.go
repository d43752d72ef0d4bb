package pgxstore_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgxstore"
)

// ownLockTimeout is the lock_timeout the test pool's connections are configured with:
// longer than any lock wait below, so that a wait bounded by it instead of the claim's
// lock wait would not end in the test's time.
const ownLockTimeout = "5min"

// lockTimeoutPool opens a pool whose connections start with lock_timeout ownLockTimeout.
func lockTimeoutPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testdb.PostgresURL())
	require.NoError(t, err)
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = ownLockTimeout
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err, "PostgreSQL at %s: %s", testdb.PostgresURL(), startPostgres)
	t.Cleanup(p.Close)
	require.NoError(t, p.Ping(ctx))
	return p
}

// twin stands for a request in flight on the key: a transaction of the test's that holds
// what a twin's claim holds (the key's advisory lock, or its row), until release.
type twin struct {
	tx  pgx.Tx
	pid int32
}

// holdKey starts a twin on (acme, key): with row, a started key row (uncommitted, as a
// row-first claim writes it); without, the key's advisory lock (as a single-write claim
// takes it); with locked, the lock of the committed row already holding the key.
func holdKey(t *testing.T, store *pgxstore.Store, schema, key, how string) *twin {
	t.Helper()
	ctx := context.Background()
	tx, err := sharedPool(t).Begin(ctx)
	require.NoError(t, err)
	tw := &twin{tx: tx}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&tw.pid))
	switch how {
	case "row":
		_, err = tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.idempotency_keys (scope, idem_key, request_hash, state)
			VALUES ('acme', $1, '\x00', 'started')`, schema), key)
	case "lock":
		_, err = tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, store.LockHash("acme", key))
	case "locked":
		_, err = tx.Exec(ctx, fmt.Sprintf(`SELECT 1 FROM %s.idempotency_keys WHERE scope = 'acme' AND idem_key = $1 FOR UPDATE`, schema), key)
	}
	require.NoError(t, err, "the twin's %s", how)
	return tw
}

// release ends the twin without a trace, as a twin whose handler failed.
func (tw *twin) release(t *testing.T) {
	t.Helper()
	require.NoError(t, tw.tx.Rollback(context.Background()))
}

// postWhileHeld sends a request for key while tw holds it, waits until the database
// shows the request waiting for tw, lets tw go if release says so, and returns the reply.
func postWhileHeld(t *testing.T, s *shop, tw *twin, key string, release bool) reply {
	t.Helper()
	done := make(chan reply, 1)
	go func() { done <- s.post(key, `{"amount": 100, "customer": 1}`) }()
	if release {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(t, testdb.AwaitBlockedBy(ctx, tw.pid, 1), "the request never waited for its twin")
		tw.release(t)
	}
	r := <-done
	if !release {
		tw.release(t)
	}
	return r
}

// expire makes the completed key row past any retention: a claim replaces it.
func expire(t *testing.T, s *shop, key string) {
	t.Helper()
	exec(t, s.db, fmt.Sprintf(`INSERT INTO %s.idempotency_keys (scope, idem_key, request_hash, state, response_code, created_at, completed_at)
		VALUES ('acme', $1, '\x00', 'completed', 201, now() - interval '400 days', now() - interval '400 days')`, s.schema), key)
}

// TestHandlerRunsUnderItsOwnLockTimeout: whichever way the atomic claim got the key (at
// once, after waiting for a twin, by replacing an expired row), with the default single
// write and with WithClaimRowFirst, the handler's statements run under the connection's
// own lock_timeout, not the claim's lock wait; and a twin's wait still ends, after the
// lock wait, in 409.
func TestHandlerRunsUnderItsOwnLockTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []pgxstore.Option
		hold string // what a twin in flight holds
	}{
		{"single-write", nil, "lock"},
		{"row-first", []pgxstore.Option{pgxstore.WithClaimRowFirst()}, "row"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := lockTimeoutPool(t)
			var mu sync.Mutex
			seen := map[string]string{} // key → the handler's lock_timeout
			show := func(s *shop) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					s.calls.Add(1)
					ctx := r.Context()
					var lt string
					if err := pgxstore.Tx(ctx).QueryRow(ctx, `SHOW lock_timeout`).Scan(&lt); err != nil {
						http.Error(w, err.Error(), http.StatusInternalServerError)
						return
					}
					mu.Lock()
					seen[core.OperationFrom(ctx).Key()] = lt
					mu.Unlock()
					w.WriteHeader(http.StatusCreated)
					fmt.Fprintf(w, `{"lock_timeout":%q}`, lt)
				}
			}
			store, schema := newStore(t, db, tc.opts...)
			s := newShopOn(t, db, store, schema, core.Config{LockWait: 10 * time.Second}, show)

			r := s.post("free", `{}`)
			require.Equal(t, http.StatusCreated, r.status, "%v", r)

			r = postWhileHeld(t, s, holdKey(t, store, schema, "waited", tc.hold), "waited", true)
			require.Equal(t, http.StatusCreated, r.status, "%v", r)
			require.False(t, r.replayed(), "the twin left nothing to replay")

			expire(t, s, "replaced")
			r = s.post("replaced", `{}`)
			require.Equal(t, http.StatusCreated, r.status, "%v", r)
			require.False(t, r.replayed(), "an expired key is claimed afresh")

			mu.Lock()
			assert.Equal(t, map[string]string{"free": ownLockTimeout, "waited": ownLockTimeout, "replaced": ownLockTimeout}, seen,
				"the handler runs under the connection's lock_timeout")
			mu.Unlock()
			require.EqualValues(t, 3, s.calls.Load())

			// The store's own waits stay bounded by the lock wait, far shorter than the
			// connection's lock_timeout: a twin that does not let go gets 409.
			store2, schema2 := newStore(t, db, tc.opts...)
			s2 := newShopOn(t, db, store2, schema2, core.Config{LockWait: 200 * time.Millisecond}, show)
			r = postWhileHeld(t, s2, holdKey(t, store2, schema2, "held", tc.hold), "held", false)
			assert.Equal(t, http.StatusConflict, r.status, "%v", r)
			assert.NotEmpty(t, r.header.Get("Retry-After"))
			expire(t, s2, "held-row")
			r = postWhileHeld(t, s2, holdKey(t, store2, schema2, "held-row", "locked"), "held-row", false)
			assert.Equal(t, http.StatusConflict, r.status, "a replace waiting for a racer's row lock: %v", r)
			assert.Zero(t, s2.calls.Load(), "no handler ran while a twin held its key")
			assert.Equal(t, 0, count(t, db, fmt.Sprintf(`SELECT count(*) FROM %s.idempotency_keys WHERE idem_key = 'held'`, schema2)))
		})
	}
}
