package core_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// events collects what Hooks observes.
type events struct {
	mu  sync.Mutex
	evs []core.Event
}

func (e *events) Observe(_ context.Context, ev core.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evs = append(e.evs, ev)
}

func (e *events) take() []core.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	evs := e.evs
	e.evs = nil
	return evs
}

// records is a slog.Handler keeping every record, at every level.
type records struct {
	mu sync.Mutex
	rs []slog.Record
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rs = append(h.rs, r.Clone())
	return nil
}
func (h *records) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *records) WithGroup(string) slog.Handler      { return h }

func (h *records) take() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	rs := h.rs
	h.rs = nil
	return rs
}

func attrsOf(r slog.Record) map[string]string {
	m := map[string]string{}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	return m
}

// scriptedStore hands out a lock whose takeover, completion and release do what the test
// says: a database that fails in one chosen way.
type scriptedStore struct {
	claimErr, completeErr, releaseErr error
	takenOver                         bool
}

func (s *scriptedStore) Claim(context.Context, storage.Claim) (storage.Claimed, error) {
	if s.claimErr != nil {
		return storage.Claimed{}, s.claimErr
	}
	if s.takenOver {
		return storage.Claimed{Verdict: storage.VerdictTakeOver, Lock: &scriptedLock{s}}, nil
	}
	return storage.Claimed{Verdict: storage.VerdictAbsent, Lock: &scriptedLock{s}}, nil
}
func (s *scriptedStore) Lookup(context.Context, string, string) (*storage.Record, time.Time, error) {
	return nil, time.Time{}, storage.ErrNotFound
}
func (s *scriptedStore) DeleteExpired(context.Context, time.Time, int) (int, error) { return 0, nil }
func (s *scriptedStore) SupportsAtomic() bool                                       { return false }
func (s *scriptedStore) Retention() time.Duration                                   { return time.Hour }

type scriptedLock struct{ s *scriptedStore }

func (l *scriptedLock) Context(ctx context.Context) context.Context { return ctx }
func (l *scriptedLock) RecoveryPoint() string {
	if l.s.takenOver {
		return "charged"
	}
	return storage.RecoveryStarted
}
func (l *scriptedLock) Resumed() bool               { return l.s.takenOver }
func (l *scriptedLock) Renew(context.Context) error { return nil }
func (l *scriptedLock) Phase(ctx context.Context, _ string, fn func(context.Context) error) error {
	return fn(ctx)
}
func (l *scriptedLock) Complete(context.Context, *storage.Response) error { return l.s.completeErr }
func (l *scriptedLock) Release(context.Context) error                     { return l.s.releaseErr }

// TestEventsTimeTheStoreAndTheRequest: an event carries the route's pattern (not only
// its path), the store's time for the claim and for the recording, and the time since
// the engine took the request, which covers both.
func TestEventsTimeTheStoreAndTheRequest(t *testing.T) {
	t.Parallel()
	var seen events
	eng, err := core.New(core.Config{Store: memstore.New(), Hooks: &seen})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders/{id}", eng.Middleware(accountScope)(http.HandlerFunc(createOrder)))
	send := func() int {
		r := httptest.NewRequest(http.MethodPost, "/v1/orders/7", strings.NewReader(orderJSON))
		r.Header.Set("Idempotency-Key", "k")
		r.Header.Set("X-Account-ID", "acct-1")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w.Code
	}

	require.Equal(t, http.StatusCreated, send())
	evs := seen.take()
	require.Len(t, evs, 2)
	claimed, completed := evs[0], evs[1]
	assert.Equal(t, core.OutcomeClaimed, claimed.Outcome)
	assert.Equal(t, core.OutcomeCompleted, completed.Outcome)
	for _, ev := range evs {
		assert.Equal(t, "POST /v1/orders/{id}", ev.Route)
		assert.Equal(t, "/v1/orders/7", ev.Path)
		assert.Equal(t, "acct-1", ev.Scope)
		assert.Equal(t, "k", ev.Key)
	}
	assert.Positive(t, claimed.StoreClaim)
	assert.Zero(t, claimed.StoreComplete, "not recorded yet")
	assert.GreaterOrEqual(t, claimed.Elapsed, claimed.StoreClaim)
	assert.Equal(t, claimed.StoreClaim, completed.StoreClaim)
	assert.Positive(t, completed.StoreComplete)
	assert.Zero(t, completed.StoreRelease)
	assert.GreaterOrEqual(t, completed.Elapsed, completed.StoreClaim+completed.StoreComplete)
	assert.Greater(t, completed.Elapsed, claimed.Elapsed)
	assert.Equal(t, http.StatusCreated, completed.Status)

	require.Equal(t, http.StatusCreated, send())
	evs = seen.take()
	require.Len(t, evs, 1)
	replayed := evs[0]
	assert.Equal(t, core.OutcomeReplayed, replayed.Outcome)
	assert.Positive(t, replayed.StoreClaim)
	assert.Zero(t, replayed.StoreComplete)
	assert.GreaterOrEqual(t, replayed.Elapsed, replayed.StoreClaim)
}

