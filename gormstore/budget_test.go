package gormstore_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/driver/postgres"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/internal/testdb"
)

// pgxTrace records every statement pgx sends (database/sql does not pipeline: each is a
// round trip), BEGIN, COMMIT and ROLLBACK included, which a GORM logger never sees.
type pgxTrace struct {
	mu   sync.Mutex
	sent []string
}

var _ pgx.QueryTracer = (*pgxTrace)(nil)

func (tr *pgxTrace) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.sent = append(tr.sent, statementLabel(data.SQL))
	return ctx
}

func (tr *pgxTrace) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// take returns the labels of the statements sent since the last take.
func (tr *pgxTrace) take() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	s := tr.sent
	tr.sent = nil
	return s
}

// statementLabel names a statement of the store (or the test's order) by what it does.
func statementLabel(sql string) string {
	s := strings.ToLower(strings.Join(strings.Fields(sql), " "))
	switch {
	case s == "begin", strings.HasPrefix(s, "begin "):
		return "begin"
	case s == "commit", s == "rollback":
		return s
	case strings.Contains(s, "pg_try_advisory_xact_lock"):
		return "claim"
	case strings.Contains(s, "set_config('lock_timeout'"):
		return "lock wait"
	case strings.HasPrefix(s, "select exists"):
		return "look again"
	case strings.HasPrefix(s, "insert into") && strings.Contains(s, "orders"):
		return "orders"
	case strings.HasPrefix(s, "insert into") && strings.Contains(s, "on conflict"):
		return "claim row"
	case strings.HasPrefix(s, "insert into"), strings.HasPrefix(s, "update"):
		return "record"
	case strings.HasPrefix(s, "select"):
		return "select"
	}
	return s
}

// TestStatementBudget counts what the default atomic claim on PostgreSQL sends, one
// statement per round trip: a first request whose handler inserts one order is BEGIN, the
// claim statement (the key's row, and the advisory lock taken since none holds the key),
// the look again under the lock, the order, the completed key row, COMMIT: one round trip
// more than a bare transaction with its key row (BEGIN, INSERT, INSERT, COMMIT). A replay
// is BEGIN, the claim statement (which returns the completed row and leaves the lock
// alone), ROLLBACK: no write. WithLookupFirst replays with one statement outside a
// transaction, and pays for it on the first request. WithClaimRowFirst sets the lock wait
// for the transaction, handler included, and claims with the started row; nothing puts
// the lock wait back, since it ends with the transaction.
func TestStatementBudget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		opts          []gormstore.Option
		first, replay []string
	}{{
		name:   "default",
		first:  []string{"begin", "claim", "look again", "orders", "record", "commit"},
		replay: []string{"begin", "claim", "rollback"},
	}, {
		name:   "WithLookupFirst",
		opts:   []gormstore.Option{gormstore.WithLookupFirst()},
		first:  []string{"select", "begin", "claim", "look again", "orders", "record", "commit"},
		replay: []string{"select"},
	}, {
		name:   "WithClaimRowFirst",
		opts:   []gormstore.Option{gormstore.WithClaimRowFirst()},
		first:  []string{"begin", "lock wait", "claim row", "orders", "record", "commit"},
		replay: []string{"begin", "lock wait", "claim row", "select", "rollback"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			connURL, _ := testdb.PostgresSchema(t)
			cfg, err := pgx.ParseConfig(connURL)
			require.NoError(t, err)
			tr := &pgxTrace{}
			cfg.Tracer = tr
			db := withOrders(t, finish(t, postgres.New(postgres.Config{Conn: stdlib.OpenDB(*cfg)})))
			s := migrated(t, db, tc.opts...)
			tr.take()

			c := claimFor("k", "a", storage.ModeAtomic)
			lock := mustLock(t, s, c)
			require.NoError(t, gormstore.MustDB(lock.Context(t.Context())).Create(&order{Ref: "a", Amount: 1}).Error)
			require.NoError(t, lock.Complete(t.Context(), created))
			assert.Equal(t, tc.first, tr.take(), "a first request")

			rec := mustRecord(t, s, c)
			assert.Equal(t, storage.StateCompleted, rec.State)
			assert.Equal(t, tc.replay, tr.take(), "a replay")
		})
	}
}
