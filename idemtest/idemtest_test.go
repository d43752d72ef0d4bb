package idemtest_test

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
	"go.uber.org/goleak"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/idemtest"
)

// TestMain fails the run on leaked goroutines, except the pool that internal/testdb
// keeps open for the whole run.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("github.com/jackc/puddle/v2.(*Pool).createIdleResources"))
}

const book = `{"item":"book","quantity":2}`

// shop is a small orders API: POST /v1/orders counts an order and answers 201 with its
// Location; GET /v1/orders lists the count. X-Fail: 1 makes the POST answer 500 before
// it orders anything.
type shop struct {
	orders atomic.Int64
	// enter, when set, runs when a POST starts (before anything is counted).
	enter func(r *http.Request)
}

func (s *shop) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/orders", func(w http.ResponseWriter, r *http.Request) {
		if s.enter != nil {
			s.enter(r)
		}
		if r.Header.Get("X-Fail") == "1" {
			http.Error(w, "injected failure", http.StatusInternalServerError)
			return
		}
		id := s.orders.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", fmt.Sprintf("/v1/orders/%d", id))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d,"at":%q}`, id, time.Now().Format(time.RFC3339Nano))
	})
	mux.HandleFunc("GET /v1/orders", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"orders":%d}`, s.orders.Load())
	})
	return mux
}

func account(r *http.Request) string { return r.Header.Get("X-Account") }

// protected is the shop behind core's middleware on a memstore, POST only.
func (s *shop) protected(store *memstore.Store) http.Handler {
	mux := s.routes()
	eng, err := core.New(core.Config{Store: store})
	if err != nil {
		panic(err)
	}
	idem := eng.Middleware(account)
	root := http.NewServeMux()
	root.Handle("POST /v1/orders", idem(mux))
	root.Handle("/", mux)
	return root
}

func target(h http.Handler, s *shop) idemtest.Target {
	return idemtest.Target{
		Handler:       h,
		Path:          "/v1/orders",
		GetPath:       "/v1/orders",
		Header:        http.Header{"X-Account": {"alice"}},
		Body:          func(int) []byte { return []byte(book) },
		SideEffects:   func() int { return int(s.orders.Load()) },
		InjectFailure: func(r *http.Request) { r.Header.Set("X-Fail", "1") },
	}
}

func outcomes(rep idemtest.Report) map[string]idemtest.Outcome {
	m := map[string]idemtest.Outcome{}
	for _, r := range rep.Results {
		m[r.Name] = r.Outcome
	}
	return m
}

// failures joins the failures of one check.
func failures(rep idemtest.Report, name string) string {
	for _, r := range rep.Results {
		if r.Name == name {
			return strings.Join(r.Failures, "\n")
		}
	}
	return ""
}

var allChecks = []string{"missing-key", "malformed-keys", "first-fresh", "replay", "changed-body", "parallel", "failure-retry", "get-untouched"}

func TestTheLibraryPassesEveryCheck(t *testing.T) {
	s := &shop{}
	rep := idemtest.Check(t, target(s.protected(memstore.New()), s))
	require.Len(t, rep.Results, len(allChecks))
	for _, name := range allChecks {
		assert.Equal(t, idemtest.Pass, outcomes(rep)[name], name)
	}
	assert.False(t, rep.Failed())
	assert.LessOrEqual(t, rep.Requests, 30+idemtest.DefaultParallel)
}

func TestNoIdempotencyFailsTheKeyChecks(t *testing.T) {
	s := &shop{}
	rep, err := idemtest.Run(t.Context(), target(s.routes(), s))
	require.NoError(t, err)
	o := outcomes(rep)
	for _, name := range []string{"missing-key", "malformed-keys", "replay", "changed-body", "parallel", "failure-retry"} {
		assert.Equal(t, idemtest.Fail, o[name], name)
	}
	assert.Equal(t, idemtest.Pass, o["first-fresh"])
	assert.Equal(t, idemtest.Pass, o["get-untouched"])
	assert.True(t, rep.Failed())
	// Each failure says what was expected and what came back.
	assert.Contains(t, failures(rep, "missing-key"), "want 400 problem (application/problem+json, type …key-missing); got 201")
	assert.Contains(t, failures(rep, "replay"), `Idempotent-Replayed: want "true"; got []`)
	assert.Contains(t, failures(rep, "replay"), "side effects after the retry: want +0, got +1")
	assert.Contains(t, failures(rep, "changed-body"), "want 422 problem")
	assert.Contains(t, failures(rep, "parallel"), "want exactly one fresh 2xx answer; got 20 (20×201)")
}

// hideReplayed drops the Idempotent-Replayed header from every answer.
func hideReplayed(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&dropHeader{ResponseWriter: w}, r)
	})
}

type dropHeader struct{ http.ResponseWriter }

func (d *dropHeader) WriteHeader(code int) {
	d.Header().Del("Idempotent-Replayed")
	d.ResponseWriter.WriteHeader(code)
}

func (d *dropHeader) Write(p []byte) (int, error) {
	d.Header().Del("Idempotent-Replayed")
	return d.ResponseWriter.Write(p)
}

func TestReplaysWithoutTheHeaderFail(t *testing.T) {
	s := &shop{}
	rep, err := idemtest.Run(t.Context(), target(hideReplayed(s.protected(memstore.New())), s))
	require.NoError(t, err)
	o := outcomes(rep)
	assert.Equal(t, idemtest.Fail, o["replay"])
	assert.Contains(t, failures(rep, "replay"), `Idempotent-Replayed: want "true"; got []`)
	assert.NotContains(t, failures(rep, "replay"), "side effects")
	assert.Equal(t, idemtest.Fail, o["parallel"]) // replays look fresh
	assert.Equal(t, idemtest.Fail, o["failure-retry"])
	for _, name := range []string{"missing-key", "malformed-keys", "first-fresh", "changed-body", "get-untouched"} {
		assert.Equal(t, idemtest.Pass, o[name], name)
	}
}

// checkThenRun is idempotency done wrong: it looks the key up, runs the handler
// unlocked, then stores the answer, so concurrent twins all run.
func checkThenRun(next http.Handler) http.Handler {
	var mu sync.Mutex
	done := map[string]*httptest.ResponseRecorder{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		rec, ok := done[key]
		mu.Unlock()
		if !ok {
			rec = httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			mu.Lock()
			done[key] = rec
			mu.Unlock()
		} else {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		for k, vs := range rec.Header() {
			w.Header()[k] = vs
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
}

// twoInside makes the first POST wait (bounded) until a second one has started.
func twoInside() func() {
	var n atomic.Int64
	second := make(chan struct{})
	return func() {
		switch n.Add(1) {
		case 1:
			select {
			case <-second:
			case <-time.After(5 * time.Second):
			}
		case 2:
			close(second)
		}
	}
}

func TestRunningTwiceUnderConcurrencyFails(t *testing.T) {
	s := &shop{}
	tg := target(checkThenRun(s.routes()), s)
	tg.InjectFailure, tg.GetPath = nil, ""
	tg.Body = func(i int) []byte { return []byte(fmt.Sprintf(`{"item":"book %d"}`, i)) }
	// The parallel check's first request waits for its twin (its key names the check),
	// so at least two run whatever the scheduling.
	wait := twoInside()
	s.enter = func(r *http.Request) {
		if strings.Contains(r.Header.Get("Idempotency-Key"), "-parallel") {
			wait()
		}
	}
	rep, err := idemtest.Run(t.Context(), tg)
	require.NoError(t, err)
	assert.Equal(t, idemtest.Fail, outcomes(rep)["parallel"])
	assert.Regexp(t, `want exactly one fresh 2xx answer; got [2-9]|1[0-9]|20`, failures(rep, "parallel"))
	assert.Contains(t, failures(rep, "parallel"), "side effects after 20 concurrent requests with one key: want +1, got +")
	assert.Equal(t, idemtest.Pass, outcomes(rep)["replay"])
	assert.Equal(t, idemtest.Skip, outcomes(rep)["failure-retry"])
	assert.Equal(t, idemtest.Skip, outcomes(rep)["get-untouched"])
}

func TestPerInstanceStoresFailAcrossURLs(t *testing.T) {
	s := &shop{}
	a := httptest.NewServer(s.protected(memstore.New()))
	defer a.Close()
	b := httptest.NewServer(s.protected(memstore.New()))
	defer b.Close()
	tg := target(nil, s)
	tg.URLs = []string{a.URL, b.URL}
	rep, err := idemtest.Run(t.Context(), tg)
	require.NoError(t, err)
	assert.Equal(t, idemtest.Fail, outcomes(rep)["replay"])
	assert.Contains(t, failures(rep, "replay"), "side effects after the retry: want +0, got +1")
	assert.Contains(t, rep.Target, a.URL+", "+b.URL)

	// One store behind both instances passes.
	shared := memstore.New()
	c := httptest.NewServer(s.protected(shared))
	defer c.Close()
	d := httptest.NewServer(s.protected(shared))
	defer d.Close()
	tg.URLs = []string{c.URL, d.URL}
	idemtest.Check(t, tg)
}

// recorder is a testing.TB that keeps what Check reports.
type recorder struct {
	testing.TB
	errors []string
	logs   []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, a ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, a...))
}
func (r *recorder) Log(a ...any) { r.logs = append(r.logs, fmt.Sprint(a...)) }
func (r *recorder) Failed() bool { return len(r.errors) > 0 }

func TestCheckReportsEachFailureWithItsCheck(t *testing.T) {
	s := &shop{}
	rec := &recorder{TB: t}
	rep := idemtest.Check(rec, target(s.routes(), s))
	require.True(t, rep.Failed())
	require.NotEmpty(t, rec.errors)
	assert.True(t, strings.HasPrefix(rec.errors[0], "idemtest: missing-key: no Idempotency-Key: want 400 problem"), rec.errors[0])
	require.Len(t, rec.logs, 1)
	assert.Contains(t, rec.logs[0], "FAILED:")
}

// TestCheckLogsThePassingReport: a run where every check passes reports no error and logs
// the whole report once, so go test -v shows what was checked.
func TestCheckLogsThePassingReport(t *testing.T) {
	s := &shop{}
	rec := &recorder{TB: t}
	rep := idemtest.Check(rec, target(s.protected(memstore.New()), s))
	require.False(t, rep.Failed())
	assert.Empty(t, rec.errors)
	require.Len(t, rec.logs, 1)
	for _, name := range allChecks {
		assert.Contains(t, rec.logs[0], "PASS  "+name, "the report lists %s", name)
	}
	assert.Contains(t, rec.logs[0], "ok: 8 passed, 0 failed, 0 skipped")
}

func TestInvalidTargets(t *testing.T) {
	for name, tg := range map[string]idemtest.Target{
		"no handler or URL": {Path: "/v1/orders"},
		"both":              {Handler: http.NotFoundHandler(), URLs: []string{"http://x"}, Path: "/v1/orders"},
		"relative path":     {Handler: http.NotFoundHandler(), Path: "v1/orders"},
		"bad URL":           {URLs: []string{"localhost:8080"}, Path: "/v1/orders"},
		"parallel 1":        {Handler: http.NotFoundHandler(), Path: "/v1/orders", Parallel: 1},
	} {
		_, err := idemtest.Run(t.Context(), tg)
		assert.ErrorContains(t, err, "idemtest: invalid Target", name)
	}
}

func TestRunStopsAtItsDeadline(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	began := time.Now()
	rep, err := idemtest.Run(t.Context(), idemtest.Target{Handler: slow, Path: "/v1/orders",
		Timeout: 300 * time.Millisecond, RequestTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	assert.Less(t, time.Since(began), 5*time.Second)
	assert.True(t, rep.Failed())
	assert.NotEmpty(t, rep.Err)
	assert.Contains(t, failures(rep, "missing-key"), "context deadline exceeded")
}

func TestUnreachableURLFailsEveryCheckThatRuns(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	rep, err := idemtest.Run(context.Background(), idemtest.Target{URLs: []string{url}, Path: "/v1/orders"})
	require.NoError(t, err)
	assert.True(t, rep.Failed())
	assert.Contains(t, failures(rep, "missing-key"), "connection refused")
}
