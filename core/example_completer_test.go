package core_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
)

// A payment whose first attempt failed after charging, and whose client never retried, is
// finished by the completer through the application's own router; the client's late retry
// gets the replay.
func ExampleCompleter() {
	eng, err := core.New(core.Config{Store: memstore.New(), Mode: core.ModePhased,
		KeepRequest: true, KeepHeaders: []string{"Content-Type"}})
	if err != nil {
		panic(err)
	}
	receiptDown := true
	mux := http.NewServeMux()
	mux.Handle("POST /payments", eng.Middleware(func(r *http.Request) string {
		return r.Header.Get("X-Account") // never called for the completer's request
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := core.MustOperation(r.Context())
		if err := op.Phase(r.Context(), "charge_created", func(context.Context) error {
			fmt.Println("charged", op.DerivedKey("charge"))
			return nil
		}); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if receiptDown {
			http.Error(w, "receipt service down", http.StatusServiceUnavailable)
			return
		}
		fmt.Println("receipt sent; completing:", op.Completing())
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"paid":true}`)
	})))
	pay := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":100}`))
		r.Header.Set("Idempotency-Key", "pay-1")
		r.Header.Set("X-Account", "acct_1")
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w
	}

	fmt.Println("first attempt:", pay().Code)
	receiptDown = false
	c := &core.Completer{Engine: eng, Handler: mux, Grace: time.Nanosecond}
	n, err := c.Pass(context.Background())
	fmt.Println("completed:", n, err)
	w := pay()
	fmt.Println("late retry:", w.Code, w.Header().Get("Idempotent-Replayed"), w.Body)
	// Output:
	// charged pay-1:charge
	// first attempt: 503
	// receipt sent; completing: true
	// completed: 1 <nil>
	// late retry: 201 true {"paid":true}
}
