package redisstore_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/redistopo"
	"github.com/idemkit/idem/internal/seamtest"
	"github.com/idemkit/idem/redisstore"
	"github.com/redis/go-redis/v9"
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

// BenchmarkReplicaAcks: a first request through the middleware (claim, complete) on a
// Redis Cluster and on a Sentinel group, without and with WithReplicaAcks(1, …): the
// difference is the cost of waiting for the replica (one WAIT, pipelined after the
// completion on the key's master).
//
//	go test -run '^$' -bench BenchmarkReplicaAcks -benchtime 3000x -count 5 ./redisstore/
func BenchmarkReplicaAcks(b *testing.B) {
	for _, topo := range []topology{cluster, sentinel} {
		for _, acks := range []int{0, 1} {
			b.Run(fmt.Sprintf("%s/acks=%d", topo.name, acks), func(b *testing.B) {
				opts := []redisstore.Option{redisstore.WithPrefix(newPrefix(b))}
				if acks > 0 {
					opts = append(opts, redisstore.WithReplicaAcks(acks, ackTimeout))
				}
				s := redisstore.New(topoClient(b, topo.spec(b)), opts...)
				warm(b, s)
				mw, err := middleware(s, core.Config{})
				if err != nil {
					b.Fatal(err)
				}
				handler := mw(http.HandlerFunc(created))
				b.ResetTimer()
				for i := range b.N {
					if w := serveOnce(handler, fmt.Sprintf("first-%d", i)); w.Code != http.StatusCreated {
						b.Fatalf("status %d: %s", w.Code, w.Body)
					}
				}
			})
		}
	}
}

// BenchmarkClaimComplete: the throughput of claim + complete (a first request's two
// round trips, without HTTP) from many goroutines, on a Redis Cluster of one master and
// of three (each master with a replica), on the same machine in one run: ops/s is the
// figure, and the ratio between the two is how the store scales with masters. Every
// operation is on a key of its own, spread over the slots by its hash tag.
//
//	go test -run '^$' -bench BenchmarkClaimComplete -benchtime 20000x -count 3 ./redisstore/
func BenchmarkClaimComplete(b *testing.B) {
	for _, masters := range []int{1, 3} {
		b.Run(fmt.Sprintf("masters=%d", masters), func(b *testing.B) {
			c := redistopo.SharedClusterOf(b, masters)
			client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true, PoolSize: 64})
			b.Cleanup(func() { _ = client.Close() })
			s := redisstore.New(client, redisstore.WithPrefix(newPrefix(b)))
			warm(b, s)
			var seq atomic.Int64
			resp := &storage.Response{Status: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}},
				Body: []byte(`{"id":1,"amount":100,"status":"paid"}`)}
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					l, rec, err := seamtest.Split(s.Claim(ctx, phasedClaim(fmt.Sprintf("op-%d", seq.Add(1)), "a")))
					if err != nil || rec != nil {
						b.Errorf("claim: %v %v", rec, err)
						return
					}
					if err := l.Complete(ctx, resp); err != nil {
						b.Errorf("complete: %v", err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}
