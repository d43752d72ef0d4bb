package core_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/core/storage"
)

// A GitHub webhook receiver: GitHub names every delivery in X-GitHub-Delivery and sends
// it again when it gets no 2xx. The redelivery gets the recorded answer; the event is
// handled once.
func ExampleKeyFromHeader() {
	var handled int
	receive := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled++
		w.WriteHeader(http.StatusAccepted)
	})
	eng, err := core.New(core.Config{
		Store: memstore.New(),
		Key:   core.KeyFromHeader("X-GitHub-Delivery"),
	})
	if err != nil {
		panic(err)
	}
	handler := eng.Middleware(func(*http.Request) string { return "github" })(receive)

	for range 2 {
		r := httptest.NewRequest("POST", "/webhooks/github", strings.NewReader(`{"action":"opened"}`))
		r.Header.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Println(w.Code, "replayed:", w.Header().Get("Idempotent-Replayed") == "true")
	}
	fmt.Println("handled:", handled)
	// Output:
	// 202 replayed: false
	// 202 replayed: true
	// handled: 1
}

// A Stripe-style receiver: the event's ID is the "id" member of the JSON body. The same
// event sent again is recognised whatever its member order; a body without an ID is a
// 400 problem.
func ExampleKeyFromJSON() {
	eng, err := core.New(core.Config{
		Store: memstore.New(),
		Key:   core.KeyFromJSON("id"),
	})
	if err != nil {
		panic(err)
	}
	handler := eng.Middleware(func(*http.Request) string { return "stripe" })(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "handled %s", core.MustOperation(r.Context()).Key())
	}))

	for _, body := range []string{
		`{"id":"evt_1","type":"charge.succeeded"}`,
		`{"type":"charge.succeeded","id":"evt_1"}`,
		`{"type":"charge.succeeded"}`,
	} {
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, httptest.NewRequest("POST", "/webhooks/stripe", strings.NewReader(body)))
		fmt.Println(w.Code, w.Header().Get("Idempotent-Replayed"), strings.TrimSpace(w.Body.String()))
	}
	// Output:
	// 200  handled evt_1
	// 200 true handled evt_1
	// 400  {"type":"https://github.com/idemkit/idem/blob/main/docs/problems.md#key-missing","title":"Idempotency key missing","status":400,"detail":"POST /webhooks/stripe requires a JSON body with the member \"id\"."}
}

// A queue consumer applies each message once by its ID: the redelivered message gets
// the recorded result and the function does not run again. With pgxstore or gormstore,
// fn's writes through pgxstore.MustTx(ctx) or gormstore.MustDB(ctx) commit with the record.
func ExampleEngine_Do() {
	eng, err := core.New(core.Config{Store: memstore.New()})
	if err != nil {
		panic(err)
	}
	apply := func(ctx context.Context) ([]byte, error) {
		fmt.Println("applying", core.MustOperation(ctx).Key())
		return []byte(`{"order":42}`), nil
	}
	for range 2 { // a delivery and its redelivery
		result, replayed, err := eng.Do(context.Background(), "orders", "msg-7", []byte(`{"item":"book"}`), apply)
		switch {
		case errors.Is(err, storage.ErrInProgress):
			fmt.Println("in flight elsewhere: redeliver later")
		case err != nil:
			fmt.Println("failed, redeliver:", err)
		default:
			fmt.Printf("ack %s replayed=%t\n", result, replayed)
		}
	}
	// Output:
	// applying msg-7
	// ack {"order":42} replayed=false
	// ack {"order":42} replayed=true
}
