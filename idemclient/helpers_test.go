package idemclient_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/idemclient"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a fake clock: a wait is recorded and moves the clock on at once.
type clock struct {
	mu    sync.Mutex
	now   time.Time
	waits []time.Duration
}

func newClock() *clock { return &clock{now: time.Now().Truncate(time.Second)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Sleep(ctx context.Context, d time.Duration) error {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waits = append(c.waits, d)
	c.now = c.now.Add(d)
	return nil
}

func (c *clock) Waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}

// newTransport is a Transport on a base of the test's own (its connections closed when
// the test ends) and on clk, with tr's other settings.
func newTransport(t *testing.T, clk *clock, tr *idemclient.Transport) *idemclient.Transport {
	t.Helper()
	if tr.Base == nil {
		base := &http.Transport{}
		t.Cleanup(base.CloseIdleConnections)
		tr.Base = base
	}
	if clk != nil {
		idemclient.SetClock(tr, clk.Now, clk.Sleep)
	}
	return tr
}

// seen is one request as a server received it.
type seen struct {
	Method string
	Key    string // the Idempotency-Key header
	HasKey bool
	Body   string
}

// answer writes one response.
type answer func(w http.ResponseWriter)

// status answers code with a short text body and the headers given as name/value pairs.
func status(code int, header ...string) answer {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, http.StatusText(code))
	}
}

// problem answers an RFC 9457 problem of type typ.
func problem(code int, typ string, header ...string) answer {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, `{"type":"`+typ+`","title":"t","status":409,"detail":"d"}`)
	}
}

// script is a server that answers its requests in turn with answers (the last one
// again once they run out) and records them.
type script struct {
	srv     *httptest.Server
	mu      sync.Mutex
	seen    []seen
	answers []answer
}

func newScript(t *testing.T, answers ...answer) *script {
	t.Helper()
	s := &script{answers: answers}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		key, has := r.Header["Idempotency-Key"]
		s.mu.Lock()
		n := len(s.seen)
		s.seen = append(s.seen, seen{Method: r.Method, Key: strings.Join(key, ","), HasKey: has, Body: string(body)})
		s.mu.Unlock()
		s.answers[min(n, len(s.answers)-1)](w)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *script) URL() string { return s.srv.URL }

func (s *script) Seen() []seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seen(nil), s.seen...)
}

// do sends method to url with body (none when "") through tr, and returns the response
// with its body read, and the Result.
func do(t *testing.T, ctx context.Context, tr http.RoundTripper, method, url, body string) (*http.Response, string, idemclient.Result, error) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	var res idemclient.Result
	req, err := http.NewRequestWithContext(idemclient.WithResult(ctx, &res), method, url, rd)
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return nil, "", res, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b), res, nil
}

// idemServer is a real idem server: core's middleware on memstore in phased mode in front
// of handler, scoped to one account; calls counts the handler's runs.
func idemServer(t *testing.T, handler http.HandlerFunc) (url string, calls *atomic.Int64) {
	t.Helper()
	calls = new(atomic.Int64)
	eng, err := core.New(core.Config{Store: memstore.New(), Mode: core.ModePhased})
	if err != nil {
		t.Fatal(err)
	}
	mw := eng.Middleware(func(*http.Request) string { return "acct" })
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		handler(w, r)
	})))
	t.Cleanup(srv.Close)
	return srv.URL, calls
}

// created answers 201 with the request's body echoed, as an order would be.
func created(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/orders/1")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(body)
}
