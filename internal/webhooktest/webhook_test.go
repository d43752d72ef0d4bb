package webhooktest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/echoidem"
	"github.com/idemkit/idem/ginidem"
	"github.com/idemkit/idem/internal/adaptertest"
	"github.com/idemkit/idem/internal/storekit"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	goleak.VerifyTestMain(m)
}

// receiver is a webhook endpoint, POST /webhooks/provider, whose handler records the
// event (an order row keyed by the event's key) through the request's transaction and
// answers 200, or 500 while fail is set.
type receiver struct {
	http.Handler
	runs atomic.Int64
	fail atomic.Bool
	// hold, when set, is called by the handler before it answers (to keep it in flight).
	hold func()
}

func (rc *receiver) handle(ctx context.Context, insert func(context.Context, string) (int64, error)) (int, string) {
	rc.runs.Add(1)
	key := core.MustOperation(ctx).Key()
	id, err := insert(ctx, key)
	if err != nil {
		return http.StatusInternalServerError, err.Error()
	}
	if rc.hold != nil {
		rc.hold()
	}
	if rc.fail.Load() {
		return http.StatusInternalServerError, "processing failed"
	}
	return http.StatusOK, fmt.Sprintf(`{"received":%q,"order":%d}`, key, id)
}

// framework builds a receiver on cfg with one of the adapters.
type framework struct {
	name string
	new  func(cfg core.Config, rc *receiver, insert func(context.Context, string) (int64, error)) http.Handler
}

func providerScope() string { return "provider" }

var frameworks = []framework{
	{"net/http", func(cfg core.Config, rc *receiver, insert func(context.Context, string) (int64, error)) http.Handler {
		eng, err := core.New(cfg)
		if err != nil {
			panic(err)
		}
		mux := http.NewServeMux()
		mux.Handle("POST /webhooks/provider", eng.Middleware(func(*http.Request) string { return providerScope() })(
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				status, body := rc.handle(r.Context(), insert)
				w.WriteHeader(status)
				_, _ = io.WriteString(w, body)
			})))
		return mux
	}},
	{"gin", func(cfg core.Config, rc *receiver, insert func(context.Context, string) (int64, error)) http.Handler {
		r := gin.New()
		r.Use(gin.RecoveryWithWriter(io.Discard))
		r.POST("/webhooks/provider", ginidem.New(adaptertest.Engine(cfg), ginidem.Config{
			Scope: func(*gin.Context) string { return providerScope() },
		}), func(c *gin.Context) {
			status, body := rc.handle(c.Request.Context(), insert)
			c.String(status, body)
		})
		return r
	}},
	{"echo", func(cfg core.Config, rc *receiver, insert func(context.Context, string) (int64, error)) http.Handler {
		e := echo.New()
		e.Use(middleware.Recover())
		e.POST("/webhooks/provider", func(c echo.Context) error {
			status, body := rc.handle(c.Request().Context(), insert)
			return c.String(status, body)
		}, echoidem.New(adaptertest.Engine(cfg), echoidem.Config{
			Scope: func(echo.Context) string { return providerScope() },
		}))
		return e
	}},
}

// source is where the provider puts the event's key.
type source struct {
	name string
	key  core.KeySource
	// deliver builds a delivery of the event id with body (which, for the JSON source,
	// carries the id itself).
	deliver func(id, extra string) *http.Request
}

var sources = []source{
	{"delivery header", core.KeyFromHeader("X-GitHub-Delivery"), func(id, extra string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/webhooks/provider", strings.NewReader(`{"action":"opened","extra":"`+extra+`"}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("X-GitHub-Delivery", id)
		return r
	}},
	{"JSON id", core.KeyFromJSON("id"), func(id, extra string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/webhooks/provider", strings.NewReader(`{"id":"`+id+`","type":"charge.succeeded","extra":"`+extra+`"}`))
		r.Header.Set("Content-Type", "application/json")
		return r
	}},
}

