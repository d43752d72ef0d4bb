package rivertest

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/idemriver"
)

// serve serves a on a loopback port for the test's duration and returns its URL.
func serve(t testing.TB, a *app) string {
	t.Helper()
	srv := httptest.NewServer(a.handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

func mustPost(t testing.TB, base, path, account, key string) *reply {
	t.Helper()
	r, err := post(context.Background(), base, path, account, key)
	require.NoError(t, err, "POST %s", path)
	return r
}

// eachKind runs fn for pgxstore and gormstore on PostgreSQL, in parallel, each on a
// schema of its own.
func eachKind(t *testing.T, fn func(t *testing.T, be *backend)) {
	t.Parallel()
	for _, k := range kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			fn(t, newBackend(t, k))
		})
	}
}

var errInjected = errors.New("injected failure")

// TestJobCommitsWithItsTransaction: a phase's jobs commit with the phase, an atomic
// request's with the request; replays insert nothing.
func TestJobCommitsWithItsTransaction(t *testing.T) {
	eachKind(t, func(t *testing.T, be *backend) {
		base := serve(t, newApp(be, 0, nil))
		for _, c := range []struct{ path, table, point string }{
			{"/v1/payments", "payments", atFinished},
			{"/v1/orders", "orders", orderPhase},
		} {
			account, key := operation()
			first := mustPost(t, base, c.path, account, key)
			require.Equal(t, http.StatusCreated, first.Status, "%s: %v", c.path, first)
			assert.Equal(t, once(c.point), be.mustCount(t, c.table, account, key), c.path)
			replay := mustPost(t, base, c.path, account, key)
			assert.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"), "%s: %v", c.path, replay)
			assert.Equal(t, once(c.point), be.mustCount(t, c.table, account, key), "%s after the replay", c.path)
		}
	})
}

// TestFailedPhaseLeavesNoJob: a phase that fails, or panics, after it enqueued keeps none
// of its jobs; the retry resumes after the last committed phase and enqueues them once.
func TestFailedPhaseLeavesNoJob(t *testing.T) {
	eachKind(t, func(t *testing.T, be *backend) {
		for _, how := range []string{"error", "panic"} {
			failing := true
			base := serve(t, newApp(be, 0, func(_ context.Context, _ *core.Operation, at string) error {
				if at == atEnqueued && failing {
					failing = false
					if how == "panic" {
						panic(errInjected)
					}
					return errInjected
				}
				return nil
			}))
			account, key := operation()
			r := mustPost(t, base, "/v1/payments", account, key)
			require.Equal(t, http.StatusInternalServerError, r.Status, "%s: %v", how, r)
			assert.Equal(t, tally{State: string(storage.StateStarted), Point: "charged"}, be.mustCount(t, "payments", account, key),
				"%s: the failed phase's jobs and payment rolled back, the key kept at charged", how)
			r = mustPost(t, base, "/v1/payments", account, key)
			require.Equal(t, http.StatusCreated, r.Status, "%s: retry %v", how, r)
			assert.Equal(t, once(atFinished), be.mustCount(t, "payments", account, key), "%s: after the retry", how)
		}
	})
}

// TestRolledBackRequestLeavesNoJob: an atomic request that fails after it enqueued rolls
// its jobs back with its order and its key; the retry enqueues them once.
func TestRolledBackRequestLeavesNoJob(t *testing.T) {
	eachKind(t, func(t *testing.T, be *backend) {
		failing := true
		base := serve(t, newApp(be, 0, func(_ context.Context, _ *core.Operation, at string) error {
			if at == atOrderEnqueued && failing {
				failing = false
				return errInjected
			}
			return nil
		}))
		account, key := operation()
		r := mustPost(t, base, "/v1/orders", account, key)
		require.Equal(t, http.StatusInternalServerError, r.Status, "%v", r)
		assert.Equal(t, tally{}, be.mustCount(t, "orders", account, key), "nothing of the failed request stays")
		r = mustPost(t, base, "/v1/orders", account, key)
		require.Equal(t, http.StatusCreated, r.Status, "retry: %v", r)
		assert.Equal(t, once(orderPhase), be.mustCount(t, "orders", account, key))
	})
}

