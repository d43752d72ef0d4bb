package core_test

import (
	"bytes"
	"context"
	"errors"
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
)

// body200 is a 200-byte JSON request body.
var body200 = `{"item":"` + strings.Repeat("b", 172) + `","quantity":2}`

var response200 = []byte(`{"id":"ord_1","item":"` + strings.Repeat("b", 160) + `","quantity":2,"x":true}`)

func benchHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Location", "/v1/orders/1")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(response200)
}

// discard is a minimal ResponseWriter, so the benchmark measures the middleware and not
// httptest.ResponseRecorder.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkMiddleware measures the engine's own cost per request: bare is the handler
// alone, first a request with a new key, replay a retry of a completed one. The store is
// benchStore, so the figures depend on the engine and not on a store's tuning. The
// -hooked rows set Hooks to a no-op: what observing costs the engine (the clock reads and
// the events), less a metrics package's own work.
func BenchmarkMiddleware(b *testing.B) {
	engine := func(s *benchStore, hooks core.Hooks) http.Handler {
		eng, err := core.New(core.Config{Store: s, Hooks: hooks})
		require.NoError(b, err)
		return eng.Middleware(func(*http.Request) string { return "acct" })(http.HandlerFunc(benchHandler))
	}
	run := func(b *testing.B, h http.Handler, key func(i int) string) http.Header {
		b.ReportAllocs()
		r := httptest.NewRequest("POST", "/v1/orders", nil)
		r.Header.Set("Content-Type", benchContentType)
		w := &discard{h: make(http.Header)}
		rd := strings.NewReader(body200)
		body := nopCloser{rd}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			rd.Reset(body200)
			r.Body = body
			r.Header["Idempotency-Key"] = []string{key(i)}
			clear(w.h)
			h.ServeHTTP(w, r)
		}
		return w.h
	}
	b.Run("bare", func(b *testing.B) { run(b, http.HandlerFunc(benchHandler), func(int) string { return "k" }) })
	noop := core.HookFunc(func(context.Context, core.Event) {})
	for _, v := range []struct {
		suffix string
		hooks  core.Hooks
	}{{"", nil}, {"-hooked", noop}} {
		first := engine(&benchStore{keys: make(map[benchKey]*storage.Record), forget: true}, v.hooks)
		b.Run("first"+v.suffix, func(b *testing.B) {
			keys := make([]string, b.N) // unique across runs: every iteration is a first request
			for i := range keys {
				keys[i] = "first-" + strconv.FormatInt(benchKeySeq.Add(1), 10)
			}
			h := run(b, first, func(i int) string { return keys[i] })
			require.Equal(b, "/v1/orders/1", h.Get("Location"), "the handler's response")
			require.Empty(b, h.Get("Idempotent-Replayed"), "a first request is not a replay")
		})
		replay := engine(&benchStore{keys: make(map[benchKey]*storage.Record)}, v.hooks)
		b.Run("replay"+v.suffix, func(b *testing.B) {
			h := run(b, replay, func(int) string { return "replayed" })
			require.Equal(b, "/v1/orders/1", h.Get("Location"), "the stored response")
			if b.N > 1 {
				require.Equal(b, "true", h.Get("Idempotent-Replayed"), "a retry is replayed")
			}
		})
	}
}

type nopCloser struct{ *strings.Reader }

func (nopCloser) Close() error { return nil }

var (
	benchContentType = "application/json"
	benchKeySeq      atomic.Int64
)

func init() {
	if ct := os.Getenv("IDEM_BENCH_CT"); ct != "" {
		benchContentType = ct
	}
}

// benchStore is the least store the engine's benchmarks can run on: one map behind one
// mutex, phased mode only, a claim that either takes a key or returns what is stored, a
// Complete that copies the response. No leases, takeovers, fencing or retention: the
// benchmarks never need them, and nothing else may use it.
//
// With forget, Complete copies the response and then drops the key instead of keeping
// it. The first-request benchmark never reads a completed key back, and a store growing
// by one key per iteration would add the garbage collector's work on the store's heap,
// which grows with b.N, to what is meant to be the engine's cost per request.
type benchStore struct {
	mu     sync.Mutex
	keys   map[benchKey]*storage.Record
	forget bool
}

type benchKey struct{ scope, key string }

func (s *benchStore) SupportsAtomic() bool     { return false }
func (s *benchStore) Retention() time.Duration { return 24 * time.Hour }

func (s *benchStore) DeleteExpired(context.Context, time.Time, int) (int, error) { return 0, nil }

func (s *benchStore) Lookup(_ context.Context, scope, key string) (*storage.Record, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec := s.keys[benchKey{scope, key}]; rec != nil {
		return rec, time.Now(), nil
	}
	return nil, time.Now(), storage.ErrNotFound
}

func (s *benchStore) Claim(_ context.Context, c storage.Claim) (storage.Claimed, error) {
	if c.Mode != storage.ModePhased {
		return storage.Claimed{}, storage.ErrUnsupportedMode
	}
	k := benchKey{c.Scope, c.Key}
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec := s.keys[k]; rec != nil {
		return storage.Claimed{Verdict: storage.Decide(rec, c, time.Time{}), Record: rec}, nil
	}
	rec := &storage.Record{Scope: c.Scope, Key: c.Key, Fingerprint: bytes.Clone(c.Fingerprint), State: storage.StateStarted}
	s.keys[k] = rec
	return storage.Claimed{Verdict: storage.VerdictAbsent, Lock: &benchLock{s: s, k: k, rec: rec}}, nil
}

// benchLock holds a started key of a benchStore.
type benchLock struct {
	s   *benchStore
	k   benchKey
	rec *storage.Record
}

func (l *benchLock) Context(ctx context.Context) context.Context { return ctx }
func (l *benchLock) RecoveryPoint() string                       { return storage.RecoveryStarted }
func (l *benchLock) Resumed() bool                               { return false }
func (l *benchLock) Renew(context.Context) error                 { return nil }

func (l *benchLock) Phase(ctx context.Context, _ string, fn func(context.Context) error) error {
	return fn(ctx)
}

// Complete replaces the started record with the completed one, which replays share.
func (l *benchLock) Complete(_ context.Context, r *storage.Response) error {
	if r == nil {
		return errors.New("benchStore: nil response")
	}
	done := &struct {
		rec  storage.Record
		resp storage.Response
	}{rec: *l.rec, resp: storage.Response{Status: r.Status, Header: r.Header.Clone(), Body: bytes.Clone(r.Body)}}
	done.rec.State, done.rec.Response = storage.StateCompleted, &done.resp
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if l.s.forget {
		delete(l.s.keys, l.k)
		return nil
	}
	l.s.keys[l.k] = &done.rec
	return nil
}

func (l *benchLock) Release(context.Context) error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if l.s.keys[l.k] == l.rec {
		delete(l.s.keys, l.k)
	}
	return nil
}
