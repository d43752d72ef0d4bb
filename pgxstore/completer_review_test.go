package pgxstore_test

// Review of the completer (issue 35) on PostgreSQL: each test states a rule.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/pgxstore"
)

// reviewPayments counts, per key, the charge phase, the receipt phase and the responses
// the handler wrote; each response is unique (a run number), so a replay can be told from
// a second run.
type reviewPayments struct {
	mu       sync.Mutex
	charges  map[string]int
	receipts map[string]int
	written  map[string][]string
	runs     atomic.Int64
	failing  atomic.Bool
}

func newReviewPayments(t *testing.T, store *pgxstore.Store, cfg core.Config) (*reviewPayments, *core.Engine, http.Handler) {
	a := &reviewPayments{charges: map[string]int{}, receipts: map[string]int{}, written: map[string][]string{}}
	cfg.Store, cfg.Mode, cfg.KeepRequest = store, core.ModePhased, true
	eng, err := core.New(cfg)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("POST /pay", eng.Middleware(func(*http.Request) string { return "alice" })(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		op := core.MustOperation(ctx)
		count := func(m map[string]int) func(context.Context) error {
			return func(context.Context) error {
				a.mu.Lock()
				defer a.mu.Unlock()
				m[op.Key()]++
				return nil
			}
		}
		if err := op.Phase(ctx, "charged", count(a.charges)); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if a.failing.Load() {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		if err := op.Phase(ctx, "receipt_sent", count(a.receipts)); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		body := fmt.Sprintf(`{"key":%q,"run":%d}`, op.Key(), a.runs.Add(1))
		a.mu.Lock()
		a.written[op.Key()] = append(a.written[op.Key()], body)
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(body))
	})))
	return a, eng, mux
}

func reviewPost(h http.Handler, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(`{"amount":5}`))
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestCompleterRaceRunsEachPhaseOnceOnPostgres: two completers and the clients' retries
// race on abandoned payments; each remaining phase runs at most once per key, one
// response is recorded per key, and a later retry replays it byte for byte.
func TestCompleterRaceRunsEachPhaseOnceOnPostgres(t *testing.T) {
	t.Parallel()
	store, _ := newStore(t, sharedPool(t))
	a, eng, h := newReviewPayments(t, store, core.Config{Lease: 2 * time.Second})
	const n = 20
	a.failing.Store(true)
	for i := range n {
		require.Equal(t, http.StatusBadGateway, reviewPost(h, fmt.Sprint("k", i)).Code)
	}
	a.failing.Store(false)

	c1 := &core.Completer{Engine: eng, Handler: h, Grace: time.Nanosecond, Backoff: time.Hour}
	c2 := &core.Completer{Engine: eng, Handler: h, Grace: time.Nanosecond, Backoff: time.Hour}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range []*core.Completer{c1, c2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := c.Pass(context.Background())
			assert.NoError(t, err)
		}()
	}
	clients := make([]*httptest.ResponseRecorder, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			clients[i] = reviewPost(h, fmt.Sprint("k", i))
		}()
	}
	close(start)
	wg.Wait()

	for i := range n {
		key := fmt.Sprint("k", i)
		assert.Equal(t, 1, a.charges[key], key)
		assert.LessOrEqual(t, a.receipts[key], 1, "%s: the receipt sent twice", key)
		assert.LessOrEqual(t, len(a.written[key]), 1, "%s: two responses written", key)
	}
	// Whatever is left (a completer that lost to a 409) the clients finish; then each
	// retry replays the one response byte for byte.
	for i := range n {
		key := fmt.Sprint("k", i)
		w := reviewPost(h, key)
		require.Equal(t, http.StatusCreated, w.Code, key)
		require.Len(t, a.written[key], 1, key)
		assert.Equal(t, a.written[key][0], w.Body.String(), key)
		assert.Equal(t, 1, a.receipts[key], key)
		if clients[i].Code == http.StatusCreated {
			assert.Equal(t, a.written[key][0], clients[i].Body.String(), key)
		}
	}
}

// TestCompleterNeverClaimsAnExpiredKeyAnewOnPostgres: a key past retention is absent to
// a claim (pgxstore's replace), so a completer that lists it (a Horizon longer than the
// retention, or a key that expires between the listing and the claim) runs the whole
// request again from its first phase: a second charge.
func TestCompleterNeverClaimsAnExpiredKeyAnewOnPostgres(t *testing.T) {
	t.Parallel()
	db := sharedPool(t)
	store, schema := newStore(t, db, pgxstore.WithRetention(time.Hour))
	a, eng, h := newReviewPayments(t, store, core.Config{})
	a.failing.Store(true)
	require.Equal(t, http.StatusBadGateway, reviewPost(h, "old").Code)
	a.failing.Store(false)
	// The key is two hours old: past the store's retention of one hour.
	exec(t, db, `UPDATE `+schema+`.idempotency_keys SET created_at = now() - interval '2 hours',
		released_at = now() - interval '2 hours' WHERE idem_key = 'old'`)

	c := &core.Completer{Engine: eng, Handler: h, Grace: time.Nanosecond, Horizon: 3 * time.Hour}
	_, err := c.Pass(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 1, a.charges["old"], "the completer charged again: it claimed an expired key anew")
}

// TestOneUnreadableKeptRequestDoesNotStopTheCompleter: a kept request the store cannot
// decode (a format a newer version wrote during a rolling deploy, a damaged value) must
// not fail the whole listing: today Abandoned returns an error for the batch, every Pass
// fails on it, and no abandoned payment behind it is ever completed.
func TestOneUnreadableKeptRequestDoesNotStopTheCompleter(t *testing.T) {
	t.Parallel()
	db := sharedPool(t)
	store, schema := newStore(t, db)
	a, eng, h := newReviewPayments(t, store, core.Config{})
	a.failing.Store(true)
	require.Equal(t, http.StatusBadGateway, reviewPost(h, "unreadable").Code)
	require.Equal(t, http.StatusBadGateway, reviewPost(h, "fine").Code)
	a.failing.Store(false)
	exec(t, db, `UPDATE `+schema+`.idempotency_keys SET request = '\x02'::bytea, created_at = created_at - interval '1 second'
		WHERE idem_key = 'unreadable'`)

	c := &core.Completer{Engine: eng, Handler: h, Grace: time.Nanosecond}
	n, err := c.Pass(t.Context())
	assert.NoError(t, err)
	assert.Equal(t, 1, n, "the readable key is completed")
	assert.Equal(t, 1, a.receipts["fine"])
}