// TestEachOutcomeIsOneEventAndOneLogLine is the contract of Hooks and Config.Logger,
// outcome by outcome: a keyed request ends in exactly one event with a final outcome
// (after Claimed or Resumed when its handler ran), and every non-happy one gets exactly
// one log line, at the level Config.Logger states, naming scope, key, method, path and
// the error. The happy path logs nothing at any level.
func TestEachOutcomeIsOneEventAndOneLogLine(t *testing.T) {
	t.Parallel()
	type want struct {
		outcome core.Outcome
		status  int
	}
	type line struct {
		level slog.Level
		msg   string // a part of the message
		err   string // a part of the error attribute, or "" for none
	}
	boom := errors.New("boom")
	created := func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) }
	cases := []struct {
		name    string
		store   storage.Store // default: memstore
		handler func(w http.ResponseWriter, r *http.Request, cancel func())
		prime   string // a body sent first with the same key, its events and lines not counted
		key     string // default "k"
		events  []want
		line    *line // nil: no line at all
	}{
		{name: "completed", events: []want{{core.OutcomeClaimed, 0}, {core.OutcomeCompleted, 201}}},
		{name: "replayed", prime: orderJSON, events: []want{{core.OutcomeReplayed, 201}}},
		{name: "rejected", key: "a b", events: []want{{core.OutcomeRejected, 400}}},
		{name: "mismatch", prime: `{"item":"pen"}`, events: []want{{core.OutcomeMismatch, 422}},
			line: &line{slog.LevelWarn, "key reused", "key reused"}},
		{name: "in progress", store: &scriptedStore{claimErr: fmt.Errorf("pg: %w", storage.ErrInProgress)},
			events: []want{{core.OutcomeConflict, 409}}, line: &line{slog.LevelInfo, "in progress", "in progress"}},
		{name: "collision", store: &scriptedStore{claimErr: fmt.Errorf("pg: %w", storage.ErrTransient)},
			events: []want{{core.OutcomeConflict, 503}}, line: &line{slog.LevelInfo, "collided", "pg"}},
		{name: "store failure", store: &scriptedStore{claimErr: boom},
			events: []want{{core.OutcomeStoreError, 503}}, line: &line{slog.LevelError, "store failed", "boom"}},
		{name: "recording failed", store: &scriptedStore{completeErr: boom},
			events: []want{{core.OutcomeClaimed, 0}, {core.OutcomeStoreError, 503}}, line: &line{slog.LevelError, "recording the outcome failed", "boom"}},
		{name: "recording failed and release failed", store: &scriptedStore{completeErr: boom, releaseErr: errors.New("conn closed")},
			events: []want{{core.OutcomeClaimed, 0}, {core.OutcomeStoreError, 503}}, line: &line{slog.LevelError, "recording the outcome failed", "conn closed"}},
		{name: "lease lost", store: &scriptedStore{completeErr: fmt.Errorf("fenced: %w", storage.ErrLeaseLost)},
			events: []want{{core.OutcomeClaimed, 0}, {core.OutcomeConflict, 409}}, line: &line{slog.LevelInfo, "in progress", "lease"}},
		{name: "released after a 5xx", handler: func(w http.ResponseWriter, _ *http.Request, _ func()) { w.WriteHeader(http.StatusBadGateway) },
			events: []want{{core.OutcomeClaimed, 0}, {core.OutcomeRolledBack, 502}}, line: &line{slog.LevelDebug, "released the key", "status 502 is not storable"}},
		{name: "released after a panic", handler: func(http.ResponseWriter, *http.Request, func()) { panic("handler bug") },
			events: []want{{core.OutcomeClaimed, 0}, {core.OutcomeRolledBack, 0}}, line: &line{slog.LevelDebug, "released the key", "handler bug"}},
		{name: "released after a cancel", handler: func(w http.ResponseWriter, _ *http.Request, cancel func()) {
			cancel()
			w.WriteHeader(http.StatusCreated)
		},
			events: []want{{core.OutcomeClaimed, 0}, {core.OutcomeCancelled, 503}}, line: &line{slog.LevelInfo, "cancelled before its outcome was recorded", "canceled"}},
		{name: "release failed", store: &scriptedStore{releaseErr: errors.New("conn closed")},
			handler: func(w http.ResponseWriter, _ *http.Request, _ func()) { w.WriteHeader(http.StatusBadGateway) },
			events:  []want{{core.OutcomeClaimed, 0}, {core.OutcomeRolledBack, 502}}, line: &line{slog.LevelWarn, "releasing the key failed", "conn closed"}},
		{name: "took over", store: &scriptedStore{takenOver: true}, handler: resumeCharged,
			events: []want{{core.OutcomeResumed, 0}, {core.OutcomeCompleted, 201}}, line: &line{slog.LevelInfo, "took over", ""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var seen events
			var logs records
			store := tc.store
			if store == nil {
				store = memstore.New()
			}
			eng, err := core.New(core.Config{Store: store, Hooks: &seen, Logger: slog.New(&logs)})
			require.NoError(t, err)
			handler := tc.handler
			if handler == nil {
				handler = func(w http.ResponseWriter, r *http.Request, _ func()) { created(w, r) }
			}
			key := tc.key
			if key == "" {
				key = "k"
			}
			send := func(body string) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				h := eng.Middleware(accountScope)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler(w, r, cancel) }))
				r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/orders", strings.NewReader(body))
				r.Header.Set("Idempotency-Key", key)
				r.Header.Set("X-Account-ID", "acct-1")
				defer func() { _ = recover() }() // the panic case: the engine re-raises it
				h.ServeHTTP(httptest.NewRecorder(), r)
			}
			if tc.prime != "" {
				send(tc.prime)
				seen.take()
				logs.take()
			}
			send(orderJSON)

			var got []want
			for _, ev := range seen.take() {
				got = append(got, want{ev.Outcome, ev.Status})
			}
			assert.Equal(t, tc.events, got)

			rs := logs.take()
			if tc.line == nil {
				assert.Empty(t, rs, "no line at any level")
				return
			}
			require.Len(t, rs, 1, "exactly one line")
			r := rs[0]
			assert.Equal(t, tc.line.level, r.Level)
			assert.Contains(t, r.Message, tc.line.msg)
			a := attrsOf(r)
			if tc.key != "a b" {
				assert.Equal(t, "acct-1", a["scope"])
				assert.Equal(t, key, a["key"])
			}
			assert.Equal(t, http.MethodPost, a["method"])
			assert.Equal(t, "/v1/orders", a["path"])
			if tc.line.err == "" {
				assert.NotContains(t, a, "error")
			} else {
				assert.Contains(t, a["error"], tc.line.err)
			}
		})
	}
}

