package storetest

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
)

// completerTests run in ModePhased on every store: the rules core.Completer relies on
// (storage.Completable).
var completerTests = []test{
	{"KeptRequestRoundTrips", testKeptRequestRoundTrips},
	{"AbandonedLists", testAbandonedLists},
	{"BeginAttemptRace", testBeginAttemptRace},
	{"CompleterRacesRetry", testCompleterRacesRetry},
	{"CompleterAttemptsBounded", testCompleterAttemptsBounded},
}

// completable returns the suite's store as a storage.Completable.
func (s *suite) completable() storage.Completable {
	s.t.Helper()
	c, ok := s.store.(storage.Completable)
	require.True(s.t, ok, "%T does not implement storage.Completable: core.Completer cannot run on it", s.store)
	return c
}

// keptRequest is a request as core keeps it, with what a store may get wrong: a query,
// escapes, repeated headers, a body that is not text (NUL, invalid UTF-8).
func keptRequest() *storage.Request {
	body := []byte(`{"amount":100,"note":"re\u00e7u ✓"}`)
	body = append(body, 0x00, 0xff, 0xfe, '\r', '\n', 0xc3, 0x28)
	return &storage.Request{
		Method: http.MethodPost,
		Host:   "api.example.com:8443",
		URI:    "/orders/a%2Fb?x=1&y=%C3%A9",
		Header: http.Header{
			"Content-Type": {"application/json"},
			"X-Trace":      {"one", "two, three"},
		},
		Body: body,
	}
}

// withRequest returns c keeping req.
func withRequest(c storage.Claim, req *storage.Request) storage.Claim {
	c.Request = req
	return c
}

// abandoned lists with q and returns the keys found, in the order listed.
func (s *suite) abandoned(q storage.AbandonedQuery) ([]*storage.Record, []string) {
	s.t.Helper()
	recs, err := s.completable().Abandoned(s.ctx, q)
	require.NoError(s.t, err, "Abandoned")
	keys := make([]string, 0, len(recs))
	for _, r := range recs {
		keys = append(keys, r.Key)
	}
	return recs, keys
}

// anyAbandoned is a query that lists every abandoned key the suite makes.
var anyAbandoned = storage.AbandonedQuery{Horizon: time.Hour, MaxAttempts: 5, Limit: 100}

// testKeptRequestRoundTrips: the request a claim keeps comes back byte for byte, through
// Lookup and Abandoned, and survives a phase and a takeover; a claim that keeps none
// reports none; a completed key keeps no request (it is data at rest, kept only while
// the operation is unfinished).
func testKeptRequestRoundTrips(s *suite) {
	want := keptRequest()
	c := withRequest(s.claim("k", "a"), keptRequest())
	l := s.mustFresh(c)
	c.Request.Body[0] = 'X' // the store keeps its own copy
	rec, _ := s.lookup(c)
	require.Equal(s.t, want, rec.Request, "the kept request, through Lookup")
	require.Zero(s.t, rec.Attempts, "a fresh key has had no completer attempt")
	require.True(s.t, rec.NextAttempt.IsZero(), "a fresh key has no next attempt")

	require.NoError(s.t, l.Phase(s.ctx, "charged", noop))
	require.NoError(s.t, l.Release(s.ctx))
	recs, _ := s.abandoned(anyAbandoned)
	require.Len(s.t, recs, 1)
	require.Equal(s.t, want, recs[0].Request, "the kept request, through Abandoned")
	require.Equal(s.t, "charged", recs[0].RecoveryPoint)

	retry := withRequest(s.claim("k", "a"), &storage.Request{Method: http.MethodPost, URI: "/other"})
	l2 := s.mustLock(retry)
	require.True(s.t, l2.Resumed())
	rec, _ = s.lookup(c)
	require.Equal(s.t, want, rec.Request, "a takeover keeps the request the key was claimed with")
	s.complete(l2, created("1"))
	rec, _ = s.lookup(c)
	require.Nil(s.t, rec.Request, "a completed key keeps no request")

	plain := s.claim("plain", "a")
	l3 := s.mustFresh(plain)
	rec, _ = s.lookup(plain)
	require.Nil(s.t, rec.Request, "a claim that keeps no request")
	s.complete(l3, created("2"))

	empty := withRequest(s.claim("empty", "a"), &storage.Request{Method: http.MethodPatch, URI: "/"})
	s.mustFresh(empty)
	rec, _ = s.lookup(empty)
	require.NotNil(s.t, rec.Request, "a kept request without headers or body")
	require.Equal(s.t, http.MethodPatch, rec.Request.Method)
	require.Equal(s.t, "/", rec.Request.URI)
	require.Empty(s.t, rec.Request.Header)
	require.Empty(s.t, rec.Request.Body)
}

