package redisstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
)

// middleware builds idem's net/http middleware on store, in phased mode. Every engine of
// these tests is made here, so a change of core's API is a change of this function only.
func middleware(store storage.Store, cfg core.Config) (func(http.Handler) http.Handler, error) {
	cfg.Store = store
	cfg.Mode = core.ModePhased
	eng, err := core.New(cfg)
	if err != nil {
		return nil, err
	}
	return eng.Middleware(func(r *http.Request) string { return r.Header.Get("X-Account") }), nil
}

// serve starts an HTTP server running h behind the middleware on store; the test's
// cleanup stops it.
func serve(t testing.TB, store storage.Store, cfg core.Config, h http.Handler) *httptest.Server {
	t.Helper()
	mw, err := middleware(store, cfg)
	if err != nil {
		t.Fatalf("middleware: %v", err)
	}
	srv := httptest.NewServer(mw(h))
	t.Cleanup(srv.Close)
	return srv
}

// provider is a fake payment provider. It charges once per Idempotency-Key, however often
// it is called with one, and remembers which operation (order) each charge was for, so a
// test can count the charges of one operation: more than one means the application called
// it with a key that was not stable across retries.
type provider struct {
	mu      sync.Mutex
	byKey   map[string]string   // Idempotency-Key → charge ID
	byOrder map[string][]string // order → charge IDs
	calls   int
	srv     *httptest.Server
}

func newProvider(t testing.TB) *provider {
	p := &provider{byKey: map[string]string{}, byOrder: map[string][]string{}}
	p.srv = httptest.NewServer(p)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch r.Method {
	case http.MethodPost: // charge: ?order=…, Idempotency-Key
		key := r.Header.Get("Idempotency-Key")
		if key == "" {
			http.Error(w, "Idempotency-Key required", http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, p.chargeLocked(key, r.URL.Query().Get("order")))
	case http.MethodGet: // look a charge up: ?key=…
		id, ok := p.byKey[r.URL.Query().Get("key")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, id)
	}
}

// charge charges order once per key, however often it is called with key, and returns
// the charge's ID: the provider's API, for an application calling it in process.
func (p *provider) charge(key, order string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.chargeLocked(key, order)
}

func (p *provider) chargeLocked(key, order string) string {
	p.calls++
	id, ok := p.byKey[key]
	if !ok {
		id = fmt.Sprintf("ch_%d", len(p.byKey)+1)
		p.byKey[key] = id
		p.byOrder[order] = append(p.byOrder[order], id)
	}
	return id
}

// charges returns the charges made for order.
func (p *provider) charges(order string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.byOrder[order]...)
}

// Crash points of the payment handler (see payments).
const (
	atClaimed        = "claimed"         // the handler started, before any phase
	atProviderCalled = "provider-called" // inside phase "charged", after the provider charged
	atCharged        = "charged"         // phase "charged" recorded
)

// payments is the application's phased handler: phase "charged" charges the provider with
// the operation's derived key, then the handler answers 201 with the charge. A resumed run
// skips the recorded phase and looks its charge up by the same key. at is called at each
// crash point (a child server exits there). runs, when not nil, counts the handler's runs.
func payments(providerURL string, at func(point string), runs func(order string)) http.Handler {
	client := &http.Client{Timeout: 30 * time.Second} // generous: a loaded CI machine runs the race detector
	call := func(ctx context.Context, method, u string, h http.Header) (string, error) {
		req, err := http.NewRequestWithContext(ctx, method, u, nil)
		if err != nil {
			return "", err
		}
		req.Header = h
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("provider: %s", resp.Status)
		}
		return string(b), err
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		op := core.MustOperation(ctx)
		if runs != nil {
			runs(op.Key())
		}
		at(atClaimed)
		var charge string
		err := op.Phase(ctx, "charged", func(ctx context.Context) error {
			id, err := call(ctx, http.MethodPost, providerURL+"/charges?order="+url.QueryEscape(op.Key()),
				http.Header{"Idempotency-Key": {op.DerivedKey("charge")}})
			charge = id
			if err == nil {
				at(atProviderCalled)
			}
			return err
		})
		switch {
		case errors.Is(err, storage.ErrLeaseLost):
			return // the engine answers 409
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		at(atCharged)
		if charge == "" { // resumed after the phase: the provider knows the charge by its key
			if charge, err = call(ctx, http.MethodGet, providerURL+"/charges?key="+url.QueryEscape(op.DerivedKey("charge")), nil); err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/v1/payments/"+charge)
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]string{"charge": charge})
	})
}

func noCrash(string) {}

// reply is what a client got.
type reply struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r *reply) replayed() bool { return r.Header.Get("Idempotent-Replayed") == "true" }

func (r *reply) String() string { return fmt.Sprintf("%d %s", r.Status, bytes.TrimSpace(r.Body)) }

// httpClient bounds a request generously: the fault tests check their own, tighter bounds.
var httpClient = &http.Client{Timeout: 30 * time.Second}

// post sends a payment with key for account to base.
func post(ctx context.Context, base, account, key, body string) (*reply, error) {
	return recorded(ctx, key, func() (*reply, error) { return send(ctx, base, account, key, body) })
}

func send(ctx context.Context, base, account, key, body string) (*reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/payments", bytes.NewReader([]byte(body)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("X-Account", account)
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &reply{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// untilCreated posts until the answer is a 201, for as long as within, accepting 409
// (a lease still live) and, when also is set, 5xx answers on the way. It polls: waiting
// for a lease to run out is the point.
func untilCreated(ctx context.Context, base, account, key, body string, within time.Duration, also5xx bool) (*reply, []int, error) {
	var seen []int
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		r, err := post(ctx, base, account, key, body)
		if err != nil {
			return nil, seen, err
		}
		seen = append(seen, r.Status)
		switch {
		case r.Status == http.StatusCreated:
			return r, seen, nil
		case r.Status == http.StatusConflict, also5xx && r.Status >= 500:
			time.Sleep(25 * time.Millisecond)
		default:
			return nil, seen, fmt.Errorf("answer %v, want 201 or 409", r)
		}
	}
	return nil, seen, fmt.Errorf("no 201 within %v (answers %v)", within, seen)
}

// serveOnce runs one keyed POST through h in process.
func serveOnce(h http.Handler, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/v1/payments", bytes.NewReader([]byte(`{"amount":100}`)))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set("X-Account", "acct")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}
