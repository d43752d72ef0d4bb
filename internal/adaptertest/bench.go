package adaptertest

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// BenchBody is the benchmarks' 200-byte JSON request body; BenchResponse the 200-byte
// JSON body their handlers answer 201 with, beside Location: /v1/orders/1.
var (
	BenchBody     = `{"item":"` + strings.Repeat("b", 172) + `","quantity":2}`
	BenchResponse = []byte(`{"id":"ord_1","item":"` + strings.Repeat("b", 160) + `","quantity":2,"x":true}`)
	benchKeys     atomic.Int64
)

// Bench measures POST /v1/orders on three sub-benchmarks: bare (the handler with no
// middleware), first (every iteration a new key) and replay (one key, replayed). bare
// and idem must serve that route with a handler answering BenchResponse.
func Bench(b *testing.B, bare, idem http.Handler) {
	b.Run("bare", func(b *testing.B) { benchRun(b, bare, func(int) string { return "k" }, "") })
	b.Run("first", func(b *testing.B) {
		keys := make([]string, b.N+1) // unique across runs: every iteration is a first request
		for i := range keys {
			keys[i] = "first-" + strconv.FormatInt(benchKeys.Add(1), 10)
		}
		benchRun(b, idem, func(i int) string { return keys[i+1] }, "")
	})
	b.Run("replay", func(b *testing.B) { benchRun(b, idem, func(int) string { return "replayed" }, "true") })
}

func benchRun(b *testing.B, h http.Handler, key func(i int) string, replayed string) {
	b.ReportAllocs()
	r := httptest.NewRequest(http.MethodPost, "/v1/orders", nil)
	r.Header.Set("Content-Type", "application/json")
	w := &discard{h: make(http.Header)}
	rd := strings.NewReader(BenchBody)
	serve := func(i int) {
		rd.Reset(BenchBody)
		r.Body = body{rd}
		r.Header["Idempotency-Key"] = []string{key(i)}
		clear(w.h)
		w.code = 0
		h.ServeHTTP(w, r)
	}
	serve(-1) // the replay's original (a key of its own for the others)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		serve(i)
	}
	b.StopTimer()
	if w.code != http.StatusCreated || w.h.Get("Idempotent-Replayed") != replayed || w.h.Get("Location") == "" {
		b.Fatalf("last answer %d replayed=%q Location=%q, want 201 replayed=%q", w.code,
			w.h.Get("Idempotent-Replayed"), w.h.Get("Location"), replayed)
	}
}

type body struct{ *strings.Reader }

func (body) Close() error { return nil }

// discard is a minimal ResponseWriter, so the benchmark measures the middleware and not
// httptest.ResponseRecorder.
type discard struct {
	h    http.Header
	code int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(code int)        { d.code = code }