// testAbandonedLists: Abandoned lists exactly the started keys with a kept request whose
// lease ended at least Grace ago, created within Horizon, with attempts left and due,
// oldest first, at most Limit; not a live lease, a completed key, a key without a
// request, an old one.
func testAbandonedLists(s *suite) {
	abandon := func(name string, req *storage.Request) storage.Claim {
		c := withRequest(s.claim(name, "a"), req)
		l := s.mustFresh(c)
		require.NoError(s.t, l.Phase(s.ctx, "charged", noop))
		require.NoError(s.t, l.Release(s.ctx))
		return c
	}
	old := abandon("old", keptRequest())
	letTimePass(2 * pastLease)
	first := abandon("first", keptRequest())
	second := abandon("second", keptRequest())
	abandon("no-request", nil)

	live := withRequest(s.claim("live", "a"), keptRequest())
	ll := s.mustFresh(live)
	require.NoError(s.t, ll.Phase(s.ctx, "charged", noop))
	done := withRequest(s.claim("done", "a"), keptRequest())
	s.complete(s.mustFresh(done), created("1"))
	gone := withRequest(s.claim("gone", "a"), keptRequest())
	require.NoError(s.t, s.mustFresh(gone).Release(s.ctx)) // no phase: the key is deleted

	_, keys := s.abandoned(anyAbandoned)
	require.Equal(s.t, []string{old.Key, first.Key, second.Key}, keys, "every abandoned key, oldest first")
	// A horizon between old's creation and first's, measured on the store's clock just
	// before the query: the two are 2·pastLease apart, so a slow query does not move it
	// past first.
	oldRec, _ := s.lookup(old)
	firstRec, now := s.lookup(first)
	q := anyAbandoned
	q.Horizon = now.Sub(oldRec.CreatedAt.Add(firstRec.CreatedAt.Sub(oldRec.CreatedAt) / 2))
	_, keys = s.abandoned(q)
	require.Equal(s.t, []string{first.Key, second.Key}, keys, "not a key created before the horizon")
	q.Limit = 1
	_, keys = s.abandoned(q)
	require.Equal(s.t, []string{first.Key}, keys, "at most Limit, oldest first")
	q = anyAbandoned
	q.Grace = time.Hour
	_, keys = s.abandoned(q)
	require.Empty(s.t, keys, "not a key whose lease ended less than Grace ago")

	// Attempts: counted, spaced by the backoff, bounded by MaxAttempts.
	cs := s.completable()
	won, err := cs.BeginAttempt(s.ctx, first.Scope, first.Key, 0, time.Hour)
	require.NoError(s.t, err)
	require.True(s.t, won, "the first attempt on an abandoned key")
	won, err = cs.BeginAttempt(s.ctx, second.Scope, second.Key, 0, 0)
	require.NoError(s.t, err)
	require.True(s.t, won)
	recs, keys := s.abandoned(anyAbandoned)
	require.Equal(s.t, []string{old.Key, second.Key}, keys, "not a key whose next attempt is not due")
	require.Equal(s.t, 1, recs[1].Attempts, "the attempts a key has had")
	rec, now := s.lookup(first)
	require.Equal(s.t, 1, rec.Attempts, "Lookup reports the attempts")
	require.WithinDuration(s.t, now.Add(time.Hour), rec.NextAttempt, clockSlack, "Lookup reports the next attempt")
	q = anyAbandoned
	q.MaxAttempts = 1
	_, keys = s.abandoned(q)
	require.Equal(s.t, []string{old.Key}, keys, "not a key that has had MaxAttempts attempts")

	for _, c := range []storage.Claim{live, done, gone} {
		won, err := cs.BeginAttempt(s.ctx, c.Scope, c.Key, 0, 0)
		require.NoError(s.t, err)
		require.False(s.t, won, "no attempt on a live lease, a completed key or a key gone (%s)", c.Key)
	}
	s.complete(ll, created("2"))
}

// beginRacers is how many completers race for one attempt.
const beginRacers = 16

