package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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

// engineTests run in ModePhased, through core's engine on the store: rules that the
// engine and the store keep together.
var engineTests = []test{
	{"UnreachedRecoveryPoint", testUnreachedRecoveryPoint},
	{"LongPhaseKeepsLease", testLongPhaseKeepsLease},
	{"NoPhaseAfterLeaseLost", testNoPhaseAfterLeaseLost},
}

// engine returns net/http middleware of an engine in phased mode on the suite's store,
// with cfg's settings, and the log records it writes.
func (s *suite) engine(cfg core.Config) (func(http.HandlerFunc) http.Handler, *logRecords) {
	s.t.Helper()
	logs := &logRecords{}
	cfg.Store, cfg.Mode, cfg.Logger = s.store, core.ModePhased, slog.New(logs)
	eng, err := core.New(cfg)
	require.NoError(s.t, err, "core.New")
	mw := eng.Middleware(func(*http.Request) string { return scope })
	return func(h http.HandlerFunc) http.Handler { return mw(h) }, logs
}

// httpKey is an Idempotency-Key unique to the subtest (its name may hold spaces, which a
// bare key may not).
func (s *suite) httpKey(suffix string) string {
	sum := sha256.Sum256([]byte(keyFor(s.t, suffix)))
	return hex.EncodeToString(sum[:16])
}