// TestFailedAtomicPhaseLeavesNoJob: in atomic mode a phase is a savepoint: one that fails
// after it enqueued loses its jobs, while the request's other writes commit with its 201.
func TestFailedAtomicPhaseLeavesNoJob(t *testing.T) {
	eachKind(t, func(t *testing.T, be *backend) {
		base := serve(t, newApp(be, 0, func(_ context.Context, _ *core.Operation, at string) error {
			if at == atOrderEnqueued {
				return errPhaseOnly
			}
			return nil
		}))
		account, key := operation()
		r := mustPost(t, base, "/v1/orders", account, key)
		require.Equal(t, http.StatusCreated, r.Status, "%v", r)
		assert.Equal(t, tally{Rows: 1, State: string(storage.StateCompleted), Point: storage.RecoveryStarted},
			be.mustCount(t, "orders", account, key), "the order committed, the failed phase's jobs did not")
	})
}

// TestFencedOutPhaseLeavesNoJob: worker A enqueues in its finished phase and stalls there
// while its key is taken over (a fresh fencing token, as a takeover writes). A's phase
// then commits nothing: A is answered 409, its payment and jobs are gone, and the retry
// that takes the key over enqueues them once.
func TestFencedOutPhaseLeavesNoJob(t *testing.T) {
	eachKind(t, func(t *testing.T, be *backend) {
		entered, proceed := make(chan struct{}), make(chan struct{})
		base := serve(t, newApp(be, 0, func(ctx context.Context, op *core.Operation, at string) error {
			if at == atEnqueued && !op.Resumed() {
				close(entered)
				<-proceed
			}
			return nil
		}))
		account, key := operation()
		done := make(chan *reply, 1)
		go func() {
			r, err := post(context.Background(), base, "/v1/payments", account, key)
			assert.NoError(t, err)
			done <- r
		}()
		<-entered
		be.takeOver(t, account, key)
		close(proceed)
		r := <-done
		require.NotNil(t, r)
		assert.Equal(t, http.StatusConflict, r.Status, "the fenced-out worker: %v", r)
		assert.Equal(t, tally{State: string(storage.StateStarted), Point: "charged"}, be.mustCount(t, "payments", account, key),
			"the fenced-out phase keeps neither its payment nor its jobs")
		r = mustPost(t, base, "/v1/payments", account, key)
		require.Equal(t, http.StatusCreated, r.Status, "the retry: %v", r)
		assert.Equal(t, once(atFinished), be.mustCount(t, "payments", account, key))
	})
}

// TestUniqueByKey: a job whose args embed idemriver.Key is inserted once per scope and
// derived key, whatever else its args say; the same key in another scope is another job.
func TestUniqueByKey(t *testing.T) {
	eachKind(t, func(t *testing.T, be *backend) {
		eng, err := core.New(core.Config{Store: be.store})
		require.NoError(t, err)
		ctx := context.Background()
		account, other, key := newID("acct_"), newID("acct_"), newID("key_")
		insert := func(scope string, id string) (skipped bool) {
			_, _, err := eng.Do(ctx, scope, id, nil, func(ctx context.Context) ([]byte, error) {
				op := core.MustOperation(ctx)
				key := idemriver.Key{Scope: op.Scope(), DerivedKey: key + ":receipt"} // the same for every id
				res, err := be.insert(ctx, receiptArgs{Key: key, Account: id})
				if err != nil {
					return nil, err
				}
				skipped = res.UniqueSkippedAsDuplicate
				return nil, nil
			})
			require.NoError(t, err)
			return skipped
		}
		assert.False(t, insert(account, newID("msg_")), "the first insert")
		assert.True(t, insert(account, newID("msg_")), "the same Key again, other args: skipped")
		assert.False(t, insert(other, newID("msg_")), "the same derived key in another scope")
		for _, scope := range []string{account, other} {
			tl, err := be.count(ctx, "payments", scope, key)
			require.NoError(t, err)
			assert.Equal(t, 1, tl.Receipts, scope)
		}
	})
}
