package core_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
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

func BenchmarkMiddleware(b *testing.B) {
	eng, err := core.New(core.Config{Store: memstore.New()})
	if err != nil {
		b.Fatal(err)
	}
	idem := eng.Middleware(func(*http.Request) string { return "acct" })(http.HandlerFunc(benchHandler))
	bare := http.HandlerFunc(benchHandler)
	run := func(b *testing.B, h http.Handler, key func(i int) string) {
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
	}
	b.Run("bare", func(b *testing.B) { run(b, bare, func(int) string { return "k" }) })
	b.Run("first", func(b *testing.B) {
		keys := make([]string, b.N) // unique across runs: every iteration is a first request
		for i := range keys {
			keys[i] = "first-" + strconv.FormatInt(benchKeySeq.Add(1), 10)
		}
		run(b, idem, func(i int) string { return keys[i] })
	})
	b.Run("replay", func(b *testing.B) { run(b, idem, func(int) string { return "replayed" }) })
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