// post sends a keyed POST of body to h and returns the recorded answer.
func (s *suite) post(h http.Handler, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequestWithContext(s.ctx, http.MethodPost, "/orders", strings.NewReader(body))
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// requireProblem checks that w is a problem of kind k, and returns its detail.
func (s *suite) requireProblem(w *httptest.ResponseRecorder, k core.ProblemKind, msg string) string {
	s.t.Helper()
	require.Equal(s.t, k.Status(), w.Code, "%s: status (body %s)", msg, w.Body)
	var p struct{ Type, Detail string }
	require.NoError(s.t, json.Unmarshal(w.Body.Bytes(), &p), "%s: a problem body, got %s", msg, w.Body)
	require.True(s.t, strings.HasSuffix(p.Type, "#"+string(k)), "%s: problem type %q, want kind %q", msg, p.Type, k)
	return p.Detail
}

// testUnreachedRecoveryPoint: an operation whose recorded recovery point names a phase
// the code no longer runs (renamed between deploys) is never recorded as done with its
// work skipped. The first deploy commits phase charge_created and fails; the next one
// calls it charge_made, so its retry would skip every phase: it answers a 500 problem
// naming the point, logs an error, and keeps the point; a fixed deploy then resumes after
// the point and completes, the committed phase never run twice.
func testUnreachedRecoveryPoint(s *suite) {
	deploy, logs := s.engine(core.Config{})
	key, body := s.httpKey("k"), `{"amount":100}`
	var charges, shipments atomic.Int32
	phase := func(w http.ResponseWriter, r *http.Request, name string, count *atomic.Int32) bool {
		err := core.MustOperation(r.Context()).Phase(r.Context(), name, func(context.Context) error {
			count.Add(1)
			return nil
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return false
		}
		return true
	}

	v1 := deploy(func(w http.ResponseWriter, r *http.Request) {
		if phase(w, r, "charge_created", &charges) {
			http.Error(w, "the shipping service timed out", http.StatusServiceUnavailable)
		}
	})
	require.Equal(s.t, http.StatusServiceUnavailable, s.post(v1, key, body).Code, "the first attempt fails after its phase")
	require.EqualValues(s.t, 1, charges.Load())

	v2 := deploy(func(w http.ResponseWriter, r *http.Request) { // charge_created renamed
		if phase(w, r, "charge_made", &charges) && phase(w, r, "shipped", &shipments) {
			w.WriteHeader(http.StatusCreated)
		}
	})
	logs.take()
	w := s.post(v2, key, body)
	detail := s.requireProblem(w, core.ProblemCannotResume, "a retry whose code never reaches the recorded recovery point")
	require.Contains(s.t, detail, "charge_created", "the problem names the recovery point")
	var logged bool
	for _, r := range logs.take() {
		if r.Level == slog.LevelError && r.attrs["recovery_point"] == "charge_created" {
			logged = true
		}
	}
	require.True(s.t, logged, "an error naming the recovery point is logged")
	require.EqualValues(s.t, 0, shipments.Load(), "skipped phases did not run")

	other := s.claim("k", "another request")
	other.Key = key
	rec := s.mustRecord(other)
	require.Equal(s.t, storage.StateStarted, rec.State, "the operation must not be recorded as done with its work skipped")
	require.Equal(s.t, "charge_created", rec.RecoveryPoint, "the recovery point is kept for a fixed deploy")

	v3 := deploy(func(w http.ResponseWriter, r *http.Request) { // fixed
		if phase(w, r, "charge_created", &charges) && phase(w, r, "shipped", &shipments) {
			w.WriteHeader(http.StatusCreated)
		}
	})
	require.Equal(s.t, http.StatusCreated, s.post(v3, key, body).Code, "a fixed deploy resumes and completes")
	require.EqualValues(s.t, 1, charges.Load(), "the committed phase is never run again")
	require.EqualValues(s.t, 1, shipments.Load(), "the phase after the recovery point runs once")
	w = s.post(v3, key, body)
	require.Equal(s.t, http.StatusCreated, w.Code)
	require.Equal(s.t, "true", w.Header().Get("Idempotent-Replayed"), "then it replays")
}

// longLease is the lease of testLongPhaseKeepsLease: short, so that the phase outlives
// it several times in a short test.
const longPhaseLease = 300 * time.Millisecond

// testLongPhaseKeepsLease: while a phase runs for several leases (a slow provider call),
// the engine renews the lease, so a twin retrying meanwhile is told 409 in progress and
// never takes the key over; the slow request then completes and the twin replays it.
func testLongPhaseKeepsLease(s *suite) {
	deploy, _ := s.engine(core.Config{Lease: longPhaseLease})
	key, body := s.httpKey("k"), `{"amount":100}`
	var runs atomic.Int32
	entered, proceed := make(chan struct{}), make(chan struct{})
	h := deploy(func(w http.ResponseWriter, r *http.Request) {
		first := runs.Add(1) == 1
		err := core.MustOperation(r.Context()).Phase(r.Context(), "charged", func(context.Context) error {
			if first {
				close(entered)
				<-proceed // the provider answers slowly
			}
			return nil
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":1}`))
	})

	slow := make(chan *httptest.ResponseRecorder, 1)
	go func() { slow <- s.post(h, key, body) }()
	<-entered
	s.t.Cleanup(func() {
		select {
		case <-proceed:
		default:
			close(proceed)
		}
		<-slow
	})
	for i := 1; i <= 3; i++ {
		letTimePass(longPhaseLease) // the phase has now run for i leases
		twin := s.post(h, key, body)
		s.requireProblem(twin, core.ProblemInProgress, "a twin while the phase runs (renewed lease)")
	}
	require.EqualValues(s.t, 1, runs.Load(), "no twin took the key over while the phase ran")
	close(proceed)
	w := <-slow
	slow <- w // for the cleanup
	require.Equal(s.t, http.StatusCreated, w.Code, "the slow request completes (body %s)", w.Body)
	again := s.post(h, key, body)
	require.Equal(s.t, http.StatusCreated, again.Code)
	require.Equal(s.t, "true", again.Header().Get("Idempotent-Replayed"), "a twin after it replays it")
	require.EqualValues(s.t, 1, runs.Load(), "the handler ran once")
}

// logRecords is a slog.Handler that keeps every record, with its attributes flattened.
type logRecords struct {
	mu      sync.Mutex
	records []logRecord
}

type logRecord struct {
	Level slog.Level
	Msg   string
	attrs map[string]any
}

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }

func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{Level: r.Level, Msg: r.Message, attrs: map[string]any{}}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.Any()
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, rec)
	return nil
}

func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecords) WithGroup(string) slog.Handler      { return h }

