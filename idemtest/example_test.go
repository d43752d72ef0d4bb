package idemtest_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"sync/atomic"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/idemtest"
)

// Run the checks against a route behind the library. In a test, idemtest.Check(t, …)
// does the same and reports each failure through t.
func Example() {
	var orders atomic.Int64
	create := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := orders.Add(1)
		w.Header().Set("Location", fmt.Sprintf("/v1/orders/%d", id))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, id)
	})
	account := func(r *http.Request) string { return r.Header.Get("X-Account") }
	eng, err := core.New(core.Config{Store: memstore.New()})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders", eng.Middleware(account)(create))

	rep, err := idemtest.Run(context.Background(), idemtest.Target{
		Handler:     mux,
		Path:        "/v1/orders",
		Header:      http.Header{"X-Account": {"alice"}},
		Body:        func(int) []byte { return []byte(`{"item":"book","quantity":2}`) },
		SideEffects: func() int { return int(orders.Load()) },
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range rep.Results {
		fmt.Println(r.Outcome, r.Name)
	}
	fmt.Println("failed:", rep.Failed())
	// Output:
	// pass missing-key
	// pass malformed-keys
	// pass first-fresh
	// pass replay
	// pass changed-body
	// pass parallel
	// skip failure-retry
	// skip get-untouched
	// failed: false
}
