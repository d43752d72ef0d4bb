package echoidem_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/echoidem"
)

// body200 is a 200-byte JSON request body; response200 a 200-byte JSON response.
var (
	body200     = `{"item":"` + strings.Repeat("b", 172) + `","quantity":2}`
	response200 = []byte(`{"id":"ord_1","item":"` + strings.Repeat("b", 160) + `","quantity":2,"x":true}`)
	benchKeys   atomic.Int64
)

func benchHandler(c echo.Context) error {
	c.Response().Header().Set("Location", "/v1/orders/1")
	return c.Blob(http.StatusCreated, "application/json", response200)
}

// discard is a minimal ResponseWriter, so the benchmark measures the middleware and not
// httptest.ResponseRecorder.
type discard struct {
	h    http.Header
	code int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(code int)        { d.code = code }

type body struct{ *strings.Reader }

func (body) Close() error { return nil }

func BenchmarkEcho(b *testing.B) {
	bare := echo.New()
	bare.POST("/v1/orders", benchHandler)
	idem := echo.New()
	idem.POST("/v1/orders", benchHandler, echoidem.NewWithConfig(echoidem.Config{
		Scope:  func(echo.Context) string { return "acct" },
		Config: core.Config{Store: memstore.New()},
	}))

	run := func(b *testing.B, h http.Handler, key func(i int) string, want int, replayed string) {
		b.ReportAllocs()
		r := httptest.NewRequest(http.MethodPost, "/v1/orders", nil)
		r.Header.Set("Content-Type", "application/json")
		w := &discard{h: make(http.Header)}
		rd := strings.NewReader(body200)
		serve := func(i int) {
			rd.Reset(body200)
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
		if w.code != want || w.h.Get("Idempotent-Replayed") != replayed || w.h.Get("Location") == "" {
			b.Fatalf("last answer %d replayed=%q Location=%q, want %d replayed=%q", w.code,
				w.h.Get("Idempotent-Replayed"), w.h.Get("Location"), want, replayed)
		}
	}
	b.Run("bare", func(b *testing.B) { run(b, bare, func(int) string { return "k" }, 201, "") })
	b.Run("first", func(b *testing.B) {
		keys := make([]string, b.N+1) // unique across runs: every iteration is a first request
		for i := range keys {
			keys[i] = "first-" + strconv.FormatInt(benchKeys.Add(1), 10)
		}
		run(b, idem, func(i int) string { return keys[i+1] }, 201, "")
	})
	b.Run("replay", func(b *testing.B) { run(b, idem, func(int) string { return "replayed" }, 201, "true") })
}
