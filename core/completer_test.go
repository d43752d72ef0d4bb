package core_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/core/storage"
)

// atomicMemstore claims to support atomic mode, so the engine resolves ModeDefault to it.
type atomicMemstore struct{ *memstore.Store }

func (atomicMemstore) SupportsAtomic() bool { return true }

// plainStore hides every method but storage.Store's: a store that cannot list abandoned
// operations.
type plainStore struct{ storage.Store }

func TestKeepRequestIsPhasedOnly(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]core.Config{
		"atomic":          {Store: atomicMemstore{memstore.New()}, Mode: core.ModeAtomic, KeepRequest: true},
		"default→atomic":  {Store: atomicMemstore{memstore.New()}, KeepRequest: true},
		"headers without": {Store: memstore.New(), KeepHeaders: []string{"Content-Type"}},
		"bad header":      {Store: memstore.New(), KeepRequest: true, KeepHeaders: []string{"Content Type"}},
	} {
		_, err := core.New(cfg)
		require.ErrorIs(t, err, core.ErrInvalidConfig, name)
		assert.Regexp(t, "Keep(Request|Headers)", err.Error(), name)
	}
	_, err := core.New(core.Config{Store: atomicMemstore{memstore.New()}, Mode: core.ModePhased, KeepRequest: true})
	require.NoError(t, err, "phased mode on a store that also runs atomic")
}

func TestCompleterRefusesWhatCannotRun(t *testing.T) {
	t.Parallel()
	h := http.NotFoundHandler()
	noKeep, err := core.New(core.Config{Store: memstore.New()})
	require.NoError(t, err)
	plain, err := core.New(core.Config{Store: plainStore{memstore.New()}, KeepRequest: true})
	require.NoError(t, err)
	for name, c := range map[string]*core.Completer{
		"no engine":      {Handler: h},
		"no handler":     {Engine: noKeep},
		"no KeepRequest": {Engine: noKeep, Handler: h},
		"store":          {Engine: plain, Handler: h},
	} {
		_, err := c.Pass(t.Context())
		require.ErrorIs(t, err, core.ErrInvalidConfig, name)
		require.ErrorIs(t, c.Run(t.Context()), core.ErrInvalidConfig, name, "Run returns at once")
	}
}

// completerApp is a payment route that fails after charging while failing is set, and
// answers as told once the completer runs it.
type completerApp struct {
	mu      sync.Mutex
	events  []core.Event
	charges int
	sent    int
	failing bool
	header  http.Header // the last completer request's headers
	onRun   func(w http.ResponseWriter)
}

func newCompleterApp(t *testing.T, cfg core.Config) (*completerApp, *core.Engine, *http.ServeMux) {
	a := &completerApp{failing: true}
	cfg.KeepRequest = true
	cfg.Hooks = core.HookFunc(func(_ context.Context, ev core.Event) {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.events = append(a.events, ev)
	})
	eng, err := core.New(cfg)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("POST /pay", eng.Middleware(func(r *http.Request) string {
		return r.Header.Get("Authorization")
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := core.MustOperation(r.Context())
		if err := op.Phase(r.Context(), "charged", func(context.Context) error { a.charges++; return nil }); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if op.Completing() {
			a.header = r.Header.Clone()
			if a.onRun != nil {
				a.onRun(w)
				return
			}
		}
		if a.failing {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		a.sent++
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"paid":true}`))
	})))
	return a, eng, mux
}

func pay(mux http.Handler, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(`{"amount":5}`))
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set("Authorization", "Bearer alice")
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	return w
}

func TestCompleterFinishesAnAbandonedPayment(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	a, eng, mux := newCompleterApp(t, core.Config{Store: store, KeepHeaders: []string{"Content-Type"}})
	require.Equal(t, http.StatusBadGateway, pay(mux, "k1").Code)
	rec, _, err := store.Lookup(t.Context(), "Bearer alice", "k1")
	require.NoError(t, err)
	require.NotNil(t, rec.Request)
	assert.Equal(t, http.Header{"Content-Type": {"application/json"}}, rec.Request.Header, "only the listed headers are kept: never Authorization unless listed")

	a.failing = false
	c := &core.Completer{Engine: eng, Handler: mux, Grace: time.Nanosecond}
	n, err := c.Pass(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Equal(t, 1, a.charges, "the charge is not run again")
	assert.Equal(t, 1, a.sent)
	assert.Empty(t, a.header.Get("Authorization"), "the completer sends no credentials it was not told to keep")
	var completing []core.Outcome
	for _, ev := range a.events {
		if ev.Completing {
			completing = append(completing, ev.Outcome)
			assert.Equal(t, "Bearer alice", ev.Scope, "the kept scope")
		}
	}
	assert.Equal(t, []core.Outcome{core.OutcomeResumed, core.OutcomeCompleted}, completing, "the completer's run is marked in its events")

	w := pay(mux, "k1")
	assert.Equal(t, http.StatusCreated, w.Code)
	assert.Equal(t, "true", w.Header().Get("Idempotent-Replayed"))
	assert.Equal(t, `{"paid":true}`, w.Body.String())
	n, err = c.Pass(t.Context())
	require.NoError(t, err)
	assert.Zero(t, n, "nothing left")
}

func TestCompleterAttemptThatFailsIsCounted(t *testing.T) {
	t.Parallel()
	for name, run := range map[string]func(w http.ResponseWriter){
		"5xx":   func(w http.ResponseWriter) { w.WriteHeader(http.StatusServiceUnavailable) },
		"panic": func(http.ResponseWriter) { panic("boom") },
	} {
		store := memstore.New()
		a, eng, mux := newCompleterApp(t, core.Config{Store: store})
		a.onRun = run
		require.Equal(t, http.StatusBadGateway, pay(mux, "k").Code)
		c := &core.Completer{Engine: eng, Handler: mux, Grace: time.Nanosecond, Backoff: time.Hour}
		n, err := c.Pass(t.Context())
		require.NoError(t, err, name)
		assert.Zero(t, n, name)
		rec, now, err := store.Lookup(t.Context(), "Bearer alice", "k")
		require.NoError(t, err, name)
		assert.Equal(t, storage.StateStarted, rec.State, name)
		assert.Equal(t, 1, rec.Attempts, name)
		assert.WithinRange(t, rec.NextAttempt, now.Add(30*time.Minute-time.Second), now.Add(time.Hour+time.Second), name, "the backoff's upper half")
		n, err = c.Pass(t.Context())
		require.NoError(t, err, name)
		assert.Zero(t, n, name, "not tried again before the backoff")
		assert.Equal(t, 1, a.charges, name)
	}

	// The route is gone (a deploy removed it): a 404 from the router is a failed attempt.
	store := memstore.New()
	_, eng, mux := newCompleterApp(t, core.Config{Store: store})
	require.Equal(t, http.StatusBadGateway, pay(mux, "k").Code)
	c := &core.Completer{Engine: eng, Handler: http.NewServeMux(), Grace: time.Nanosecond}
	n, err := c.Pass(t.Context())
	require.NoError(t, err)
	assert.Zero(t, n)
	rec, _, err := store.Lookup(t.Context(), "Bearer alice", "k")
	require.NoError(t, err)
	assert.Equal(t, 5, rec.Attempts, "the engine never saw the request: no later attempt can do better, so the completer gives up at once")
}

func TestCompletionFromContext(t *testing.T) {
	t.Parallel()
	_, ok := core.CompletionFromContext(t.Context())
	assert.False(t, ok, "a client's request carries no completion")
}
