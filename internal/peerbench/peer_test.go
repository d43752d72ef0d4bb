package peerbench_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/idempotency"
	"github.com/labstack/echo/v4"
	"github.com/valyala/fasthttp"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/echoidem"
	"github.com/idemkit/idem/ginidem"
	"github.com/idemkit/idem/internal/adaptertest"
)

// requestBody is a ~230-byte nested JSON order; responseBody the ~180-byte JSON answer.
var (
	requestBody = []byte(`{"customer":{"id":"cus_8e03978e","email":"ada@example.com","address":{"city":"London","zip":"N1 9GU"}},` +
		`"items":[{"sku":"book-1","quantity":2,"price_cents":1299},{"sku":"pen-7","quantity":1,"price_cents":250}],"currency":"GBP"}`)
	responseBody = []byte(`{"id":"ord_1f2e3d4c","status":"created","total_cents":2848,"currency":"GBP",` +
		`"customer_id":"cus_8e03978e","items":2,"created_at":"2026-12-01T20:00:00Z","self":"/v1/orders/ord_1f"}`)
	keySeq atomic.Int64
)

const location = "/v1/orders/ord_1f2e3d4c"

// uuidKey returns a fresh 36-character key (fiber's default validator wants a UUID's length).
func uuidKey() string {
	return fmt.Sprintf("8e03978e-40d5-43e8-bc93-%012d", keySeq.Add(1))
}

func TestWorkload(t *testing.T) {
	t.Parallel()
	if n := len(requestBody); n < 220 || n > 240 {
		t.Errorf("request body is %d bytes, want ~230", n)
	}
	if n := len(responseBody); n < 170 || n > 190 {
		t.Errorf("response body is %d bytes, want ~180", n)
	}
}

// TestStacksAnswerAlike: every stack answers the first request 201 with Location and the
// body, and the replay likewise, marked as a replay (so the benchmark compares like with
// like).
func TestStacksAnswerAlike(t *testing.T) {
	t.Parallel()
	for _, s := range stacks() {
		key := uuidKey()
		first, firstHdr := s.serve(key)
		replay, replayHdr := s.serve(key)
		for i, got := range []struct {
			status int
			loc    string
		}{{first, firstHdr}, {replay, replayHdr}} {
			if got.status != http.StatusCreated || got.loc != location {
				t.Errorf("%s answer %d: %d Location %q, want 201 %s", s.name, i+1, got.status, got.loc, location)
			}
		}
	}
}

// stack is one framework with and without its idempotency middleware. serve sends the
// workload's request with key to the middleware's app ("" to the bare one) and reports
// the status and Location.
type stack struct {
	name  string
	serve func(key string) (int, string)
}

func stacks() []stack {
	return []stack{fiberStack(), idemStack("idem-nethttp", netHTTPApp()), idemStack("idem-gin", ginApp()), idemStack("idem-echo", echoApp())}
}

func BenchmarkPeers(b *testing.B) {
	for _, s := range stacks() {
		b.Run(s.name, func(b *testing.B) {
			b.Run("bare", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					s.serve("")
				}
			})
			b.Run("first", func(b *testing.B) {
				keys := make([]string, b.N) // every iteration a key never seen before
				for i := range keys {
					keys[i] = uuidKey()
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					s.serve(keys[i])
				}
			})
			b.Run("replay", func(b *testing.B) {
				k := uuidKey()
				if status, _ := s.serve(k); status != http.StatusCreated {
					b.Fatalf("%s: first request %d", s.name, status)
				}
				b.ReportAllocs()
				for b.Loop() {
					s.serve(k)
				}
			})
		})
	}
}

