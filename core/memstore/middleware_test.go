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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
	require.NoError(t, err)
	return eng.Middleware(func(*http.Request) string { return "acct" })(next)
}

// TestMiddlewareResumesAfterFailure: an attempt that charged and then failed keeps its
// recovery point in memstore; the retry takes over at once, skips the charge and finishes.
func TestMiddlewareResumesAfterFailure(t *testing.T) {
	t.Parallel()
	var charges, emails, runs atomic.Int32
	h := middleware(t, memstore.New(), func(w http.ResponseWriter, r *http.Request) {
		op := core.MustOperation(r.Context())
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

	w := post(t, h, "k1", `{"amount":10}`)
	require.Equal(t, http.StatusBadGateway, w.Code, "first attempt: %s", w.Body)
	w = post(t, h, "k1", `{ "amount": 10 }`)
	require.Equal(t, http.StatusCreated, w.Code, "retry: %s", w.Body)
	assert.Equal(t, `{"id":1,"resumed":true}`, w.Body.String(), "retry")
	w = post(t, h, "k1", `{"amount":10}`)
	assert.Equal(t, http.StatusCreated, w.Code, "replay")
	assert.Equal(t, "true", w.Header().Get("Idempotent-Replayed"), "replay")
	assert.Equal(t, "/orders/1", w.Header().Get("Location"), "replay")
	assert.Equal(t, `{"id":1,"resumed":true}`, w.Body.String(), "replay")
	assert.EqualValues(t, 2, runs.Load(), "handler runs")
	assert.EqualValues(t, 1, charges.Load(), "charges: the retry skips the recorded phase")
	assert.EqualValues(t, 1, emails.Load(), "emails")
}

// TestMiddlewareConcurrentDuplicates: identical requests arriving together run the
// handler once; while it runs, every other one gets 409; after it, the replay.
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
	codes := make(chan int, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			<-start
			codes <- post(t, h, "k1", `{"amount":10}`).Code
		})
	}
	close(start)
	// The handler cannot finish before release is closed, so n-1 answers arrive while it
	// runs: the duplicates, each of which found the key held (LeaseWait is 0: none waits).
	timeout := time.After(10 * time.Second)
	for i := range n - 1 {
		select {
		case code := <-codes:
			require.Equal(t, http.StatusConflict, code, "duplicate %d while the handler runs", i+1)
		case <-timeout:
			close(release)
			require.FailNow(t, "timed out waiting for the duplicates", "%d of %d answered", i, n-1)
		}
	}
	close(release)
	wg.Wait()
	assert.Equal(t, http.StatusCreated, <-codes, "the request that ran the handler")
	assert.EqualValues(t, 1, runs.Load(), "handler runs")
	w := post(t, h, "k1", `{"amount":10}`)
	assert.Equal(t, http.StatusCreated, w.Code, "after completion")
	assert.Equal(t, "true", w.Header().Get("Idempotent-Replayed"), "after completion")
}