// testBeginAttemptRace: of completers racing to begin one attempt on a key, exactly one
// wins; one that saw a count already moved on loses.
func testBeginAttemptRace(s *suite) {
	c := withRequest(s.claim("k", "a"), keptRequest())
	l := s.mustFresh(c)
	require.NoError(s.t, l.Phase(s.ctx, "charged", noop))
	require.NoError(s.t, l.Release(s.ctx))
	cs := s.completable()
	var wins, fails atomic.Int32
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range beginRacers {
		wg.Go(func() {
			<-start
			won, err := cs.BeginAttempt(s.ctx, c.Scope, c.Key, 0, time.Hour)
			switch {
			case err != nil:
				fails.Add(1)
			case won:
				wins.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	require.Zero(s.t, fails.Load(), "BeginAttempt failed")
	require.EqualValues(s.t, 1, wins.Load(), "exactly one of %d racing completers begins the attempt", beginRacers)
	won, err := cs.BeginAttempt(s.ctx, c.Scope, c.Key, 0, 0)
	require.NoError(s.t, err)
	require.False(s.t, won, "an attempt counted on a stale count")
	rec, _ := s.lookup(c)
	require.Equal(s.t, 1, rec.Attempts)
}

// payments is the handler of the completer tests: a payment in two phases, charge (the
// provider) and receipt, that fails after charging while fail says so. It counts each
// phase's runs per key.
type payments struct {
	s          *suite
	mux        *http.ServeMux
	fail       func(r *http.Request) bool
	mu         sync.Mutex
	charges    map[string]int
	receipts   map[string]int
	scopeCalls atomic.Int32 // the scope function called for a completer's request
	completing atomic.Int32 // handler runs that saw op.Completing
	wrong      atomic.Value // a string: what a handler run found wrong
}

func (s *suite) payments(fail func(r *http.Request) bool) (*payments, *core.Engine) {
	s.t.Helper()
	eng, err := core.New(core.Config{Store: s.store, Mode: core.ModePhased, KeepRequest: true,
		KeepHeaders: []string{"Content-Type"}, Lease: 5 * time.Second})
	require.NoError(s.t, err)
	p := &payments{s: s, mux: http.NewServeMux(), fail: fail, charges: map[string]int{}, receipts: map[string]int{}}
	mw := eng.Middleware(func(r *http.Request) string {
		if _, ok := core.CompletionFromContext(r.Context()); ok {
			p.scopeCalls.Add(1)
		}
		return scope
	})
	p.mux.Handle("POST /payments", mw(http.HandlerFunc(p.serve)))
	return p, eng
}

func (p *payments) count(m map[string]int, key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m[key]++
}

func (p *payments) runs(m map[string]int, key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return m[key]
}

func (p *payments) serve(w http.ResponseWriter, r *http.Request) {
	op := core.MustOperation(r.Context())
	comp, marked := core.CompletionFromContext(r.Context())
	if op.Completing() != marked || marked && (comp.Key != op.Key() || comp.Scope != op.Scope() || comp.Attempt < 1) {
		p.wrong.Store(fmt.Sprintf("Completing %v, Completion %+v, operation %q/%q", op.Completing(), comp, op.Scope(), op.Key()))
	}
	if marked {
		p.completing.Add(1)
		if r.Header.Get("Content-Type") != "application/json" || r.URL.Query().Get("currency") != "eur" {
			p.wrong.Store(fmt.Sprintf("the completer's request lost its kept header or query: %v %v", r.Header, r.URL))
		}
	}
	if err := op.Phase(r.Context(), "charge_created", func(context.Context) error { p.count(p.charges, op.Key()); return nil }); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if p.fail(r) {
		http.Error(w, "the receipt service is down", http.StatusServiceUnavailable)
		return
	}
	if err := op.Phase(r.Context(), "receipt_sent", func(context.Context) error { p.count(p.receipts, op.Key()); return nil }); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"key":%q,"completing":%v}`, op.Key(), marked)
}

// post sends the payment under key.
func (p *payments) post(key string) *httptest.ResponseRecorder {
	r := httptest.NewRequestWithContext(p.s.ctx, http.MethodPost, "/payments?currency=eur", strings.NewReader(`{"amount":100}`))
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	p.mux.ServeHTTP(w, r)
	return w
}

// completerRounds is how many keys testCompleterRacesRetry races on, one after the other.
const completerRounds = 6

// testCompleterRacesRetry: a payment that failed after charging is finished by
// core.Completer without its client, through the application's handler, under the kept
// scope (the scope function is not called) and request; two completers and the client's
// retry racing on it (real goroutines) run each remaining phase once, and a retry
// afterwards gets the recorded response replayed byte for byte.
func testCompleterRacesRetry(s *suite) {
	var crashed sync.Map // keys whose first attempt has failed
	p, eng := s.payments(func(r *http.Request) bool {
		_, failed := crashed.LoadOrStore(core.MustOperation(r.Context()).Key(), true)
		return !failed
	})
	newCompleter := func() *core.Completer {
		return &core.Completer{Engine: eng, Handler: p.mux, Grace: time.Nanosecond, Backoff: time.Hour}
	}
	a, b := newCompleter(), newCompleter()
	for i := range completerRounds {
		key := s.httpKey(fmt.Sprint("k", i))
		require.Equal(s.t, http.StatusServiceUnavailable, p.post(key).Code, "the first attempt fails after charging")
		start := make(chan struct{})
		var wg sync.WaitGroup
		var passErr atomic.Value
		for _, c := range []*core.Completer{a, b} {
			wg.Go(func() {
				<-start
				if _, err := c.Pass(s.ctx); err != nil {
					passErr.Store(err)
				}
			})
		}
		var retried int
		if i%2 == 0 { // every other round, the client's retry races the completers
			wg.Go(func() {
				<-start
				retried = p.post(key).Code
			})
		}
		close(start)
		wg.Wait()
		require.Nil(s.t, passErr.Load(), "Pass")
		if i%2 == 0 {
			// It runs, finds the completer running (409), or, at REPEATABLE READ, collides
			// with it and is told to retry (503 + Retry-After, a serialization failure).
			require.Contains(s.t, []int{http.StatusCreated, http.StatusConflict, http.StatusServiceUnavailable}, retried,
				"the racing retry runs, finds the completer running, or collides and is told to retry")
		}
		require.Equal(s.t, 1, p.runs(p.charges, key), "the charge ran once")
		require.Equal(s.t, 1, p.runs(p.receipts, key), "the receipt was sent once: the operation was completed, once")
		rec, _, err := s.store.Lookup(s.ctx, scope, key)
		require.NoError(s.t, err)
		require.Equal(s.t, storage.StateCompleted, rec.State)
		w := p.post(key)
		require.Equal(s.t, http.StatusCreated, w.Code, "a retry afterwards")
		require.Equal(s.t, "true", w.Header().Get("Idempotent-Replayed"), "a retry afterwards is a replay")
		require.Equal(s.t, string(rec.Response.Body), w.Body.String(), "the replay is the recorded response")
	}
	require.Nil(s.t, p.wrong.Load(), "a handler run saw the completion wrong")
	require.Zero(s.t, p.scopeCalls.Load(), "the scope function is not called for the completer's requests")
	require.NotZero(s.t, p.completing.Load(), "the completer ran the handler")
	n, err := a.Pass(s.ctx)
	require.NoError(s.t, err)
	require.Zero(s.t, n, "nothing is left to complete")
}

// completerMaxAttempts is the bound testCompleterAttemptsBounded sets.
const completerMaxAttempts = 3

// testCompleterAttemptsBounded: an operation the completer cannot finish (the handler
// keeps failing) is tried MaxAttempts times, spaced by the backoff, then left alone,
// still started with its recovery point, for the client's retry, which completes it.
func testCompleterAttemptsBounded(s *suite) {
	var broken atomic.Bool
	broken.Store(true)
	p, eng := s.payments(func(*http.Request) bool { return broken.Load() })
	key := s.httpKey("k")
	require.Equal(s.t, http.StatusServiceUnavailable, p.post(key).Code)
	logs := &logRecords{}
	c := &core.Completer{Engine: eng, Handler: p.mux, Grace: time.Nanosecond, Backoff: 20 * time.Millisecond,
		MaxAttempts: completerMaxAttempts, Logger: slog.New(logs)}
	for range completerMaxAttempts + 2 {
		n, err := c.Pass(s.ctx)
		require.NoError(s.t, err)
		require.Zero(s.t, n)
		letTimePass(c.Backoff << completerMaxAttempts) // every backoff comes due
	}
	require.EqualValues(s.t, completerMaxAttempts, p.completing.Load(), "the completer tries MaxAttempts times, no more")
	require.Equal(s.t, 1, p.runs(p.charges, key), "the charge ran once")
	rec, _, err := s.store.Lookup(s.ctx, scope, key)
	require.NoError(s.t, err)
	require.Equal(s.t, storage.StateStarted, rec.State, "left for the client")
	require.Equal(s.t, "charge_created", rec.RecoveryPoint)
	require.Equal(s.t, completerMaxAttempts, rec.Attempts, "the attempts are visible")
	var gaveUp bool
	for _, r := range logs.take() {
		gaveUp = gaveUp || strings.Contains(r.Msg, "gives up")
	}
	require.True(s.t, gaveUp, "giving up is logged")

	broken.Store(false)
	require.Equal(s.t, http.StatusCreated, p.post(key).Code, "the client's retry completes it")
	require.Equal(s.t, 1, p.runs(p.charges, key), "the charge ran once")
	require.Equal(s.t, 1, p.runs(p.receipts, key))
}