// fiberStack drives fiber's handler directly with a reused fasthttp.RequestCtx, as
// fiber's own benchmarks do.
func fiberStack() stack {
	handler := func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderLocation, location)
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Status(http.StatusCreated).Send(responseBody)
	}
	bare := fiber.New()
	bare.Post("/v1/orders", handler)
	idem := fiber.New()
	idem.Use(idempotency.New(idempotency.Config{KeyHeader: "Idempotency-Key", Lifetime: 24 * time.Hour,
		KeepResponseHeaders: []string{fiber.HeaderLocation, fiber.HeaderContentType}}))
	idem.Post("/v1/orders", handler)
	bareH, idemH := bare.Handler(), idem.Handler()
	var ctx fasthttp.RequestCtx
	return stack{name: "fiber", serve: func(key string) (int, string) {
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.Header.SetMethod(fiber.MethodPost)
		ctx.Request.SetRequestURI("/v1/orders")
		ctx.Request.Header.SetContentType(fiber.MIMEApplicationJSON)
		ctx.Request.SetBody(requestBody)
		h := bareH
		if key != "" {
			ctx.Request.Header.Set("Idempotency-Key", key)
			h = idemH
		}
		h(&ctx)
		return ctx.Response.StatusCode(), string(ctx.Response.Header.Peek(fiber.HeaderLocation))
	}}
}

// app is one net/http-shaped framework with and without idem.
type app struct{ bare, idem http.Handler }

func writeOrder(w http.ResponseWriter) {
	w.Header().Set("Location", location)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(responseBody)
}

func scope(*http.Request) string { return "acct" }

func netHTTPApp() app {
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { writeOrder(w) })
	mux := func(h http.Handler) http.Handler {
		m := http.NewServeMux()
		m.Handle("POST /v1/orders", h)
		return m
	}
	eng, err := core.New(core.Config{Store: memstore.New()})
	if err != nil {
		panic(err)
	}
	return app{bare: mux(h), idem: mux(eng.Middleware(scope)(h))}
}

func ginApp() app {
	gin.SetMode(gin.ReleaseMode)
	h := func(c *gin.Context) {
		c.Header("Location", location)
		c.Data(http.StatusCreated, "application/json", responseBody)
	}
	bare := gin.New()
	bare.POST("/v1/orders", h)
	idem := gin.New()
	idem.POST("/v1/orders", ginidem.New(adaptertest.Engine(core.Config{Store: memstore.New()}), ginidem.Config{
		Scope: func(*gin.Context) string { return "acct" },
	}), h)
	return app{bare: bare, idem: idem}
}

func echoApp() app {
	h := func(c echo.Context) error {
		c.Response().Header().Set("Location", location)
		return c.Blob(http.StatusCreated, "application/json", responseBody)
	}
	bare := echo.New()
	bare.POST("/v1/orders", h)
	idem := echo.New()
	idem.POST("/v1/orders", h, echoidem.New(adaptertest.Engine(core.Config{Store: memstore.New()}), echoidem.Config{Scope: func(echo.Context) string { return "acct" }}))
	return app{bare: bare, idem: idem}
}

// idemStack serves a with a reused request and a minimal ResponseWriter, so the
// benchmark measures the framework and the middleware, not httptest.
func idemStack(name string, a app) stack {
	r, _ := http.NewRequest(http.MethodPost, "/v1/orders", nil)
	r.Header.Set("Content-Type", "application/json")
	body := string(requestBody)
	rd := strings.NewReader(body)
	w := &discard{h: make(http.Header)}
	keyField := make([]string, 1) // reused, so the harness allocates nothing per request
	return stack{name: name, serve: func(key string) (int, string) {
		rd.Reset(body)
		r.Body = readCloser{rd}
		r.ContentLength = int64(len(requestBody))
		h := a.bare
		if key != "" {
			keyField[0] = key
			r.Header["Idempotency-Key"] = keyField
			h = a.idem
		} else {
			delete(r.Header, "Idempotency-Key")
		}
		clear(w.h)
		w.code = 0
		h.ServeHTTP(w, r)
		return w.code, w.h.Get("Location")
	}}
}

type readCloser struct{ *strings.Reader }

func (readCloser) Close() error { return nil }

type discard struct {
	h    http.Header
	code int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(code int)        { d.code = code }
