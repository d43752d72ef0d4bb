package core_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/internal/syncbuf"
)

// webhook is a receiver behind Engine.Middleware whose key comes from ks, counting runs and
// keeping the body each run saw.
type webhook struct {
	handler http.Handler
	runs    atomic.Int64
	bodies  chan string
	logs    *syncbuf.Buffer
}

func newWebhook(t *testing.T, cfg core.Config, h http.HandlerFunc) *webhook {
	t.Helper()
	wh := &webhook{bodies: make(chan string, 64), logs: &syncbuf.Buffer{}}
	if cfg.Store == nil {
		cfg.Store = memstore.New()
	}
	cfg.Logger = slog.New(slog.NewTextHandler(wh.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	eng, err := core.New(cfg)
	require.NoError(t, err)
	wh.handler = eng.Middleware(func(*http.Request) string { return "github" })(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := wh.runs.Add(1)
		b, _ := io.ReadAll(r.Body)
		wh.bodies <- string(b)
		if h != nil {
			h(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"received":`+strconv.FormatInt(n, 10)+`}`)
	}))
	return wh
}

func (wh *webhook) deliver(body string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/webhooks/provider", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	wh.handler.ServeHTTP(w, r)
	return w
}

const event = `{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","amount":2000}}}`

func TestKeyFromHeaderReplaysARedelivery(t *testing.T) {
	t.Parallel()
	wh := newWebhook(t, core.Config{Key: core.KeyFromHeader("X-GitHub-Delivery")}, nil)
	const delivery = "72d3162e-cc78-11e3-81ab-4c9367dc0958"

	first := wh.deliver(event, "X-GitHub-Delivery", delivery)
	require.Equal(t, http.StatusOK, first.Code, first.Body.String())
	again := wh.deliver(event, "X-GitHub-Delivery", delivery, "Idempotency-Key", "ignored")
	assert.Equal(t, http.StatusOK, again.Code)
	assert.Equal(t, first.Body.String(), again.Body.String(), "the redelivery gets the recorded answer")
	assert.Equal(t, "true", again.Header().Get("Idempotent-Replayed"))
	assert.Equal(t, int64(1), wh.runs.Load(), "the event is applied once")

	other := wh.deliver(event, "X-GitHub-Delivery", "another-delivery")
	assert.Equal(t, http.StatusOK, other.Code)
	assert.Empty(t, other.Header().Get("Idempotent-Replayed"))
	assert.Equal(t, int64(2), wh.runs.Load())
}

func TestKeyFromHeaderTakesTheValueAsItIs(t *testing.T) {
	t.Parallel()
	wh := newWebhook(t, core.Config{Key: core.KeyFromHeader("X-Delivery")}, nil)
	// A quoted value is not an sf-string here: the quotes are part of the key.
	require.Equal(t, http.StatusOK, wh.deliver(event, "X-Delivery", `"d1"`).Code)
	assert.Empty(t, wh.deliver(event, "X-Delivery", `d1`).Header().Get("Idempotent-Replayed"))
	assert.Equal(t, "true", wh.deliver(event, "X-Delivery", ` "d1"	`).Header().Get("Idempotent-Replayed"))
	assert.Equal(t, int64(2), wh.runs.Load())
}

func TestKeyFromHeaderMissingOrMalformed(t *testing.T) {
	t.Parallel()
	wh := newWebhook(t, core.Config{Key: core.KeyFromHeader("X-GitHub-Delivery")}, nil)
	w := wh.deliver(event, "Idempotency-Key", "k1")
	assertProblem(t, w, http.StatusBadRequest, core.ProblemKeyMissing)
	assert.Contains(t, w.Body.String(), "requires an X-GitHub-Delivery header")
	for name, hdr := range map[string][]string{
		"empty":         {"X-GitHub-Delivery", "  "},
		"too long":      {"X-GitHub-Delivery", strings.Repeat("x", 256)},
		"not printable": {"X-GitHub-Delivery", "d\x01"},
		"not ASCII":     {"X-GitHub-Delivery", "délivery"},
		"two fields":    {"X-GitHub-Delivery", "a", "X-GitHub-Delivery", "b"},
	} {
		t.Run(name, func(t *testing.T) {
			w := wh.deliver(event, hdr...)
			assertProblem(t, w, http.StatusBadRequest, core.ProblemKeyInvalid)
			assert.Contains(t, w.Body.String(), "X-GitHub-Delivery header is malformed")
		})
	}
	assert.Zero(t, wh.runs.Load())
}

// readTracker is a request body that records whether anyone read it.
type readTracker struct {
	io.Reader
	read atomic.Bool
}

func (b *readTracker) Read(p []byte) (int, error) { b.read.Store(true); return b.Reader.Read(p) }
func (b *readTracker) Close() error               { return nil }

func TestHeaderKeysAreFoundWithoutReadingTheBody(t *testing.T) {
	t.Parallel()
	for name, ks := range map[string]core.KeySource{"Idempotency-Key": {}, "KeyFromHeader": core.KeyFromHeader("X-Delivery")} {
		t.Run(name, func(t *testing.T) {
			wh := newWebhook(t, core.Config{Key: ks}, nil)
			body := &readTracker{Reader: strings.NewReader(event)}
			r := httptest.NewRequest(http.MethodPost, "/webhooks/provider", body)
			w := httptest.NewRecorder()
			wh.handler.ServeHTTP(w, r)
			assertProblem(t, w, http.StatusBadRequest, core.ProblemKeyMissing)
			assert.False(t, body.read.Load(), "the body was read to find a header key")
		})
	}
}

func TestKeyFromJSONReplaysARedelivery(t *testing.T) {
	t.Parallel()
	wh := newWebhook(t, core.Config{Key: core.KeyFromJSON("id")}, nil)
	first := wh.deliver(event)
	require.Equal(t, http.StatusOK, first.Code, first.Body.String())
	assert.Equal(t, event, <-wh.bodies, "the handler reads the body the engine read")

	// The same event, its members in another order and spaced out: same key, same fingerprint.
	again := wh.deliver(`{ "type": "payment_intent.succeeded", "data": {"object": {"amount": 2000, "id": "pi_1"}}, "id": "evt_1" }`)
	assert.Equal(t, http.StatusOK, again.Code)
	assert.Equal(t, "true", again.Header().Get("Idempotent-Replayed"))
	assert.Equal(t, first.Body.String(), again.Body.String())
	assert.Equal(t, int64(1), wh.runs.Load())
}

func TestKeyFromJSONReadsNestedMembersStringsAndNumbers(t *testing.T) {
	t.Parallel()
	wh := newWebhook(t, core.Config{Key: core.KeyFromJSON("data", "object", "id")}, nil)
	require.Equal(t, http.StatusOK, wh.deliver(event).Code)
	replay := wh.deliver(`{"id":"evt_2","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","amount":2000}}}`)
	assertProblem(t, replay, http.StatusUnprocessableEntity, core.ProblemKeyReused) // pi_1 again, another body

	num := newWebhook(t, core.Config{Key: core.KeyFromJSON("event_id")}, nil)
	require.Equal(t, http.StatusOK, num.deliver(`{"event_id":1234567890123,"x":1}`).Code)
	assert.Equal(t, "true", num.deliver(`{"x":1,"event_id":1234567890123}`).Header().Get("Idempotent-Replayed"))
	assert.Equal(t, int64(1), num.runs.Load())
}

func TestKeyFromJSONMissingOrMalformed(t *testing.T) {
	t.Parallel()
	wh := newWebhook(t, core.Config{Key: core.KeyFromJSON("data", "id")}, nil)
	for name, body := range map[string]string{
		"empty body":     ``,
		"no member":      `{"data":{"name":"x"}}`,
		"no parent":      `{"id":"evt_1"}`,
		"null member":    `{"data":{"id":null}}`,
		"null parent":    `{"data":null}`,
		"spaces only":    " \n",
		"member missing": `{}`,
	} {
		t.Run("missing/"+name, func(t *testing.T) {
			w := wh.deliver(body)
			assertProblem(t, w, http.StatusBadRequest, core.ProblemKeyMissing)
			assert.Contains(t, w.Body.String(), `requires a JSON body with the member \"data.id\"`)
		})
	}
	for name, body := range map[string]string{
		"not JSON":          `id=evt_1`,
		"broken JSON":       `{"data":{"id":"evt_1"}`,
		"array body":        `[{"data":{"id":"evt_1"}}]`,
		"parent not object": `{"data":"evt_1"}`,
		"boolean":           `{"data":{"id":true}}`,
		"object":            `{"data":{"id":{"v":1}}}`,
		"array":             `{"data":{"id":["evt_1"]}}`,
		"empty string":      `{"data":{"id":""}}`,
		"too long":          `{"data":{"id":"` + strings.Repeat("x", 256) + `"}}`,
		"not ASCII":         `{"data":{"id":"évt"}}`,
		"control character": `{"data":{"id":"a\u0001"}}`,
	} {
		t.Run("invalid/"+name, func(t *testing.T) {
			w := wh.deliver(body)
			assertProblem(t, w, http.StatusBadRequest, core.ProblemKeyInvalid)
			assert.Contains(t, w.Body.String(), `JSON member \"data.id\" is malformed`)
		})
	}
	assert.Zero(t, wh.runs.Load())
}

func TestKeyFromJSONRespectsTheBodyLimit(t *testing.T) {
	t.Parallel()
	wh := newWebhook(t, core.Config{Key: core.KeyFromJSON("id"), MaxRequestBody: 64}, nil)
	w := wh.deliver(`{"id":"evt_1","pad":"` + strings.Repeat("x", 64) + `"}`)
	assertProblem(t, w, http.StatusRequestEntityTooLarge, core.ProblemBodyTooLarge)
	assert.Zero(t, wh.runs.Load())
}

func TestKeyFromJSONOptionalKeyPassesTheBodyThrough(t *testing.T) {
	t.Parallel()
	wh := newWebhook(t, core.Config{Key: core.KeyFromJSON("id"), KeyOptional: true}, nil)
	const ping = `{"zen":"Keep it logically awesome."}`
	for range 2 {
		require.Equal(t, http.StatusOK, wh.deliver(ping).Code)
		assert.Equal(t, ping, <-wh.bodies, "an unkeyed request still gets its whole body")
	}
	assert.Equal(t, int64(2), wh.runs.Load())
}

func TestRedeliveryWithAnotherBodyIs422AndLogged(t *testing.T) {
	t.Parallel()
	wh := newWebhook(t, core.Config{Key: core.KeyFromHeader("X-GitHub-Delivery")}, nil)
	require.Equal(t, http.StatusOK, wh.deliver(event, "X-GitHub-Delivery", "d1").Code)
	w := wh.deliver(strings.Replace(event, "2000", "9999", 1), "X-GitHub-Delivery", "d1")
	assertProblem(t, w, http.StatusUnprocessableEntity, core.ProblemKeyReused)
	assert.Contains(t, w.Body.String(), "This X-GitHub-Delivery was first used with a different request")
	assert.Contains(t, wh.logs.String(), "level=WARN")
	assert.Contains(t, wh.logs.String(), "key=d1")
	assert.Equal(t, int64(1), wh.runs.Load())
}

func TestRedeliveryInFlightIs409WithRetryAfter(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	wh := newWebhook(t, core.Config{Key: core.KeyFromJSON("id")}, func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		w.WriteHeader(http.StatusNoContent)
	})
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- wh.deliver(event) }()
	<-entered
	w := wh.deliver(event)
	assertProblem(t, w, http.StatusConflict, core.ProblemInProgress)
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	assert.Contains(t, w.Body.String(), `this key (JSON member \"id\") is still being processed`)
	close(release)
	assert.Equal(t, http.StatusNoContent, (<-done).Code)
	assert.Equal(t, http.StatusNoContent, wh.deliver(event).Code, "the provider's retry gets the recorded answer")
	assert.Equal(t, int64(1), wh.runs.Load())
}

func TestRedeliveryAfterA500RunsAgain(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	fail.Store(true)
	wh := newWebhook(t, core.Config{Key: core.KeyFromJSON("id")}, func(w http.ResponseWriter, r *http.Request) {
		if fail.Swap(false) {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	assert.Equal(t, http.StatusInternalServerError, wh.deliver(event).Code)
	assert.Equal(t, http.StatusOK, wh.deliver(event).Code)
	assert.Equal(t, "true", wh.deliver(event).Header().Get("Idempotent-Replayed"))
	assert.Equal(t, int64(2), wh.runs.Load())
}

func TestKeyFromFunc(t *testing.T) {
	t.Parallel()
	// A provider that names deliveries by two headers, one of them optional.
	ks := core.KeyFromFunc(func(r *http.Request, body []byte) (string, bool, error) {
		id := r.Header.Get("X-Event-Id")
		if id == "" {
			return "", false, nil
		}
		if !bytes.HasPrefix(body, []byte("{")) {
			return "", true, errors.New("the body is not a JSON object")
		}
		return r.Header.Get("X-Account") + "/" + id, true, nil
	})
	wh := newWebhook(t, core.Config{Key: ks}, nil)
	require.Equal(t, http.StatusOK, wh.deliver(event, "X-Event-Id", "1", "X-Account", "a").Code)
	assert.Equal(t, "true", wh.deliver(event, "X-Event-Id", "1", "X-Account", "a").Header().Get("Idempotent-Replayed"))
	assertProblem(t, wh.deliver(event), http.StatusBadRequest, core.ProblemKeyMissing)
	w := wh.deliver(`x`, "X-Event-Id", "1")
	assertProblem(t, w, http.StatusBadRequest, core.ProblemKeyInvalid)
	assert.Contains(t, w.Body.String(), "the body is not a JSON object")
	assertProblem(t, wh.deliver(event, "X-Event-Id", "\x7f"), http.StatusBadRequest, core.ProblemKeyInvalid)
}

func TestKeySourceConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		cfg   core.Config
		field string
	}{
		"bad header name":  {core.Config{Key: core.KeyFromHeader("X Delivery")}, "Key"},
		"no JSON member":   {core.Config{Key: core.KeyFromJSON()}, "Key"},
		"nil function":     {core.Config{Key: core.KeyFromFunc(nil)}, "Key"},
		"HeaderName too":   {core.Config{Key: core.KeyFromJSON("id"), HeaderName: "X-Key"}, "HeaderName"},
		"header name only": {core.Config{HeaderName: "X-Key"}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			tc.cfg.Store = memstore.New()
			_, err := core.New(tc.cfg)
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, core.ErrInvalidConfig)
			assert.Contains(t, err.Error(), ": "+tc.field+": ")
		})
	}
}

func TestKeySourceHooksSeeTheKey(t *testing.T) {
	t.Parallel()
	var got []string
	wh := newWebhook(t, core.Config{Key: core.KeyFromJSON("id"), Hooks: core.HookFunc(func(_ context.Context, ev core.Event) {
		got = append(got, string(ev.Outcome)+" "+ev.Key)
	})}, nil)
	wh.deliver(event)
	wh.deliver(event)
	assert.Equal(t, []string{"claimed evt_1", "completed evt_1", "replayed evt_1"}, got)
}
