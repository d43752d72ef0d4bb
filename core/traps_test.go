package core_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/internal/syncbuf"
)

// TestEmptyScopeFailsClosed: a scope function returning "" (the middleware mounted before
// authentication) must not put every caller in one key space. The handler does not run,
// nothing is stored, the client gets a 500 problem saying the server is misconfigured,
// and the logger gets an error naming the route.
func TestEmptyScopeFailsClosed(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	var logs syncbuf.Buffer
	eng, err := core.New(core.Config{Store: store, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	require.NoError(t, err)
	var runs atomic.Int64
	h := eng.Middleware(func(r *http.Request) string { return r.Header.Get("X-Account-ID") })(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1); w.WriteHeader(http.StatusCreated) }))

	for _, caller := range []string{"alice", "bob"} { // two callers, neither authenticated
		r := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(orderJSON))
		r.Header.Set("Idempotency-Key", "shared-key")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		assertProblem(t, w, http.StatusInternalServerError, core.ProblemMisconfigured)
		assert.Empty(t, w.Header().Get("Idempotent-Replayed"), "%s must never get a replay", caller)
	}
	assert.Zero(t, runs.Load(), "the handler must not run under an empty scope")
	assert.Zero(t, store.Len(), "nothing may be stored under an empty scope")

	var line struct {
		Level, Msg, Method, Path string
	}
	require.NoError(t, json.Unmarshal([]byte(strings.SplitN(logs.String(), "\n", 2)[0]), &line), "log: %s", logs.String())
	assert.Equal(t, "ERROR", line.Level)
	assert.Contains(t, line.Msg, "empty scope")
	assert.Equal(t, http.MethodPost, line.Method, "the log line names the route's method")
	assert.Equal(t, "/v1/orders", line.Path, "the log line names the route's path")
}

// TestScopeRunsOnlyForKeyedRequests: the scope is read lazily, so an unkeyed GET or an
// absent optional key never calls it (it may depend on authentication those skip).
func TestScopeRunsOnlyForKeyedRequests(t *testing.T) {
	t.Parallel()
	eng, err := core.New(core.Config{Store: memstore.New(), KeyOptional: true})
	require.NoError(t, err)
	var calls atomic.Int64
	h := eng.Middleware(func(*http.Request) string { calls.Add(1); return "acme" })(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	for _, r := range []*http.Request{
		httptest.NewRequest(http.MethodGet, "/v1/orders", nil),
		httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(orderJSON)),
	} {
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	assert.Zero(t, calls.Load(), "scope calls for requests that take no part")
	r := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(orderJSON))
	r.Header.Set("Idempotency-Key", "k")
	h.ServeHTTP(httptest.NewRecorder(), r)
	assert.Equal(t, int64(1), calls.Load(), "scope calls for one keyed request")
}

// TestMiddlewareNeedsAScope: the net/http middleware takes its scope as an argument, so
// it cannot be forgotten; nil is a programming error.
func TestMiddlewareNeedsAScope(t *testing.T) {
	t.Parallel()
	eng, err := core.New(core.Config{Store: memstore.New()})
	require.NoError(t, err)
	assert.Panics(t, func() { eng.Middleware(nil) })
}

// TestRetentionHasOneSource: the sweeper and the claims read the store's retention, so
// raising it in one place raises it everywhere; nothing else can be set to disagree.
func TestRetentionHasOneSource(t *testing.T) {
	t.Parallel()
	store := memstore.New(memstore.WithRetention(48 * time.Hour))
	hs := newHarness(t, core.Config{Store: store}, nil)
	first := hs.do(http.MethodPost, "k", orderJSON)
	require.Equal(t, http.StatusCreated, first.Code)
	n, err := (&core.Sweeper{Store: store}).Sweep(t.Context())
	require.NoError(t, err)
	assert.Zero(t, n, "a key within the store's retention is never swept")
	again := hs.do(http.MethodPost, "k", orderJSON)
	assert.Equal(t, "true", again.Header().Get("Idempotent-Replayed"), "the key still replays")
}

