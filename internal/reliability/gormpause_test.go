package reliability_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
)

// TestGormPausedDatabaseClaimIsBounded: the database stops answering and the request has
// no deadline of its own (net/http gives none by default). The claim must be bounded by
// LockWait + StoreTimeout and answer 503 + Retry-After, the handler not run, as pgxstore's
// is (TestPausedDatabaseWithoutDeadline).
//
// It was a bug: gormstore began the claim's transaction with the request's context, so
// BEGIN waited as long as the database was paused; a claim now begins under a context the
// claim's deadline cancels while it runs (gormstore's claimBounded).
func TestGormPausedDatabaseClaimIsBounded(t *testing.T) {
	t.Parallel()
	for _, dialect := range []gormDialect{onPostgres, onMariaDB} {
		t.Run(dialect.String(), func(t *testing.T) {
			t.Parallel()
			d := newGormDB(t, dialect)
			a := newGormApp(t, d, gormAppConfig{cfg: core.Config{LockWait: time.Second, StoreTimeout: 2 * time.Second}})
			require.Equal(t, http.StatusCreated, a.post("acct", "before", "", jsonBody(1)).status)
			a.proxy.Stall()
			ch := make(chan reply, 1)
			go func() { ch <- a.post("acct", "paused", "", jsonBody(2)) }()
			r, ok := waitReply(ch, unbounded)
			a.proxy.Resume()
			if !ok {
				t.Fatalf("no answer after %v while the database was paused: the claim is unbounded (then: %v)", unbounded, <-ch)
			}
			mustProblem(t, r, http.StatusServiceUnavailable, core.ProblemStoreUnavailable, true)
			assert.EqualValues(t, 1, a.calls.Load(), "the handler ran while the store was paused")
		})
	}
}
