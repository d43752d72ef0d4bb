package core_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
)

// A POST route behind the net/http middleware: the retry gets the stored answer.
func ExampleMiddleware() {
	createOrder := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/orders/42")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":42}`)
	})
	handler := core.Middleware(core.Config{
		Store: memstore.New(),
		Scope: func(r *http.Request) string { return r.Header.Get("X-Account-ID") },
	})(createOrder)

	for range 2 {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader(`{"item":"book"}`))
		r.Header.Set("Idempotency-Key", "8e03978e-40d5-43e8-bc93-6894a57f9324")
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("Location"), w.Body, "replayed:", w.Header().Get("Idempotent-Replayed") == "true")
	}
	// Output:
	// 201 /orders/42 {"id":42} replayed: false
	// 201 /orders/42 {"id":42} replayed: true
}

// ParseKey accepts a bare key or an RFC 8941 sf-string naming the same key.
func ExampleParseKey() {
	for _, v := range []string{`abc-123`, `"abc-123"`, `a,b`} {
		key, _, err := core.ParseKey([]string{v}, 1)
		fmt.Printf("%q %v\n", key, err)
	}
	// Output:
	// "abc-123" <nil>
	// "abc-123" <nil>
	// "" idem: invalid idempotency key: a bare key may not contain a space or a comma (quote it)
}

// Phases of an operation that calls the outside world; a retry after a crash resumes
// after the last committed phase.
func ExampleOperation_Phase() {
	handler := core.Middleware(core.Config{
		Store: memstore.New(),
		Scope: func(*http.Request) string { return "account-1" },
		Mode:  core.ModePhased,
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := core.OperationFrom(r.Context())
		err := op.Phase(r.Context(), "charge_created", func(ctx context.Context) error {
			fmt.Println("charging with provider key", op.DerivedKey("charge"))
			return nil
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	r := httptest.NewRequest("POST", "/payments", nil)
	r.Header.Set("Idempotency-Key", "pay-1")
	w := httptest.NewRecorder()
	handler.ServeHTTP(w, r)
	fmt.Println(w.Code)
	// Output:
	// charging with provider key pay-1:charge
	// 201
}
