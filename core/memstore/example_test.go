package memstore_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/core/storage"
)

// The engine drives a store like this: the first request claims the key and records its
// response; the retry gets the record and replays it.
func Example() {
	ctx := context.Background()
	store := memstore.New()
	fp := sha256.Sum256([]byte(`POST /orders {"amount":10}`))
	c := storage.Claim{
		Scope: "account-1", Key: "9f1c7a52-order", Fingerprint: fp[:],
		Method: http.MethodPost, Path: "/orders", Mode: storage.ModePhased,
		Lease: time.Minute, Retention: 24 * time.Hour,
	}

	claimed, err := store.Claim(ctx, c)
	if err != nil {
		panic(err)
	}
	fmt.Println("first request claims the key:", claimed.Verdict, claimed.Lock.RecoveryPoint())
	err = claimed.Lock.Complete(ctx, &storage.Response{
		Status: http.StatusCreated,
		Header: http.Header{"Location": {"/orders/1"}},
		Body:   []byte(`{"id":1}`),
	})
	if err != nil {
		panic(err)
	}

	claimed, err = store.Claim(ctx, c)
	if err != nil {
		panic(err)
	}
	rec := claimed.Record
	fmt.Println("retry gets the record:", rec.State, rec.Response.Status,
		rec.Response.Header.Get("Location"), string(rec.Response.Body))
	// Output:
	// first request claims the key: absent started
	// retry gets the record: completed 201 /orders/1 {"id":1}
}

// With the engine: the first request runs the handler, the retry is replayed.
func Example_middleware() {
	eng, err := core.New(core.Config{
		Store: memstore.New(),
	})
	if err != nil {
		panic(err)
	}
	orders := 0
	h := eng.Middleware(func(r *http.Request) string { return r.Header.Get("X-Account") })(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		orders++
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", orders))
		w.WriteHeader(http.StatusCreated)
	}))
	for range 2 {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"amount":10}`))
		r.Header.Set("X-Account", "account-1")
		r.Header.Set("Idempotency-Key", "9f1c7a52-order")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("Location"), "replayed:", w.Header().Get("Idempotent-Replayed") == "true")
	}
	fmt.Println("orders created:", orders)
	// Output:
	// 201 /orders/1 replayed: false
	// 201 /orders/1 replayed: true
	// orders created: 1
}