// TestTakeoverLineNamesTheRecoveryPoint: the operator reading a takeover line learns
// where the request resumes.
func TestTakeoverLineNamesTheRecoveryPoint(t *testing.T) {
	t.Parallel()
	var logs records
	hs := newHarness(t, core.Config{Store: &scriptedStore{takenOver: true}, Logger: slog.New(&logs)},
		func(w http.ResponseWriter, r *http.Request) { resumeCharged(w, r, nil) })
	hs.do(http.MethodPost, "k", orderJSON)
	rs := logs.take()
	require.Len(t, rs, 1)
	assert.Equal(t, "charged", attrsOf(rs[0])["recovery_point"])
}

// resumeCharged is a handler resuming after the phase "charged" that scriptedStore's
// takeover reports: it calls that phase (skipped) and answers 201.
func resumeCharged(w http.ResponseWriter, r *http.Request, _ func()) {
	if err := core.MustOperation(r.Context()).Phase(r.Context(), "charged", nil); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

// TestJoinHooksCallsEach: JoinHooks passes each event to every hook, skipping nil ones,
// and joins nothing into nil, so the engine reads no clock.
func TestJoinHooksCallsEach(t *testing.T) {
	t.Parallel()
	var a, b events
	hs := newHarness(t, core.Config{Hooks: core.JoinHooks(&a, nil, &b)}, nil)
	hs.do(http.MethodPost, "k", orderJSON)
	assert.Len(t, a.take(), 2)
	assert.Len(t, b.take(), 2)
	assert.Nil(t, core.JoinHooks(nil, nil))
}

func TestOnlyTheHandlersStartIsNotFinal(t *testing.T) {
	t.Parallel()
	for _, o := range []core.Outcome{core.OutcomeReplayed, core.OutcomeConflict, core.OutcomeMismatch, core.OutcomeCompleted,
		core.OutcomeRolledBack, core.OutcomeRejected, core.OutcomeStoreError} {
		assert.True(t, o.Final(), o)
	}
	assert.False(t, core.OutcomeClaimed.Final())
	assert.False(t, core.OutcomeResumed.Final())
}