// take returns the records so far and forgets them.
func (h *logRecords) take() []logRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.records
	h.records = nil
	return r
}

// testNoPhaseAfterLeaseLost: a worker whose lease renewal has found its key taken over
// does not run its next phase's function, whatever the store: that function calls the
// outside world (a payment provider), and the worker that took the key over calls it
// too. The phase returns an error wrapping ErrLeaseLost at once, and the operation
// answers in progress. (A store whose phase commit is fenced would refuse the commit
// anyway, but only after the function ran.)
func testNoPhaseAfterLeaseLost(s *suite) {
	gated := &gatedStore{Store: s.store, entered: make(chan struct{}), gate: make(chan struct{})}
	logs := &signalLogs{match: "taken over by another worker", seen: make(chan struct{})}
	eng, err := core.New(core.Config{Store: gated, Mode: core.ModePhased, Lease: shortLease, Logger: slog.New(logs)})
	require.NoError(s.t, err, "core.New")
	id := s.httpKey("k")

	started, proceed := make(chan struct{}), make(chan struct{})
	var ran atomic.Bool
	phaseErr, doErr := make(chan error, 1), make(chan error, 1)
	go func() {
		_, _, err := eng.Do(s.ctx, scope, id, nil, func(ctx context.Context) ([]byte, error) {
			close(started)
			<-proceed
			err := core.MustOperation(ctx).Phase(ctx, "charge", func(context.Context) error {
				ran.Store(true)
				return nil
			})
			phaseErr <- err
			return nil, err
		})
		doErr <- err
	}()
	<-started
	<-gated.entered // the worker's first renewal waits: its lease runs out

	letTimePass(pastLease)
	result, replayed, err := eng.Do(s.ctx, scope, id, nil, func(context.Context) ([]byte, error) { return []byte("second"), nil })
	require.NoError(s.t, err, "a second worker takes the expired lease over and completes")
	require.False(s.t, replayed)
	require.Equal(s.t, "second", string(result))

	close(gated.gate) // the first worker's renewal goes on and finds the key taken over
	select {
	case <-logs.seen:
	case <-time.After(stallFailSafe):
		require.FailNow(s.t, "the first worker's renewal did not report the key taken over")
	}
	close(proceed)
	require.ErrorIs(s.t, <-phaseErr, storage.ErrLeaseLost, "the phase of a worker that knows it lost its key")
	require.False(s.t, ran.Load(), "the phase's function ran although the worker knew another one had its key")
	require.ErrorIs(s.t, <-doErr, storage.ErrInProgress, "the first worker's Do")
}

// gatedStore holds the first Renew of the first lock it hands out until gate is closed,
// closing entered when that Renew is called.
type gatedStore struct {
	storage.Store
	once          sync.Once
	entered, gate chan struct{}
}

func (g *gatedStore) Claim(ctx context.Context, c storage.Claim) (storage.Claimed, error) {
	claimed, err := g.Store.Claim(ctx, c)
	if claimed.Lock != nil {
		g.once.Do(func() { claimed.Lock = &gatedLock{Lock: claimed.Lock, g: g} })
	}
	return claimed, err
}

type gatedLock struct {
	storage.Lock
	g    *gatedStore
	once sync.Once
}

func (l *gatedLock) Renew(ctx context.Context) error {
	l.once.Do(func() {
		close(l.g.entered)
		<-l.g.gate
	})
	return l.Lock.Renew(ctx)
}

// signalLogs closes seen at the first log record whose message holds match.
type signalLogs struct {
	match string
	once  sync.Once
	seen  chan struct{}
}

func (h *signalLogs) Enabled(context.Context, slog.Level) bool { return true }
func (h *signalLogs) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.match) {
		h.once.Do(func() { close(h.seen) })
	}
	return nil
}
func (h *signalLogs) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *signalLogs) WithGroup(string) slog.Handler      { return h }