// TestReleasedKeyIsLogged: a key released after a 5xx gets a debug line with the reason,
// as Config.Logger promises; a completed request logs nothing.
func TestReleasedKeyIsLogged(t *testing.T) {
	t.Parallel()
	var logs syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	fail := true
	hs := newHarness(t, core.Config{Logger: log}, func(w http.ResponseWriter, r *http.Request) {
		if fail {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	require.Equal(t, http.StatusBadGateway, hs.do(http.MethodPost, "k", orderJSON).Code)
	out := logs.String()
	assert.Contains(t, out, "released the key")
	assert.Contains(t, out, "status 502 is not storable", "the line gives the reason")
	assert.Contains(t, out, "key=k")

	fail = false
	before := len(logs.String())
	require.Equal(t, http.StatusCreated, hs.do(http.MethodPost, "k", orderJSON).Code)
	assert.Equal(t, before, len(logs.String()), "the happy path logs nothing: %s", logs.String()[before:])
}

// TestProblemKindsAreDefinedOnce: every kind has one status and one title, and the type
// URI is the configured base plus the kind, so an API links its own documentation.
func TestProblemKindsAreDefinedOnce(t *testing.T) {
	t.Parallel()
	const base = "https://api.example.com/docs/errors#"
	hs := newHarness(t, core.Config{ProblemBase: base}, nil)
	w := hs.do(http.MethodPost, "", orderJSON)
	var p core.Problem
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p))
	assert.Equal(t, base+string(core.ProblemKeyMissing), p.Type)
	assert.Equal(t, core.ProblemKeyMissing.Title(), p.Title)
	assert.Equal(t, core.ProblemKeyMissing.Status(), p.Status)
	for _, k := range []core.ProblemKind{core.ProblemKeyMissing, core.ProblemKeyInvalid, core.ProblemKeyReused,
		core.ProblemInProgress, core.ProblemBodyTooLarge, core.ProblemBodyUnreadable, core.ProblemStoreUnavailable,
		core.ProblemCollision, core.ProblemNotRecorded, core.ProblemResponseTooLarge, core.ProblemMisconfigured} {
		assert.NotEmpty(t, k.Title(), "title of %s", k)
		assert.GreaterOrEqual(t, k.Status(), 400, "status of %s", k)
	}
}

// TestSecondMiddlewareIsMisconfigured: the middleware mounted twice on one route (on a
// group and on the route) would claim the key the first one holds and answer 409 for
// ever. The second one refuses the request with a 500 problem naming the route, logs an
// error, and the first one releases the key: nothing runs, nothing is kept.
func TestSecondMiddlewareIsMisconfigured(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	var logs syncbuf.Buffer
	eng, err := core.New(core.Config{Store: store, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	require.NoError(t, err)
	var runs atomic.Int64
	keyed := eng.Middleware(func(*http.Request) string { return "acct" })
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders", keyed(keyed(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))))

	for range 2 { // the retry gets the same answer: not a 409 left behind by the first
		r := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(orderJSON))
		r.Header.Set("Idempotency-Key", "k")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		assertProblem(t, w, http.StatusInternalServerError, core.ProblemMisconfigured)
		assert.Contains(t, w.Body.String(), "POST /v1/orders", "the problem names the route")
	}
	assert.Zero(t, runs.Load(), "the handler must not run")
	assert.Zero(t, store.Len(), "the outer middleware must release the key")

	var line struct {
		Level, Msg, Route, Scope, Key string
	}
	require.NoError(t, json.Unmarshal([]byte(strings.SplitN(logs.String(), "\n", 2)[0]), &line), "log: %s", logs.String())
	assert.Equal(t, "ERROR", line.Level)
	assert.Contains(t, line.Msg, "second idempotency middleware")
	assert.Equal(t, "POST /v1/orders", line.Route, "the log line names the route")
	assert.Equal(t, "acct", line.Scope, "the log line names the key the first middleware holds")
	assert.Equal(t, "k", line.Key)
}

// TestScopeOutOfBoundsIsMisconfigured: a scope no store can hold (over 255 bytes, not
// valid UTF-8, holding NUL) is the application's bug, refused in core before any store
// call with a 500 problem and an error log line, never a store's retryable 503. A scope
// at the limit, of multi-byte UTF-8, runs and replays.
func TestScopeOutOfBoundsIsMisconfigured(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	var logs syncbuf.Buffer
	eng, err := core.New(core.Config{Store: store, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	require.NoError(t, err)
	var runs atomic.Int64
	h := eng.Middleware(func(r *http.Request) string { return r.Header.Get("X-Scope") })(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1); w.WriteHeader(http.StatusCreated) }))
	post := func(scope string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(orderJSON))
		r.Header.Set("Idempotency-Key", "k")
		r.Header.Set("X-Scope", scope) // net/http keeps the bytes; the scope function returns them
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for name, scope := range map[string]string{
		"256 bytes":        strings.Repeat("x", core.MaxScopeLength+1),
		"a long multibyte": strings.Repeat("€", 86), // 258 bytes
		"not UTF-8":        "acct-\xff",
		"NUL":              "acct\x00",
	} {
		before := len(logs.String())
		w := post(scope)
		assertProblem(t, w, http.StatusInternalServerError, core.ProblemMisconfigured)
		var line struct{ Level, Msg, Scope, Error string }
		require.NoError(t, json.Unmarshal([]byte(logs.String()[before:]), &line), "%s: log %s", name, logs.String()[before:])
		assert.Equal(t, "ERROR", line.Level, name)
		assert.Contains(t, line.Msg, "scope no store can hold", name)
		assert.Contains(t, line.Error, core.ErrInvalidScope.Error(), name)
		assert.LessOrEqual(t, len(line.Scope), 64+len("…"), "%s: the log line carries a bounded prefix of the scope", name)
	}
	assert.Zero(t, runs.Load(), "the handler must not run")
	assert.Zero(t, store.Len(), "nothing is claimed")

	atLimit := "x" + strings.Repeat("€", 84) + "é" // 1 + 252 + 2 = 255 bytes
	require.Len(t, atLimit, core.MaxScopeLength)
	require.Equal(t, http.StatusCreated, post(atLimit).Code)
	assert.Equal(t, "true", post(atLimit).Header().Get("Idempotent-Replayed"), "a scope at the limit replays")
	assert.Equal(t, int64(1), runs.Load())
}

// TestLogLinesCarryABoundedPrefix: the scope, key, method and path a client chooses reach
// the log at most 64 bytes each (cut on a UTF-8 boundary, then "…"), so one request
// cannot write a megabyte of log.
func TestLogLinesCarryABoundedPrefix(t *testing.T) {
	t.Parallel()
	var logs syncbuf.Buffer
	eng, err := core.New(core.Config{Store: memstore.New(), Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	require.NoError(t, err)
	scope := "x" + strings.Repeat("é", 127) // byte 64 is the second of an é: cut before it
	h := eng.Middleware(func(*http.Request) string { return scope })(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) }))
	key := strings.Repeat("k", core.MaxKeyLength)
	path := "/v1/orders/" + strings.Repeat("p", 100<<10)
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(orderJSON))
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	require.Equal(t, http.StatusBadGateway, w.Code)

	var line map[string]string
	require.NoError(t, json.Unmarshal([]byte(strings.SplitN(logs.String(), "\n", 2)[0]), &line), "log: %s", logs.String())
	assert.Contains(t, line["msg"], "released the key")
	assert.Equal(t, "x"+strings.Repeat("é", 31)+"…", line["scope"])
	assert.Equal(t, strings.Repeat("k", 64)+"…", line["key"])
	assert.Equal(t, "/v1/orders/"+strings.Repeat("p", 64-len("/v1/orders/"))+"…", line["path"])
	assert.Less(t, len(logs.String()), 1024, "the whole line stays short: %d bytes", len(logs.String()))
}
