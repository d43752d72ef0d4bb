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

// waitingOn counts the transactions waiting for the advisory lock of (scope, key).
func waitingOn(ctx context.Context, db *pgxpool.Pool, store *pgxstore.Store, scope, key string) (int, error) {
	h := uint64(store.LockHash(scope, key))
	var n int
	err := db.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
		AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1`,
		int64(h>>32), int64(h&0xffffffff)).Scan(&n)
	return n, err
}

// postTwins sends n identical requests at once and returns the replies.
func postTwins(s *shop, key string, n int) []reply {
	replies := make([]reply, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range replies {
		wg.Go(func() {
			<-start
			replies[i] = s.post(key, `{"amount": 100, "customer": 1}`)
		})
	}
	close(start)
	wg.Wait()
	return replies
}

// TestAtomicTwinsRunTheHandlerOnce (the default single write): 20 and 200 identical requests at once, while the
// first holds the key's advisory lock until the database shows the others waiting for it.
// The handler runs once; one order and one key row commit; every other client gets a
// byte-identical replay (or 409 when its lock wait ran out).
//
// Not parallel with the package's other tests: 200 twins saturate the pool and the two
// CPUs, and the others would then time out waiting for connections.
//
// READ COMMITTED only: at REPEATABLE READ the store writes the key row first (twins wait
// on the row: TestMiddlewareParallelIdentical covers it).
func TestAtomicTwinsRunTheHandlerOnce(t *testing.T) {
	func(t *testing.T, iso pgx.TxIsoLevel) {
		for _, n := range []int{20, 200} {
			t.Run(fmt.Sprint(n), func(t *testing.T) {
				db := newPool(t, poolSize, nil)
				store, schema := newStore(t, db, pgxstore.WithIsolation(iso))
				s := newShopOn(t, db, store, schema, core.Config{LockWait: 10 * time.Second}, nil)
				key := fmt.Sprintf("twins-%d", n)
				// The pool has poolSize connections: the first request holds one, and up to
				// poolSize-1 twins can wait in the database at once.
				want := min(n-1, poolSize-1)
				poll := sharedPool(t) // not s.db: the request and its twins hold all of its connections
				s.before = func(r *http.Request, attempt int) int {
					if attempt != 1 {
						return 0
					}
					ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
					defer cancel()
					tick := time.NewTicker(5 * time.Millisecond)
					defer tick.Stop()
					for { // poll the database until the twins wait for this request's lock
						waiting, err := waitingOn(ctx, poll, s.store, "acme", key)
						if err != nil {
							return http.StatusInternalServerError
						}
						if waiting >= want {
							return 0
						}
						select {
						case <-ctx.Done():
							return http.StatusInternalServerError
						case <-tick.C:
						}
					}
				}
				replies := postTwins(s, key, n)
				_, replays, conflicts := checkReplies(t, replies)
				t.Logf("%d twins: 1 original, %d replays, %d conflicts", n, replays, conflicts)
				assert.EqualValues(t, 1, s.calls.Load(), "the handler runs once for %d twins", n)
				assert.Equal(t, 1, s.orders("true"), "orders")
				assert.Equal(t, 1, s.keys(), "key rows")
			})
		}
	}(t, pgx.ReadCommitted)
}

// TestAtomicWithoutAdvisoryLocks runs the store (the default single write) on a database whose advisory-lock
// functions accept the call and do not lock, as some distributed engines do: the test's
// schema defines pg_try_advisory_xact_lock and pg_advisory_xact_lock as no-ops and the
// connections search it before pg_catalog, so the store's own SQL is unchanged. Eight
// twins then all run the handler at once (each waits until all eight have written their
// order); the primary key lets exactly one record the key, the others' INSERT fails, and
// their transactions roll back with their orders (storage.ErrRecordedFirst), and each of
// them answers with the winner's replay: one order, one key row, one 201 and seven
// byte-identical replays. READ COMMITTED only: at REPEATABLE READ
// the store writes the key row first, and twins wait on it (as with WithClaimRowFirst).
func TestAtomicWithoutAdvisoryLocks(t *testing.T) {
	t.Parallel()
	func(t *testing.T, iso pgx.TxIsoLevel) {
		const n = 8
		_, schema := testdb.PostgresSchema(t)
		exec(t, sharedPool(t), fmt.Sprintf(`
			CREATE FUNCTION %[1]s.pg_try_advisory_xact_lock(bigint) RETURNS boolean LANGUAGE sql AS 'SELECT true';
			CREATE FUNCTION %[1]s.pg_advisory_xact_lock(bigint) RETURNS void LANGUAGE sql AS 'SELECT'`, schema))
		cfg, err := pgxpool.ParseConfig(testdb.PostgresURL())
		require.NoError(t, err)
		cfg.MaxConns = 2 * n
		cfg.ConnConfig.RuntimeParams["search_path"] = schema + ", pg_catalog"
		db, err := pgxpool.NewWithConfig(context.Background(), cfg)
		require.NoError(t, err)
		t.Cleanup(db.Close)

		var ok bool
		require.NoError(t, db.QueryRow(context.Background(), `SELECT pg_try_advisory_xact_lock(1) AND pg_try_advisory_xact_lock(1)`).Scan(&ok))
		require.True(t, ok)

		store := pgxstore.New(db, pgxstore.WithTable(schema+".idempotency_keys"), pgxstore.WithIsolation(iso))
		require.NoError(t, store.Migrate(context.Background()))
		s := newShopOn(t, db, store, schema, core.Config{LockWait: 10 * time.Second}, nil)
		var mu sync.Mutex
		started := 0
		all := make(chan struct{})
		s.before = func(r *http.Request, _ int) int {
			mu.Lock()
			if started++; started == n {
				close(all)
			}
			mu.Unlock()
			select {
			case <-all:
				return 0
			case <-r.Context().Done():
				return http.StatusInternalServerError
			}
		}
		replies := postTwins(s, "no-lock", n)
		assert.EqualValues(t, n, s.calls.Load(), "without the advisory lock every twin runs the handler")
		var original *reply
		replayed := 0
		for i, r := range replies {
			switch {
			case r.status == http.StatusCreated && !r.replayed():
				assert.Nil(t, original, "a second original %v", r)
				original = &replies[i]
			case r.status == http.StatusCreated:
				replayed++
			default:
				t.Errorf("unexpected reply %v", r)
			}
		}
		require.NotNil(t, original, "one twin's request is recorded")
		assert.Equal(t, n-1, replayed, "the others fail on the key's INSERT and answer with its replay")
		for _, r := range replies {
			assert.Equal(t, original.body, r.body, "every twin gets the recorded body")
		}
		assert.Equal(t, 1, s.orders("true"), "the losers' orders rolled back")
		assert.Equal(t, 1, s.keys(), "key rows")
		r := s.post("no-lock", `{"amount": 100, "customer": 1}`)
		assert.Equal(t, http.StatusCreated, r.status)
		assert.True(t, r.replayed(), "a retry after the collision is a replay: %v", r)

		// Twins with different bodies: the loser rolls back and answers 422.
		mu.Lock()
		started, all = n-2, make(chan struct{})
		mu.Unlock()
		mixed := make([]reply, 2)
		var wg sync.WaitGroup
		for i := range mixed {
			wg.Go(func() { mixed[i] = s.post("no-lock-mixed", fmt.Sprintf(`{"amount": %d, "customer": 1}`, 100+i)) })
		}
		wg.Wait()
		statuses := []int{mixed[0].status, mixed[1].status}
		assert.ElementsMatch(t, []int{http.StatusCreated, http.StatusUnprocessableEntity}, statuses, "mixed twins: %v", mixed)
		assert.Equal(t, 2, s.orders("true"), "the loser's order rolled back")
	}(t, pgx.ReadCommitted)
}
