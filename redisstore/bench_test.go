package redisstore_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/idemkit/idem/core"
)

// The engine's cost on redisstore through the net/http middleware, with the store's round
// trips per request reported as redis-round-trips/op (go test -bench . ./redisstore/).

func BenchmarkFirstRequest(b *testing.B) {
	s, h := countedStore(b)
	mw, err := middleware(s, core.Config{})
	if err != nil {
		b.Fatal(err)
	}
	handler := mw(http.HandlerFunc(created))
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = fmt.Sprintf("first-%d", i)
	}
	before := h.n.Load()
	b.ResetTimer()
	for i := range b.N {
		if w := serveOnce(handler, keys[i]); w.Code != http.StatusCreated {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(h.n.Load()-before)/float64(b.N), "redis-round-trips/op")
}

func BenchmarkReplay(b *testing.B) {
	s, h := countedStore(b)
	mw, err := middleware(s, core.Config{})
	if err != nil {
		b.Fatal(err)
	}
	handler := mw(http.HandlerFunc(created))
	if w := serveOnce(handler, "replayed"); w.Code != http.StatusCreated {
		b.Fatalf("status %d: %s", w.Code, w.Body)
	}
	before := h.n.Load()
	b.ResetTimer()
	for range b.N {
		if w := serveOnce(handler, "replayed"); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "true" {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(h.n.Load()-before)/float64(b.N), "redis-round-trips/op")
}

// created is the benchmarks' handler: a small JSON 201, as an API creating a resource.
func created(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/v1/payments/1")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte(`{"id":1,"amount":100,"status":"paid"}`))
}
