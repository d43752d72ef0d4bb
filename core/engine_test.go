package core_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
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
	"github.com/idemkit/idem/core/storage"
)

// harness is a keyed route behind Engine.Middleware with memstore, counting handler runs.
type harness struct {
	t       *testing.T
	handler http.Handler
	runs    atomic.Int64
	store   storage.Store
}

const orderJSON = `{"item":"book","quantity":2}`

// accountScope is the caller's account, as an authentication middleware would set it.
func accountScope(r *http.Request) string { return r.Header.Get("X-Account-ID") }

func newHarness(t *testing.T, cfg core.Config, h http.HandlerFunc) *harness {
	t.Helper()
	hs := &harness{t: t}
	if cfg.Store == nil {
		cfg.Store = memstore.New()
	}
	hs.store = cfg.Store
	if h == nil {
		h = createOrder
	}
	eng, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs.handler = eng.Middleware(accountScope)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hs.runs.Add(1)
		h(w, r)
	}))
	return hs
}

var orderSeq atomic.Int64

// createOrder answers 201 with a fresh id, so a re-run is visible in the body.
func createOrder(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	id := orderSeq.Add(1)
	w.Header().Set("Location", fmt.Sprintf("/v1/orders/%d", id))
	w.Header().Set("Content-Type", "application/json")
	http.SetCookie(w, &http.Cookie{Name: "session", Value: "secret"})
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":%d,"request":%s}`, id, body)
}

func (hs *harness) do(method, key, body string, hdr ...string) *httptest.ResponseRecorder {
	hs.t.Helper()
	r := httptest.NewRequest(method, "/v1/orders", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-Account-ID", "acct-1")
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	hs.handler.ServeHTTP(w, r)
	return w
}

func assertProblem(t *testing.T, w *httptest.ResponseRecorder, status int, kind core.ProblemKind) {
	t.Helper()
	typ := core.DefaultProblemBase + string(kind)
	if w.Code != status {
		t.Fatalf("status = %d, want %d; body %s", w.Code, status, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json", ct)
	}
	var p struct {
		Type, Title, Detail string
		Status              int
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", w.Body, err)
	}
	if p.Type != typ || p.Status != status || p.Title == "" || p.Detail == "" {
		t.Fatalf("problem = %+v, want type %s status %d with title and detail", p, typ, status)
	}
}

func TestFirstRequestAndReplay(t *testing.T) {
	t.Parallel()
	hs := newHarness(t, core.Config{}, nil)
	first := hs.do("POST", "k1", orderJSON)
	if first.Code != http.StatusCreated || first.Header().Get("Location") == "" {
		t.Fatalf("first: %d %v", first.Code, first.Header())
	}
	if first.Header().Get("Idempotent-Replayed") != "" {
		t.Fatal("first response carries Idempotent-Replayed")
	}
	if first.Header().Get("Set-Cookie") == "" {
		t.Fatal("first response lost its Set-Cookie")
	}
	for _, key := range []string{"k1", `"k1"`} { // bare and sf-string name the same key
		again := hs.do("POST", key, "{ \"quantity\": 2, \"item\": \"book\" }")
		if again.Code != first.Code || !bytes.Equal(again.Body.Bytes(), first.Body.Bytes()) {
			t.Fatalf("replay %d %q, want %d %q", again.Code, again.Body, first.Code, first.Body)
		}
		for _, h := range []string{"Location", "Content-Type"} {
			if again.Header().Get(h) != first.Header().Get(h) {
				t.Fatalf("replayed %s = %q, want %q", h, again.Header().Get(h), first.Header().Get(h))
			}
		}
		if again.Header().Get("Idempotent-Replayed") != "true" {
			t.Fatal("replay lacks Idempotent-Replayed: true")
		}
		if again.Header().Get("Set-Cookie") != "" {
			t.Fatal("Set-Cookie was replayed")
		}
	}
	if n := hs.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

func TestDifferentPayloadIs422(t *testing.T) {
	t.Parallel()
	hs := newHarness(t, core.Config{}, nil)
	if w := hs.do("POST", "k", orderJSON); w.Code != http.StatusCreated {
		t.Fatal(w.Code)
	}
	assertProblem(t, hs.do("POST", "k", `{"item":"book","quantity":3}`), 422, core.ProblemKeyReused)
	if n := hs.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

func TestInProgress(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	entered := make(chan struct{})
	hs := newHarness(t, core.Config{}, func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		createOrder(w, r)
	})
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- hs.do("POST", "k", orderJSON) }()
	<-entered
	w := hs.do("POST", "k", orderJSON)
	assertProblem(t, w, http.StatusConflict, core.ProblemInProgress)
	if w.Header().Get("Retry-After") != "1" {
		t.Fatalf("Retry-After = %q, want 1", w.Header().Get("Retry-After"))
	}
	// The in-flight fingerprint is visible (phased mode): the client's bug comes first.
	assertProblem(t, hs.do("POST", "k", `{"item":"pen","quantity":1}`), 422, core.ProblemKeyReused)
	close(release)
	if first := <-done; first.Code != http.StatusCreated {
		t.Fatalf("first: %d", first.Code)
	}
	if w := hs.do("POST", "k", orderJSON); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after completion: %d replayed=%q", w.Code, w.Header().Get("Idempotent-Replayed"))
	}
}

func TestLeaseWaitReplaysInsteadOf409(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	entered := make(chan struct{})
	waiting := make(chan struct{}) // closed once the duplicate has seen the key in progress
	var once sync.Once
	store := &claimWatcher{Store: memstore.New(), sawStarted: func() { once.Do(func() { close(waiting) }) }}
	hs := newHarness(t, core.Config{Store: store, LeaseWait: 5 * time.Second}, func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		createOrder(w, r)
	})
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- hs.do("POST", "k", orderJSON) }()
	<-entered
	dup := make(chan *httptest.ResponseRecorder)
	go func() { dup <- hs.do("POST", "k", orderJSON) }()
	<-waiting // the duplicate is waiting for the lease, not yet answered
	close(release)
	first, second := <-done, <-dup
	if second.Code != http.StatusCreated || second.Header().Get("Idempotent-Replayed") != "true" || second.Body.String() != first.Body.String() {
		t.Fatalf("waiting duplicate got %d %q, want the replay of %q", second.Code, second.Body, first.Body)
	}
}