func send(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// forEach runs test for every framework and key source.
func forEach(t *testing.T, test func(t *testing.T, fw framework, src source)) {
	for _, fw := range frameworks {
		for _, src := range sources {
			t.Run(fw.name+"/"+src.name, func(t *testing.T) {
				t.Parallel()
				test(t, fw, src)
			})
		}
	}
}

// TestRedeliveriesOnRealStores: on every store, a completed event's redelivery gets the
// recorded 2xx and adds no row; an event answered 500 is processed by its redelivery,
// once; 20 parallel deliveries of one event record one row; a redelivery with another
// body is 422.
func TestRedeliveriesOnRealStores(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, fw framework, src source) {
		for _, be := range storekit.Backends {
			t.Run(be.Name, func(t *testing.T) {
				b := be.Open(t)
				rc := &receiver{}
				h := fw.new(core.Config{Store: b.Store, Key: src.key}, rc, b.Insert)

				first := send(h, src.deliver("evt_1", ""))
				require.Equal(t, http.StatusOK, first.Code, first.Body.String())
				again := send(h, src.deliver("evt_1", ""))
				assert.Equal(t, http.StatusOK, again.Code)
				assert.Equal(t, "true", again.Header().Get("Idempotent-Replayed"))
				assert.Equal(t, first.Body.String(), again.Body.String())
				assert.Equal(t, 1, b.Orders(t, "evt_1"))

				rc.fail.Store(true)
				assert.Equal(t, http.StatusInternalServerError, send(h, src.deliver("evt_2", "")).Code)
				assert.Equal(t, 0, b.Orders(t, "evt_2"), "a 500 rolls the handler's row back")
				rc.fail.Store(false)
				assert.Equal(t, http.StatusOK, send(h, src.deliver("evt_2", "")).Code)
				assert.Equal(t, "true", send(h, src.deliver("evt_2", "")).Header().Get("Idempotent-Replayed"))
				assert.Equal(t, 1, b.Orders(t, "evt_2"), "the redelivery after the 500 processed once")

				var wg sync.WaitGroup
				codes := make(chan int, 20)
				for range 20 {
					wg.Go(func() { codes <- send(h, src.deliver("evt_3", "")).Code })
				}
				wg.Wait()
				close(codes)
				for code := range codes {
					assert.Contains(t, []int{http.StatusOK, http.StatusConflict}, code)
				}
				assert.Equal(t, 1, b.Orders(t, "evt_3"), "20 parallel deliveries, one row")

				reused := send(h, src.deliver("evt_1", "tampered"))
				assert.Equal(t, http.StatusUnprocessableEntity, reused.Code, reused.Body.String())
				assert.Equal(t, 1, b.Orders(t, "evt_1"))
			})
		}
	})
}

// TestInFlightRedeliveryIs409: a redelivery while the first delivery is being processed
// gets 409 with Retry-After (the provider retries later), then the recorded answer.
func TestInFlightRedeliveryIs409(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, fw framework, src source) {
		entered, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		rc := &receiver{hold: func() { once.Do(func() { close(entered); <-release }) }}
		var orders atomic.Int64
		insert := func(context.Context, string) (int64, error) { return orders.Add(1), nil }
		h := fw.new(core.Config{Store: memstore.New(), Key: src.key}, rc, insert)

		first := make(chan *httptest.ResponseRecorder, 1)
		go func() { first <- send(h, src.deliver("evt_1", "")) }()
		<-entered
		w := send(h, src.deliver("evt_1", ""))
		assert.Equal(t, http.StatusConflict, w.Code, w.Body.String())
		assert.Equal(t, "1", w.Header().Get("Retry-After"))
		assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
		close(release)
		assert.Equal(t, http.StatusOK, (<-first).Code)
		assert.Equal(t, "true", send(h, src.deliver("evt_1", "")).Header().Get("Idempotent-Replayed"))
		assert.Equal(t, int64(1), rc.runs.Load())
	})
}

// TestMissingOrMalformedKeyIs400: every adapter answers the engine's 400 problems.
func TestMissingOrMalformedKeyIs400(t *testing.T) {
	t.Parallel()
	for _, fw := range frameworks {
		t.Run(fw.name, func(t *testing.T) {
			t.Parallel()
			rc := &receiver{}
			insert := func(context.Context, string) (int64, error) { return 1, nil }
			header := fw.new(core.Config{Store: memstore.New(), Key: core.KeyFromHeader("X-GitHub-Delivery")}, rc, insert)
			body := fw.new(core.Config{Store: memstore.New(), Key: core.KeyFromJSON("id")}, rc, insert)

			r := httptest.NewRequest(http.MethodPost, "/webhooks/provider", strings.NewReader(`{}`))
			assert.Contains(t, send(header, r).Body.String(), "#key-missing")
			r = httptest.NewRequest(http.MethodPost, "/webhooks/provider", strings.NewReader(`{}`))
			r.Header.Set("X-GitHub-Delivery", strings.Repeat("x", 256))
			assert.Contains(t, send(header, r).Body.String(), "#key-invalid")
			w := send(body, httptest.NewRequest(http.MethodPost, "/webhooks/provider", strings.NewReader(`{"type":"x"}`)))
			assert.Equal(t, http.StatusBadRequest, w.Code)
			assert.Contains(t, w.Body.String(), "#key-missing")
			w = send(body, httptest.NewRequest(http.MethodPost, "/webhooks/provider", strings.NewReader(`{"id":true}`)))
			assert.Equal(t, http.StatusBadRequest, w.Code)
			assert.Contains(t, w.Body.String(), "#key-invalid")
			assert.Zero(t, rc.runs.Load())
		})
	}
}
