package reliability_test

import (
	"context"
	"database/sql"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/gormstore"
)

// TestLockTimeoutInGormHandler: gormstore on PostgreSQL follows pgxstore's rule
// (TestLockTimeoutInHandler), whichever claim it makes: the claim's lock wait is the
// transaction's lock_timeout, so a handler waiting for a business row lock held by
// another request gets 55P03 after it instead of waiting as long as the other holds it;
// the application answers 503, nothing is recorded, and the retry succeeds.
func TestLockTimeoutInGormHandler(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []gormstore.Option
	}{
		{name: "SingleWrite"},
		{name: "WithClaimRowFirst", opts: []gormstore.Option{gormstore.WithClaimRowFirst()}},
		{name: "RepeatableRead", opts: []gormstore.Option{gormstore.WithIsolation(sql.LevelRepeatableRead)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newGormDB(t, onPostgres)
			require.NoError(t, d.check.Exec(`CREATE TABLE stock (id int PRIMARY KEY, n int NOT NULL)`).Error)
			require.NoError(t, d.check.Exec(`INSERT INTO stock VALUES (1, 10)`).Error)
			a := newGormApp(t, d, gormAppConfig{direct: true, opts: tc.opts, cfg: core.Config{LockWait: 300 * time.Millisecond}})
			takeStock := func(_ context.Context, tx *gorm.DB, _ *http.Request) error {
				return tx.Exec(`UPDATE stock SET n = n - 1 WHERE id = 1`).Error
			}
			a.business.Store(&takeStock)
			g := newGate("takes-stock")
			first := holder(t, a, g, "acct", jsonBody(1)) // its handler holds the stock row

			ch := make(chan reply, 1)
			go func() { ch <- a.post("acct", "wants-stock", "", jsonBody(2)) }()
			blocked, ok := waitReply(ch, unbounded)
			if !ok {
				close(g.open) // the first commits and frees the row: the server can shut down
				t.Fatalf("no answer after %v from a handler waiting for the stock row: its wait is unbounded (then: %v)", unbounded, <-ch)
			}
			require.Equal(t, http.StatusServiceUnavailable, blocked.status,
				"request waiting for the stock row: %v, want the application's 503", blocked)
			assert.Contains(t, string(blocked.body), "55P03", "the handler's wait ended at lock_timeout")
			_, recorded := d.keyState("acct", "wants-stock")
			assert.False(t, recorded, "the 503 was recorded")
			assert.Zero(t, d.orders("acct", "wants-stock"), "the 503's order was kept")

			close(g.open)
			require.Equal(t, http.StatusCreated, (<-first).status, "the first request")
			retry := a.post("acct", "wants-stock", "", jsonBody(2))
			require.Equal(t, http.StatusCreated, retry.status, "the retry: %v", retry)
			assert.False(t, retry.replayed(), "the retry ran the handler")
			assert.Equal(t, 8, d.count(`SELECT n FROM stock WHERE id = 1`), "stock")
			assert.Equal(t, 2, d.count(`SELECT count(*) FROM orders`), "orders")
		})
	}
}