// claimWatcher reports each claim that found the key in progress.
type claimWatcher struct {
	storage.Store
	sawStarted func()
}

func (s *claimWatcher) Claim(ctx context.Context, c storage.Claim) (storage.Claimed, error) {
	claimed, err := s.Store.Claim(ctx, c)
	lock, rec := claimed.Lock, claimed.Record
	if rec != nil && rec.State == storage.StateStarted {
		s.sawStarted()
	}
	return storage.Claimed{Verdict: claimed.Verdict, Lock: lock, Record: rec}, err
}

func TestKeyMissingOrMalformed(t *testing.T) {
	t.Parallel()
	hs := newHarness(t, core.Config{}, nil)
	assertProblem(t, hs.do("POST", "", orderJSON), 400, core.ProblemKeyMissing)
	for _, bad := range []string{"a,b", "a b", strings.Repeat("x", 256), "clé", "\"unterminated", "a\x01"} {
		assertProblem(t, hs.do("POST", bad, orderJSON), 400, core.ProblemKeyInvalid)
	}
	r := httptest.NewRequest("POST", "/v1/orders", strings.NewReader(orderJSON))
	r.Header.Add("Idempotency-Key", "a")
	r.Header.Add("Idempotency-Key", "b")
	w := httptest.NewRecorder()
	hs.handler.ServeHTTP(w, r)
	assertProblem(t, w, 400, core.ProblemKeyInvalid)
	if n := hs.runs.Load(); n != 0 {
		t.Fatalf("handler ran %d times on rejected requests", n)
	}
	// Nothing was stored under the malformed keys: the valid prefix is still free.
	if w := hs.do("POST", "a", orderJSON); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("fresh key after rejections: %d", w.Code)
	}
}

