package failover_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/history"
)

// scope is every request's scope: the tests keep their keys apart by name.
const scope = "acct"

// opOf is the operation of a keyed request.
func opOf(ctx context.Context) *core.Operation { return core.MustOperation(ctx) }

// envInt reads a positive count from the environment, def when unset.
func envInt(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, name)
	require.Positive(t, n, name)
	return n
}

// provider is an outside service charged with the operation's derived key: it charges a
// derived key once, and answers the same charge to every later call with it.
type provider struct {
	mu      sync.Mutex
	charges map[string]string // derived key → charge
	calls   map[string]int
}

func (p *provider) charge(derivedKey string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.charges == nil {
		p.charges, p.calls = map[string]string{}, map[string]int{}
	}
	p.calls[derivedKey]++
	c, ok := p.charges[derivedKey]
	if !ok {
		c = fmt.Sprintf("ch_%d", len(p.charges)+1)
		p.charges[derivedKey] = c
	}
	return c
}

// charged reports whether the provider charged the operation key's derived key.
func (p *provider) charged(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.charges[key+":charge"]
	return ok
}

// app is one application instance: an engine on a store and an HTTP server whose handler
// writes one business row (orders table) per run, in phased mode inside the phase
// "charged" with the provider's charge.
type app struct {
	name  string
	mode  core.Mode
	srv   *httptest.Server
	runs  atomic.Int64
	prov  *provider
	rows  func(ctx context.Context) (map[string]int, error) // business rows by key
	fails errorLog
}

// insertFunc writes the business row of a run in the request's (or phase's) transaction.
type insertFunc func(ctx context.Context, key string, run int64) error

// serve starts the application's HTTP server on store with handler-level inserts.
func (a *app) serve(t *testing.T, store storage.Store, cfg core.Config, insert insertFunc) {
	t.Helper()
	cfg.Store, cfg.Mode = store, a.mode
	eng, err := core.New(cfg)
	require.NoError(t, err)
	a.srv = httptest.NewServer(eng.Middleware(func(*http.Request) string { return scope })(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			op := opOf(ctx)
			run := a.runs.Add(1)
			var charge string
			var err error
			work := func(ctx context.Context) error {
				if a.prov != nil {
					charge = a.prov.charge(op.DerivedKey("charge"))
				}
				return insert(ctx, op.Key(), run)
			}
			if a.mode == core.ModePhased {
				err = op.Phase(ctx, "charged", work)
				if err == nil && charge == "" { // resumed after the phase: the provider knows the charge
					charge = a.prov.charge(op.DerivedKey("charge"))
				}
			} else {
				err = work(ctx)
			}
			switch {
			case errors.Is(err, storage.ErrLeaseLost):
				return // the engine answers 409
			case err != nil:
				// What an application answers when its database fails under it: a
				// retryable 503, never a 500.
				a.fails.add(err)
				w.Header().Set("Retry-After", "1")
				http.Error(w, "database unavailable", http.StatusServiceUnavailable)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"key":%q,"run":%d,"charge":%q}`, op.Key(), run, charge)
		})))
	t.Cleanup(a.srv.Close)
}

// errorLog keeps a few of the errors the handler answered 503 for, by message.
type errorLog struct {
	mu sync.Mutex
	m  map[string]int
}

func (e *errorLog) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[string]int{}
	}
	msg := err.Error()
	if len(msg) > 120 {
		msg = msg[:120]
	}
	e.m[msg]++
}

func (e *errorLog) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return fmt.Sprint(e.m)
}

// sent is one request and its answer.
type sent struct {
	app        *app
	key        string
	start, end time.Time
	status     int
	out        history.Output
	body       string
}

// post sends one request for key to a, recorded in rec, and returns it.
func post(ctx context.Context, rec *history.Recorder, a *app, key string) *sent {
	s := &sent{app: a, key: key, start: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.srv.URL+"/orders", strings.NewReader(`{"amount":100}`))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, body, err := rec.Do(client, key, req)
	s.end = time.Now()
	s.out = history.Answer(resp, body, err)
	if resp != nil {
		s.status = resp.StatusCode
	}
	s.body = string(body)
	if err != nil {
		s.body = err.Error()
	}
	return s
}

// client sends the tests' requests; the timeout only keeps a stuck request from hanging
// the test.
var client = &http.Client{Timeout: time.Minute}

// untilAnswered sends key to a until it gets a fresh or replayed answer, recording every
// attempt, for at most bound; it returns the last attempt.
func untilAnswered(t *testing.T, rec *history.Recorder, a *app, key string, bound time.Duration) *sent {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		s := post(t.Context(), rec, a, key)
		if s.out.Kind == history.Fresh || s.out.Kind == history.Replayed {
			return s
		}
		require.True(t, time.Now().Before(deadline), "%s on %s: no answer within %s; last %d %s", key, a.name, bound, s.status, s.body)
		time.Sleep(100 * time.Millisecond) // the client's back-off before its retry
	}
}

// load sends requests with fresh keys from clients per app until halted, and keeps every
// answer.
type load struct {
	rec  *history.Recorder
	mu   sync.Mutex
	all  []*sent
	stop chan struct{}
	wg   sync.WaitGroup
}

func startLoad(ctx context.Context, rec *history.Recorder, tag string, apps []*app, clients int) *load {
	l := &load{rec: rec, stop: make(chan struct{})}
	for _, a := range apps {
		for w := range clients {
			l.wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-l.stop:
						return
					default:
					}
					s := post(ctx, rec, a, fmt.Sprintf("%s-%s-%d-%d", tag, a.name, w, i))
					l.mu.Lock()
					l.all = append(l.all, s)
					l.mu.Unlock()
					if s.out.Kind != history.Fresh {
						time.Sleep(20 * time.Millisecond) // a client's back-off after a failure
					}
				}
			})
		}
	}
	return l
}

// halt stops the clients and returns every answer.
func (l *load) halt() []*sent {
	close(l.stop)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.all
}

// firstFresh returns the first fresh answer of a to a request sent at or after since.
func (l *load) firstFresh(a *app, since time.Time) (*sent, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first *sent
	for _, s := range l.all {
		if s.app == a && s.out.Kind == history.Fresh && !s.start.Before(since) && (first == nil || s.end.Before(first.end)) {
			first = s
		}
	}
	return first, first != nil
}

// lastOf describes a's last n answers.
func (l *load) lastOf(a *app, n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for i := len(l.all) - 1; i >= 0 && len(out) < n; i-- {
		if s := l.all[i]; s.app == a {
			out = append(out, fmt.Sprintf("[%s %d %.100s]", s.out.Kind, s.status, s.body))
		}
	}
	return strings.Join(out, " ")
}

// await polls until cond holds, failing the test after bound.
func await(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "%s: not within %s", what, bound)
		time.Sleep(10 * time.Millisecond) // polling the load's progress
	}
}
