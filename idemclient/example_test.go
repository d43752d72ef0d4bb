package idemclient_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/idemclient"
)

// ordersAPI is an idem server for the examples: POST /v1/orders behind core's
// middleware, each run of the handler creating order n. When hiccups > 0, that many
// first requests are answered 503 with Retry-After: 0 before reaching it, as a gateway
// would while the service restarts.
func ordersAPI(hiccups int32) *httptest.Server {
	var orders, left atomic.Int32
	left.Store(hiccups)
	create := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, orders.Add(1))
	})
	eng, err := core.New(core.Config{Store: memstore.New()})
	if err != nil {
		panic(err)
	}
	idem := eng.Middleware(func(*http.Request) string { return "account-1" })
	api := idem(create)
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if left.Add(-1) >= 0 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, "restarting", http.StatusServiceUnavailable)
			return
		}
		api.ServeHTTP(w, r)
	}))
}

// The two-line setup: every POST and PATCH gets a key, and is retried with it. The
// gateway's 503 is retried (after its Retry-After); the retry creates the order.
func Example() {
	srv := ordersAPI(1)
	defer srv.Close()
	url := srv.URL

	// snippet:begin setup
	client := &http.Client{Transport: &idemclient.Transport{}}
	resp, err := client.Post(url+"/v1/orders", "application/json", strings.NewReader(`{"item":"book"}`))
	// snippet:end setup
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body), "key sent:", resp.Request.Header.Get("Idempotency-Key") != "")
	// Output:
	// 201 {"id":1} key sent: true
}

// One key for one operation across two calls: the user's double click, or a job run again
// after a restart, with the key it saved before the first try. The second call is
// answered with the first one's order, replayed; one order exists.
func ExampleWithKey() {
	srv := ordersAPI(0)
	defer srv.Close()
	client := &http.Client{Transport: &idemclient.Transport{}}
	createOrder := func(ctx context.Context) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/orders", strings.NewReader(`{"item":"book"}`))
		if err != nil {
			return nil, err
		}
		return client.Do(req)
	}

	// snippet:begin withkey
	key := idemclient.NewKey() // saved with the form, the job or the outbox row, before the first try
	for range 2 {              // the double click, or the run after a restart
		ctx := idemclient.WithKey(context.Background(), key)
		resp, err := createOrder(ctx)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body), "replayed:", resp.Header.Get("Idempotent-Replayed") == "true")
	}
	// snippet:end withkey
	// Output:
	// 201 {"id":1} replayed: false
	// 201 {"id":1} replayed: true
}

// What the transport did: the key, the attempts, whether the answer was a replay.
func ExampleWithResult() {
	srv := ordersAPI(2)
	defer srv.Close()
	client := &http.Client{Transport: &idemclient.Transport{}}

	var res idemclient.Result
	ctx := idemclient.WithResult(context.Background(), &res)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/orders", strings.NewReader(`{"item":"book"}`))
	resp, err := client.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "attempts:", res.Attempts, "replayed:", res.Replayed, "key:", len(res.Key), "characters")
	// Output:
	// 201 attempts: 3 replayed: false key: 36 characters
}

// A callback per retry, for metrics or logs of your own (or set Logger).
func ExampleTransport_onRetry() {
	srv := ordersAPI(2)
	defer srv.Close()
	client := &http.Client{Transport: &idemclient.Transport{
		MaxAttempts: 4,
		OnRetry: func(i idemclient.RetryInfo) {
			fmt.Printf("attempt %d got %d: retrying in %s (Retry-After: %t)\n", i.Attempt, i.Status, i.Wait, i.RetryAfter)
		},
	}}
	resp, err := client.Post(srv.URL+"/v1/orders", "application/json", strings.NewReader(`{"item":"book"}`))
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode)
	// Output:
	// attempt 1 got 503: retrying in 0s (Retry-After: true)
	// attempt 2 got 503: retrying in 0s (Retry-After: true)
	// 201
}