func TestUnkeyedMethodsAndOptionalKey(t *testing.T) {
	t.Parallel()
	hs := newHarness(t, core.Config{}, nil)
	for i := 0; i < 2; i++ {
		if w := hs.do("GET", "k", ""); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "" {
			t.Fatalf("GET: %d %v", w.Code, w.Header())
		}
	}
	if n := hs.runs.Load(); n != 2 {
		t.Fatalf("GET ran %d times, want 2 (untouched)", n)
	}
	opt := newHarness(t, core.Config{KeyOptional: true}, nil)
	for i := 0; i < 2; i++ {
		if w := opt.do("POST", "", orderJSON); w.Code != http.StatusCreated {
			t.Fatalf("optional key missing: %d", w.Code)
		}
	}
	if n := opt.runs.Load(); n != 2 {
		t.Fatalf("keyless POST ran %d times, want 2", n)
	}
}

func TestScopesAreIsolated(t *testing.T) {
	t.Parallel()
	hs := newHarness(t, core.Config{}, nil)
	a := hs.do("POST", "k", orderJSON, "X-Account-ID", "alice")
	b := hs.do("POST", "k", orderJSON, "X-Account-ID", "bob")
	if a.Code != 201 || b.Code != 201 || b.Header().Get("Idempotent-Replayed") != "" || a.Body.String() == b.Body.String() {
		t.Fatalf("two scopes, one key: %d %q / %d %q", a.Code, a.Body, b.Code, b.Body)
	}
	if n := hs.runs.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
}

func TestServerErrorReleasesKey(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	fail.Store(true)
	hs := newHarness(t, core.Config{}, func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			http.Error(w, "boom", http.StatusInternalServerError)
			return
		}
		createOrder(w, r)
	})
	if w := hs.do("POST", "k", orderJSON); w.Code != 500 || w.Body.String() != "boom\n" {
		t.Fatalf("first: %d %q, want the handler's own 500", w.Code, w.Body)
	}
	fail.Store(false)
	if w := hs.do("POST", "k", orderJSON); w.Code != 201 || w.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry: %d replayed=%q, want a fresh 201", w.Code, w.Header().Get("Idempotent-Replayed"))
	}
	if n := hs.runs.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
}

func TestUnstorable4xxReleasesKey(t *testing.T) {
	t.Parallel()
	for _, status := range []int{408, 409, 425, 429} {
		hs := newHarness(t, core.Config{}, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status) })
		hs.do("POST", "k", orderJSON)
		if w := hs.do("POST", "k", orderJSON); w.Code != status || w.Header().Get("Idempotent-Replayed") != "" {
			t.Fatalf("%d was replayed", status)
		}
		if n := hs.runs.Load(); n != 2 {
			t.Fatalf("%d: handler ran %d times, want 2", status, n)
		}
	}
	hs := newHarness(t, core.Config{}, func(w http.ResponseWriter, r *http.Request) { http.Error(w, "bad", 400) })
	hs.do("POST", "k", orderJSON)
	if w := hs.do("POST", "k", orderJSON); w.Code != 400 || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("400 not replayed: %d", w.Code)
	}
}

func TestPanicReleasesKeyAndPropagates(t *testing.T) {
	t.Parallel()
	var panicking atomic.Bool
	panicking.Store(true)
	hs := newHarness(t, core.Config{}, func(w http.ResponseWriter, r *http.Request) {
		if panicking.Load() {
			panic("handler exploded")
		}
		createOrder(w, r)
	})
	func() {
		defer func() {
			if p := recover(); p != "handler exploded" {
				t.Fatalf("recovered %v, want the handler's panic", p)
			}
		}()
		hs.do("POST", "k", orderJSON)
		t.Fatal("panic did not propagate")
	}()
	panicking.Store(false)
	if w := hs.do("POST", "k", orderJSON); w.Code != 201 || w.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry after panic: %d", w.Code)
	}
}

