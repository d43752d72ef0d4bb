package promidem_test

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/promidem"
)

// An orders route behind the engine, with its metrics served on /metrics. A first
// request and its retry: the handler ran once (claimed, completed), the retry replayed.
func ExampleNew() {
	reg := prometheus.NewRegistry()
	hooks, err := promidem.New(reg)
	if err != nil {
		panic(err)
	}
	eng, err := core.New(core.Config{Store: memstore.New(), Hooks: hooks})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders", eng.Middleware(func(*http.Request) string { return "acct_1" })(
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) })))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	for range 2 {
		r := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(`{"item":"book"}`))
		r.Header.Set("Idempotency-Key", "order-1")
		mux.ServeHTTP(httptest.NewRecorder(), r)
	}
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for sc := bufio.NewScanner(w.Body); sc.Scan(); {
		if line := sc.Text(); strings.HasPrefix(line, "idem_requests_total") || strings.HasPrefix(line, "idem_store_seconds_count") {
			fmt.Println(line)
		}
	}
	// Output:
	// idem_requests_total{outcome="claimed",route="POST /v1/orders"} 1
	// idem_requests_total{outcome="completed",route="POST /v1/orders"} 1
	// idem_requests_total{outcome="replayed",route="POST /v1/orders"} 1
	// idem_store_seconds_count{op="claim"} 2
	// idem_store_seconds_count{op="complete"} 1
	// idem_store_seconds_count{op="release"} 0
}
