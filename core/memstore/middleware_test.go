package memstore_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/core/storage"
)

func post(t *testing.T, h http.Handler, key, body string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func middleware(t *testing.T, s storage.Store, next http.HandlerFunc) http.Handler {
	t.Helper()
	eng, err := core.New(core.Config{Store: s})
	if err != nil {
		t.Fatal(err)
	}
	return eng.Middleware(func(*http.Request) string { return "acct" })(next)
}

// TestMiddlewareResumesAfterFailure: an attempt that charged and then failed keeps its
// recovery point in memstore; the retry takes over at once, skips the charge and finishes.
func TestMiddlewareResumesAfterFailure(t *testing.T) {
	t.Parallel()
	var charges, emails, runs atomic.Int32
	h := middleware(t, memstore.New(), func(w http.ResponseWriter, r *http.Request) {
		op := core.OperationFrom(r.Context())
		attempt := runs.Add(1)
		if err := op.Phase(r.Context(), "charged", func(context.Context) error { charges.Add(1); return nil }); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if attempt == 1 {
			http.Error(w, "mail server down", http.StatusBadGateway)
			return
		}
		if err := op.Phase(r.Context(), "emailed", func(context.Context) error { emails.Add(1); return nil }); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Location", "/orders/1")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":1,"resumed":%v}`, op.Resumed())
	})

	if w := post(t, h, "k1", `{"amount":10}`); w.Code != http.StatusBadGateway {
		t.Fatalf("first attempt: %d %s", w.Code, w.Body)
	}
	w := post(t, h, "k1", `{ "amount": 10 }`)
	if w.Code != http.StatusCreated || w.Body.String() != `{"id":1,"resumed":true}` {
		t.Fatalf("retry: %d %s", w.Code, w.Body)
	}
	w = post(t, h, "k1", `{"amount":10}`)
	if w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "true" ||
		w.Header().Get("Location") != "/orders/1" || w.Body.String() != `{"id":1,"resumed":true}` {
		t.Fatalf("replay: %d %v %s", w.Code, w.Header(), w.Body)
	}
	if runs.Load() != 2 || charges.Load() != 1 || emails.Load() != 1 {
		t.Fatalf("runs %d, charges %d, emails %d; want 2, 1, 1", runs.Load(), charges.Load(), emails.Load())
	}
}

// TestMiddlewareConcurrentDuplicates: identical requests arriving together run the
// handler once; the others get 409 while it runs, or the replay after.
func TestMiddlewareConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	release := make(chan struct{})
	h := middleware(t, memstore.New(), func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		<-release
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":1}`))
	})
	const n = 50
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { codes[i] = post(t, h, "k1", `{"amount":10}`).Code })
	}
	deadline := time.Now().Add(5 * time.Second)
	for runs.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // let the duplicates arrive while the handler runs
	close(release)
	wg.Wait()
	created, conflicts := 0, 0
	for _, c := range codes {
		switch c {
		case http.StatusCreated:
			created++
		case http.StatusConflict:
			conflicts++
		default:
			t.Fatalf("unexpected status %d", c)
		}
	}
	if runs.Load() != 1 || created < 1 || created+conflicts != n {
		t.Fatalf("handler ran %d times; %d created, %d conflicts", runs.Load(), created, conflicts)
	}
	if w := post(t, h, "k1", `{"amount":10}`); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after completion: %d %v", w.Code, w.Header())
	}
}
