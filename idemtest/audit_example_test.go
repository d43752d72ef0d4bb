package idemtest_test

import (
	"context"
	"fmt"
	"log"
	"net/http"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/idemtest"
)

// Audit an app's unsafe routes: which does idem guard? In a test, idemtest.Audit(t, …)
// does the same and fails the test for each unsafe route neither guarded nor allowed.
// With Gin or Echo, Routes is idemtest.RoutesOf(r.Routes()).
func ExampleRunAudit() {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
	account := func(r *http.Request) string { return r.Header.Get("X-Account") }
	eng, err := core.New(core.Config{Store: memstore.New()})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders", eng.Middleware(account)(ok))
	mux.Handle("POST /v1/refunds", ok) // forgotten
	mux.Handle("POST /v1/login", ok)

	rep, err := idemtest.RunAudit(context.Background(), idemtest.AuditTarget{
		Handler: mux,
		Routes: []idemtest.Route{
			{Method: "POST", Path: "/v1/orders"}, {Method: "POST", Path: "/v1/refunds"},
			{Method: "POST", Path: "/v1/login"}, {Method: "GET", Path: "/v1/orders"},
		},
		Header: http.Header{"X-Account": {"alice"}},
		Allow:  []string{"POST /v1/login"},
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range rep.Routes {
		fmt.Println(r.Verdict, r.Route)
	}
	fmt.Println("failed:", rep.Failed(), "safe routes:", rep.Safe)
	// Output:
	// guarded POST /v1/orders
	// unguarded POST /v1/refunds
	// allowed POST /v1/login
	// failed: true safe routes: 1
}