func TestOversizeBodyIs413(t *testing.T) {
	t.Parallel()
	hs := newHarness(t, core.Config{MaxRequestBody: 64}, nil)
	big := `{"item":"` + strings.Repeat("x", 100) + `"}`
	assertProblem(t, hs.do("POST", "k", big), 413, core.ProblemBodyTooLarge)
	// Unknown length (chunked): the bound still holds.
	r := httptest.NewRequest("POST", "/v1/orders", io.MultiReader(strings.NewReader(big)))
	r.ContentLength = -1
	r.Header.Set("Idempotency-Key", "k")
	r.Header.Set("X-Account-ID", "acct-1")
	w := httptest.NewRecorder()
	hs.handler.ServeHTTP(w, r)
	assertProblem(t, w, 413, core.ProblemBodyTooLarge)
	if n := hs.runs.Load(); n != 0 {
		t.Fatalf("handler ran %d times", n)
	}
	if w := hs.do("POST", "k", orderJSON); w.Code != 201 || w.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("the key was stored by a rejected request: %d", w.Code)
	}
}

func TestHandlerSeesIdenticalBody(t *testing.T) {
	t.Parallel()
	sent := "{ \"item\" : \"book\",\n\"quantity\":2 }"
	var got []byte
	hs := newHarness(t, core.Config{}, func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		w.WriteHeader(204)
	})
	hs.do("POST", "k", sent)
	if string(got) != sent {
		t.Fatalf("handler read %q, want %q", got, sent)
	}
}

// failingStore is a Store whose Claim fails, or whose Complete fails, to check that the
// engine fails closed. It stands in for a broken database, not for a working one.
type failingStore struct {
	claimErr    error
	completeErr error
	released    atomic.Int64
}

func (s *failingStore) Claim(ctx context.Context, c storage.Claim) (storage.Claimed, error) {
	if s.claimErr != nil {
		return storage.Claimed{}, s.claimErr
	}
	return storage.Claimed{Verdict: storage.VerdictAbsent, Lock: &failingLock{s: s}}, nil
}
func (s *failingStore) DeleteExpired(context.Context, time.Time, int) (int, error) { return 0, nil }
func (s *failingStore) Lookup(context.Context, string, string) (*storage.Record, time.Time, error) {
	return nil, time.Time{}, storage.ErrNotFound
}
func (s *failingStore) SupportsAtomic() bool     { return false }
func (s *failingStore) Retention() time.Duration { return 24 * time.Hour }

type failingLock struct{ s *failingStore }

func (l *failingLock) Context(ctx context.Context) context.Context { return ctx }
func (l *failingLock) RecoveryPoint() string                       { return storage.RecoveryStarted }
func (l *failingLock) Resumed() bool                               { return false }
func (l *failingLock) Renew(context.Context) error                 { return nil }
func (l *failingLock) Phase(ctx context.Context, _ string, fn func(context.Context) error) error {
	return fn(ctx)
}
func (l *failingLock) Complete(context.Context, *storage.Response) error { return l.s.completeErr }
func (l *failingLock) Release(context.Context) error                     { l.s.released.Add(1); return nil }

func TestStoreFailureFailsClosed(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		err    error
		status int
		typ    core.ProblemKind
	}{
		"unreachable": {errors.New("dial tcp: connection refused"), 503, core.ProblemStoreUnavailable},
		"lock wait":   {fmt.Errorf("pg: %w", storage.ErrInProgress), 409, core.ProblemInProgress},
		"deadlock":    {fmt.Errorf("pg: %w", storage.ErrTransient), 503, core.ProblemCollision},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			hs := newHarness(t, core.Config{Store: &failingStore{claimErr: tc.err}}, nil)
			w := hs.do("POST", "k", orderJSON)
			assertProblem(t, w, tc.status, tc.typ)
			if w.Header().Get("Retry-After") != "1" {
				t.Fatalf("Retry-After = %q", w.Header().Get("Retry-After"))
			}
			if n := hs.runs.Load(); n != 0 {
				t.Fatalf("handler ran %d times with a failing store", n)
			}
		})
	}
}

