package pgxstore_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/pgxstore"
)

// statement is one statement the server was sent, as the tracer saw it.
type statement struct {
	label string // what it is: begin, claim, orders, complete, commit…
	// txStatus is the connection's transaction status when the statement (or its
	// batch) was sent: 'I' outside a transaction, 'T' inside one.
	txStatus byte
}

// tracer counts statements and round trips (a query, or a whole batch) on a pool.
type tracer struct {
	mu         sync.Mutex
	statements []statement
	roundTrips int
}

var (
	_ pgx.QueryTracer = (*tracer)(nil)
	_ pgx.BatchTracer = (*tracer)(nil)
)

type batchStatus struct{}

func (tr *tracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.roundTrips++
	tr.statements = append(tr.statements, statement{label(data.SQL), conn.PgConn().TxStatus()})
	return ctx
}

func (tr *tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (tr *tracer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.roundTrips++
	return context.WithValue(ctx, batchStatus{}, conn.PgConn().TxStatus())
}

func (tr *tracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	status, _ := ctx.Value(batchStatus{}).(byte)
	tr.statements = append(tr.statements, statement{label(data.SQL), status})
}

func (tr *tracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// take returns what was counted since the last take.
func (tr *tracer) take() ([]statement, int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	s, n := tr.statements, tr.roundTrips
	tr.statements, tr.roundTrips = nil, 0
	return s, n
}

// label names a statement by its first words.
func label(sql string) string {
	s := strings.ToLower(strings.Join(strings.Fields(sql), " "))
	switch {
	case strings.HasPrefix(s, "begin"):
		return "begin"
	case strings.Contains(s, "advisory_xact_lock"):
		return "lock"
	case strings.HasPrefix(s, "insert into") && strings.Contains(s, "'completed'"):
		return "record"
	case s == "commit", s == "rollback":
		return s
	case strings.HasPrefix(s, "with ins as"), strings.HasPrefix(s, "insert into") && strings.Contains(s, "idempotency_keys"):
		return "claim"
	case strings.HasPrefix(s, "select false,"):
		return "lookup"
	case strings.Contains(s, "set state = 'completed'"):
		return "complete"
	case strings.Contains(s, ".orders"):
		return "orders"
	}
	return s
}

func labels(stmts []statement) []string {
	out := make([]string, len(stmts))
	for i, s := range stmts {
		out[i] = s.label
	}
	return out
}

// TestStatementBudget counts, with a pgx tracer, the statements and round trips of a
// first request (whose handler inserts one order) and of a replay, through the
// middleware, on a pool of one connection (which also shows nothing needs a second one).
func TestStatementBudget(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		mode   core.Mode
		opts   []pgxstore.Option
		first  []string // the statements of a first request, in order
		firstR int      // its round trips
		replay []string
		replyR int
		// readOnly: the replay sends no statement that writes, not even an INSERT that
		// conflicts.
		readOnly bool
	}{{
		// The default single write: BEGIN, the key's advisory lock and the lookup in one
		// round trip; the handler's INSERT; the completed key row and COMMIT in one: three
		// round trips (as many as the handler's own BEGIN; INSERT; COMMIT would take) and
		// one write to the key table.
		name:  "atomic",
		mode:  core.ModeAtomic,
		first: []string{"begin", "lock", "lookup", "orders", "record", "commit"}, firstR: 3,
		// The lookup finds the completed row (a row holds the key, so the lock is not
		// even tried); the transaction, which wrote nothing, is rolled back: two round
		// trips.
		replay: []string{"begin", "lock", "lookup", "rollback"}, replyR: 2, readOnly: true,
	}, {
		// BEGIN+claim, the handler's INSERT, completion+COMMIT: three round trips, and
		// the key row written twice.
		name:  "atomic-row-first",
		mode:  core.ModeAtomic,
		opts:  []pgxstore.Option{pgxstore.WithClaimRowFirst()},
		first: []string{"begin", "claim", "orders", "complete", "commit"}, firstR: 3,
		// The claim conflicts; the lookup reads the completed row; the transaction is
		// rolled back.
		replay: []string{"begin", "claim", "lookup", "rollback"}, replyR: 3,
	}, {
		name:  "atomic-lookup-first",
		mode:  core.ModeAtomic,
		opts:  []pgxstore.Option{pgxstore.WithLookupFirst()},
		first: []string{"lookup", "begin", "lock", "lookup", "orders", "record", "commit"}, firstR: 4,
		replay: []string{"lookup"}, replyR: 1, readOnly: true,
	}, {
		// The claim commits alone; the handler's Tx begins the final transaction, which
		// Complete commits with the response (checking the token first).
		name:  "phased",
		mode:  core.ModePhased,
		first: []string{"claim", "begin", "orders", "complete", "commit"}, firstR: 5,
		replay: []string{"claim"}, replyR: 1,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := &tracer{}
			db := newPool(t, 1, tr)
			store, schema := newStore(t, db, tc.opts...)
			exec(t, db, fmt.Sprintf(`CREATE TABLE %s.orders (id bigserial PRIMARY KEY, idem_key text NOT NULL)`, schema))
			eng, err := core.New(core.Config{Store: store, Mode: tc.mode})
			require.NoError(t, err)
			h := eng.Middleware(func(*http.Request) string { return "acme" })(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx := r.Context()
				if _, err := pgxstore.MustTx(ctx).Exec(ctx, fmt.Sprintf(`INSERT INTO %s.orders (idem_key) VALUES ($1)`, schema),
					core.MustOperation(ctx).Key()); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				w.WriteHeader(http.StatusCreated)
			}))
			do := func(key string) int {
				req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"amount":1}`))
				req.Header.Set("Idempotency-Key", key)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				return rec.Code
			}
			// Warm up: the connection prepares each statement once.
			do("warm-up")
			do("warm-up")
			tr.take()

			require.Equal(t, http.StatusCreated, do("k"), "first request")
			stmts, rt := tr.take()
			assert.Equal(t, tc.first, labels(stmts), "first request: statements")
			assert.Equal(t, tc.firstR, rt, "first request: round trips")
			require.Equal(t, http.StatusCreated, do("k"), "replay")
			stmts, rt = tr.take()
			assert.Equal(t, tc.replay, labels(stmts), "replay: statements")
			assert.Equal(t, tc.replyR, rt, "replay: round trips")
			for _, st := range stmts {
				if !tc.readOnly {
					break
				}
				assert.NotContains(t, []string{"claim", "record", "complete"}, st.label, "a replay writes nothing")
			}
			if len(stmts) == 1 {
				assert.Equal(t, byte('I'), stmts[0].txStatus, "the replay's one statement runs outside a transaction")
			}
			t.Logf("first request: %d statements in %d round trips %v; replay: %d in %d %v",
				len(tc.first), tc.firstR, tc.first, len(tc.replay), tc.replyR, tc.replay)
		})
	}
}
