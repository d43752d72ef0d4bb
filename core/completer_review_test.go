package core_test

// Review of the completer (issue 35): each test states a rule the completer must keep.

import (
	"context"
	"log/slog"
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
	"github.com/idemkit/idem/core/memstore"
)

// reviewClock is a memstore clock the test moves by hand.
type reviewClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *reviewClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *reviewClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// reviewApp is a payment route that charges in a phase and then fails (502) while
// failing is set: the crash after the charge that the completer is for.
type reviewApp struct {
	charges atomic.Int32
	failing atomic.Bool
}

func (a *reviewApp) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := core.MustOperation(r.Context())
		if err := op.Phase(r.Context(), "charged", func(context.Context) error { a.charges.Add(1); return nil }); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if a.failing.Load() {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"paid":true}`))
	})
}

func reviewPay(h http.Handler, uri, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, uri, strings.NewReader(`{"amount":5}`))
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestCompleterNeverRunsAnExpiredKeyFromTheStart: the completer only ever resumes a key
// it listed; when the key is past retention by the time the engine claims it (a Horizon
// longer than the retention, or a key that expires, or is swept, between the listing and
// the claim), the claim is a fresh one, from RecoveryStarted, and every phase runs
// again: the customer is charged twice. A completion must take the key over or do
// nothing; it must never claim it anew.
func TestCompleterNeverRunsAnExpiredKeyFromTheStart(t *testing.T) {
	t.Parallel()
	const retention = time.Hour
	for name, tc := range map[string]struct {
		horizon time.Duration
		before  time.Duration // the clock moves this much after the crash, before the pass
		during  time.Duration // and this much between the listing and the engine's claim
	}{
		"horizon beyond retention":             {horizon: 3 * retention, before: 2 * retention},
		"expires between listing and claiming": {before: retention - time.Second, during: 2 * time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clock := &reviewClock{now: time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)}
			store := memstore.New(memstore.WithClock(clock.Now), memstore.WithRetention(retention))
			eng, err := core.New(core.Config{Store: store, KeepRequest: true, Lease: time.Second})
			require.NoError(t, err)
			app := &reviewApp{}
			app.failing.Store(true)
			mux := http.NewServeMux()
			mux.Handle("POST /pay", eng.Middleware(func(*http.Request) string { return "alice" })(app.handler()))

			require.Equal(t, http.StatusBadGateway, reviewPay(mux, "/pay", "k").Code)
			require.EqualValues(t, 1, app.charges.Load())
			app.failing.Store(false)
			clock.Add(tc.before)

			// The time the completer's request takes to reach the engine (the clock moves
			// after the listing and BeginAttempt, before the claim).
			slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				clock.Add(tc.during)
				mux.ServeHTTP(w, r)
			})
			c := &core.Completer{Engine: eng, Handler: slow, Grace: time.Nanosecond, Horizon: tc.horizon}
			_, err = c.Pass(t.Context())
			require.NoError(t, err)
			assert.EqualValues(t, 1, app.charges.Load(), "the charge phase ran again: the completer claimed an expired key anew")
		})
	}
}

// TestKeptRequestIsThePathTheRouterReceived: the completer sends the kept request through
// Handler, the application's router, so the kept URI must be the one that router
// received. Under http.StripPrefix (an API mounted under /api) the engine sees the path
// with the prefix stripped, keeps that, and the router answers the completer 404: the
// route is "gone" for every abandoned payment, and the completer gives up on each.
func TestKeptRequestIsThePathTheRouterReceived(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	eng, err := core.New(core.Config{Store: store, KeepRequest: true})
	require.NoError(t, err)
	app := &reviewApp{}
	app.failing.Store(true)
	api := http.NewServeMux()
	api.Handle("POST /pay", eng.Middleware(func(*http.Request) string { return "alice" })(app.handler()))
	root := http.NewServeMux()
	root.Handle("/api/", http.StripPrefix("/api", api))

	require.Equal(t, http.StatusBadGateway, reviewPay(root, "/api/pay?order=7", "k").Code)
	rec, _, err := store.Lookup(t.Context(), "alice", "k")
	require.NoError(t, err)
	require.NotNil(t, rec.Request)
	assert.Equal(t, "/api/pay?order=7", rec.Request.URI, "the URI the application's router received")

	app.failing.Store(false)
	c := &core.Completer{Engine: eng, Handler: root, Grace: time.Nanosecond}
	n, err := c.Pass(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the completer completes the payment through the application's router")
	assert.EqualValues(t, 1, app.charges.Load())
}

// TestCompleterSaysWhyAFingerprintMismatchCannotComplete: with a Fingerprint that reads a
// header KeepHeaders does not keep (FingerprintWithHeaders("X-Tenant")), the completer's
// request fingerprints differently from the claim's, and the engine answers it 422 on
// every attempt: the payment can never complete this way. That is a configuration error
// the operator must be told as such (naming the fingerprint and KeepHeaders), not a
// "handler answered 422" retried with backoff until MaxAttempts.
func TestCompleterSaysWhyAFingerprintMismatchCannotComplete(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	eng, err := core.New(core.Config{Store: store, KeepRequest: true, Fingerprint: core.FingerprintWithHeaders("X-Tenant")})
	require.NoError(t, err)
	app := &reviewApp{}
	app.failing.Store(true)
	mux := http.NewServeMux()
	mux.Handle("POST /pay", eng.Middleware(func(*http.Request) string { return "alice" })(app.handler()))
	r := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(`{"amount":5}`))
	r.Header.Set("Idempotency-Key", "k")
	r.Header.Set("X-Tenant", "acme")
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	require.Equal(t, http.StatusBadGateway, w.Code)
	app.failing.Store(false)

	var logs strings.Builder
	var mu sync.Mutex
	c := &core.Completer{Engine: eng, Handler: mux, Grace: time.Nanosecond, Backoff: time.Nanosecond,
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))}
	_, err = c.Pass(t.Context())
	require.NoError(t, err)
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	t.Log(out)
	assert.Regexp(t, "(?i)fingerprint", out, "the log names the cause: the kept request no longer matches the key's fingerprint (KeepHeaders)")
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// TestKeptRequestReachesAHostRoute: the completer's request is built from the kept
// method, URI, headers and body only; it has no Host, so a router that routes by host
// (http.ServeMux's "POST api.example.com/pay", a virtual-hosted API) answers it 404: the
// route is "gone" for every abandoned payment and the completer gives up on each.
func TestKeptRequestReachesAHostRoute(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	eng, err := core.New(core.Config{Store: store, KeepRequest: true})
	require.NoError(t, err)
	app := &reviewApp{}
	app.failing.Store(true)
	mux := http.NewServeMux()
	mux.Handle("POST api.example.com/pay", eng.Middleware(func(*http.Request) string { return "alice" })(app.handler()))
	require.Equal(t, http.StatusBadGateway, reviewPay(mux, "http://api.example.com/pay", "k").Code)
	app.failing.Store(false)

	c := &core.Completer{Engine: eng, Handler: mux, Grace: time.Nanosecond}
	n, err := c.Pass(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the completer reaches the route the client reached")
}

// TestCompleterStopsWhenTheEngineNeverSawItsRequest: after a deploy the kept URI may
// reach a handler that is no longer behind the idempotency middleware (the route moved
// out of the group, a catch-all took the path). The completer cannot prevent the first
// unguarded run, but it learns from it that the engine never claimed the key, and must
// not run the unguarded handler again on each of its MaxAttempts (here 5 more charges).
func TestCompleterStopsWhenTheEngineNeverSawItsRequest(t *testing.T) {
	t.Parallel()
	clock := &reviewClock{now: time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)}
	store := memstore.New(memstore.WithClock(clock.Now))
	eng, err := core.New(core.Config{Store: store, KeepRequest: true, Lease: time.Second})
	require.NoError(t, err)
	app := &reviewApp{}
	app.failing.Store(true)
	before := http.NewServeMux()
	before.Handle("POST /pay", eng.Middleware(func(*http.Request) string { return "alice" })(app.handler()))
	require.Equal(t, http.StatusBadGateway, reviewPay(before, "/pay", "k").Code)

	// The next deploy serves POST /pay without the middleware.
	var unguarded atomic.Int32
	after := http.NewServeMux()
	after.HandleFunc("POST /pay", func(w http.ResponseWriter, _ *http.Request) {
		unguarded.Add(1) // a charge
		w.WriteHeader(http.StatusCreated)
	})
	c := &core.Completer{Engine: eng, Handler: after, Grace: time.Nanosecond, Backoff: time.Second, MaxAttempts: 5}
	for range 5 {
		_, err := c.Pass(t.Context())
		require.NoError(t, err)
		clock.Add(2 * time.Hour) // past any backoff
	}
	assert.LessOrEqual(t, unguarded.Load(), int32(1), "the completer ran an unguarded handler again after learning the engine never claimed the key")
}