func TestFailedCompleteNeverAnswersTheHandlersStatus(t *testing.T) {
	t.Parallel()
	fs := &failingStore{completeErr: errors.New("commit: deferred constraint violated")}
	hs := newHarness(t, core.Config{Store: fs}, nil)
	w := hs.do("POST", "k", orderJSON)
	assertProblem(t, w, 503, core.ProblemNotRecorded)
	if w.Header().Get("Location") != "" {
		t.Fatal("the handler's Location leaked into the failure answer")
	}
	if fs.released.Load() != 1 {
		t.Fatalf("released %d times, want 1", fs.released.Load())
	}
	fs.completeErr = fmt.Errorf("fenced: %w", storage.ErrLeaseLost)
	assertProblem(t, hs.do("POST", "k2", orderJSON), 409, core.ProblemInProgress)
}

func TestLargeResponseIsNotReplayedOrRerun(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 2048)
	hs := newHarness(t, core.Config{MaxResponseBody: 1024}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/v1/reports/1")
		w.WriteHeader(201)
		io.WriteString(w, big)
	})
	if w := hs.do("POST", "k", orderJSON); w.Code != 201 || w.Body.String() != big {
		t.Fatalf("first: %d, %d bytes", w.Code, w.Body.Len())
	}
	w := hs.do("POST", "k", orderJSON)
	assertProblem(t, w, http.StatusGone, core.ProblemResponseTooLarge)
	if w.Header().Get("Location") != "/v1/reports/1" || w.Header().Get("Retry-After") != "" {
		t.Fatalf("response-too-large answer: Location %q Retry-After %q", w.Header().Get("Location"), w.Header().Get("Retry-After"))
	}
	if n := hs.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

func TestCancelledRequestReleasesKey(t *testing.T) {
	t.Parallel()
	hs := newHarness(t, core.Config{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	inner := hs.handler
	hs.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Cancel") != "" {
			r = r.WithContext(ctx)
			cancel()
		}
		inner.ServeHTTP(w, r)
	})
	if w := hs.do("POST", "k", orderJSON, "X-Cancel", "1"); w.Code != 503 {
		t.Fatalf("cancelled: %d", w.Code)
	}
	if w := hs.do("POST", "k", orderJSON); w.Code != 201 || w.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry after cancel: %d", w.Code)
	}
}

func TestParallelDuplicatesRunOnce(t *testing.T) {
	t.Parallel()
	const n = 50
	// The first request holds the key until every twin has been answered 409, so all
	// of them truly overlap it.
	var conflicts atomic.Int64
	allAnswered := make(chan struct{})
	hooks := core.HookFunc(func(_ context.Context, ev core.Event) {
		if ev.Outcome == core.OutcomeConflict && conflicts.Add(1) == n-1 {
			close(allAnswered)
		}
	})
	hs := newHarness(t, core.Config{Hooks: hooks}, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-allAnswered:
		case <-time.After(10 * time.Second):
			t.Errorf("only %d of %d twins were answered while the first held the key", conflicts.Load(), n-1)
		}
		createOrder(w, r)
	})
	var wg sync.WaitGroup
	responses := make([]*httptest.ResponseRecorder, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			responses[i] = hs.do("POST", "same", orderJSON)
		}()
	}
	close(start)
	wg.Wait()
	if got := hs.runs.Load(); got != 1 {
		t.Fatalf("handler ran %d times for %d duplicates, want 1", got, n)
	}
	var original string
	for _, w := range responses {
		if w.Code == 201 && w.Header().Get("Idempotent-Replayed") == "" {
			original = w.Body.String()
		}
	}
	for _, w := range responses {
		switch {
		case w.Code == 201 && w.Body.String() == original:
		case w.Code == 409 && w.Header().Get("Retry-After") == "1":
		default:
			t.Fatalf("response %d %q is neither the original, its replay, nor 409", w.Code, w.Body)
		}
	}
	if w := hs.do("POST", "same", orderJSON); w.Body.String() != original {
		t.Fatalf("late replay %q, want %q", w.Body, original)
	}
}

func TestHooksObserveOutcomes(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []core.Outcome
	hook := core.HookFunc(func(_ context.Context, ev core.Event) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, ev.Outcome)
	})
	hs := newHarness(t, core.Config{Hooks: hook}, nil)
	hs.do("POST", "k", orderJSON)
	hs.do("POST", "k", orderJSON)
	hs.do("POST", "k", `{"x":1}`)
	hs.do("POST", "", orderJSON)
	want := []core.Outcome{core.OutcomeClaimed, core.OutcomeCompleted, core.OutcomeReplayed, core.OutcomeMismatch, core.OutcomeRejected}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
}

func TestConfigValidateNamesTheField(t *testing.T) {
	t.Parallel()
	cases := map[string]core.Config{
		"Store":          {},
		"Mode":           {Store: memstore.New(), Mode: core.ModeAtomic},
		"HeaderName":     {Store: memstore.New(), HeaderName: "bad header"},
		"ReplayHeaders":  {Store: memstore.New(), ReplayHeaders: []string{"Location", "Set-Cookie"}},
		"ReplayHeaders:": {Store: memstore.New(), ReplayHeaders: []string{"www-authenticate"}},
		"Lease":          {Store: memstore.New(), Lease: -time.Second},
		"Lease:":         {Store: memstore.New(memstore.WithRetention(time.Second)), Lease: time.Minute},
		"ProblemBase":    {Store: memstore.New(), ProblemBase: "docs/problems.md#"},
		"Methods":        {Store: memstore.New(), Methods: []string{"POST", "patch"}},
	}
	for field, cfg := range cases {
		_, err := core.New(cfg)
		if !errors.Is(err, core.ErrInvalidConfig) || !strings.Contains(err.Error(), strings.TrimSuffix(field, ":")+":") {
			t.Errorf("%s: err = %v, want ErrInvalidConfig naming %s", field, err, field)
		}
	}
	if _, err := core.New(core.Config{Store: memstore.New(), Mode: core.ModeAtomic}); !errors.Is(err, storage.ErrUnsupportedMode) {
		t.Errorf("atomic on memstore: %v, want storage.ErrUnsupportedMode", err)
	}
}

// TestEarlyHintsAreNotTheFinalStatus: a handler that sends 103 Early Hints and then its
// 201, through a real server: the client gets the 201 and its body, the 201 is recorded,
// and the retry gets it replayed; the handler runs once. (A 103 taken for the final
// status was sent as a 200 with the 201's body, and released the key: not storable.)
func TestEarlyHintsAreNotTheFinalStatus(t *testing.T) {
	t.Parallel()
	eng, err := core.New(core.Config{Store: memstore.New()})
	require.NoError(t, err)
	var runs atomic.Int32
	srv := httptest.NewServer(eng.Middleware(accountScope)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Link", "</app.css>; rel=preload; as=style")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Set("Location", "/orders/1")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":1}`)
	})))
	t.Cleanup(srv.Close)
	for i, replayed := range []string{"", "true"} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/orders", strings.NewReader(orderJSON))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "hints-1")
		req.Header.Set("X-Account-ID", "acme")
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, http.StatusCreated, resp.StatusCode, "request %d: the final status", i+1)
		assert.Equal(t, `{"id":1}`, string(body), "request %d", i+1)
		assert.Equal(t, "/orders/1", resp.Header.Get("Location"), "request %d", i+1)
		assert.Equal(t, replayed, resp.Header.Get("Idempotent-Replayed"), "request %d", i+1)
	}
	assert.Equal(t, int32(1), runs.Load(), "the handler runs once")
}

// TestTrickledBodyIs408: a body that does not arrive before the server's read deadline
// (http.Server.ReadTimeout) is a 408 problem, not a 400 unreadable body; the handler does
// not run and nothing is claimed.
func TestTrickledBodyIs408(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	eng, err := core.New(core.Config{Store: store})
	require.NoError(t, err)
	var runs atomic.Int32
	srv := httptest.NewUnstartedServer(eng.Middleware(accountScope)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	})))
	srv.Config.ReadTimeout = 200 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	// Ten bytes declared, one sent: the server's read deadline passes while it waits.
	_, err = io.WriteString(conn, "POST /orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: slow-1\r\nX-Account-ID: acme\r\nContent-Length: 10\r\n\r\n{")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusRequestTimeout, resp.StatusCode, "body %s", body)
	assert.Contains(t, string(body), string(core.ProblemBodyTimeout))
	assert.Zero(t, runs.Load(), "the handler does not run")
	assert.Zero(t, store.Len(), "nothing is claimed")
}
