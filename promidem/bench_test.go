package promidem_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/promidem"
)

// BenchmarkObserve is what the metrics cost a replay, beyond the engine's own work.
func BenchmarkObserve(b *testing.B) {
	hooks, err := promidem.New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	ev := core.Event{Outcome: core.OutcomeReplayed, Route: "POST /v1/orders", Status: 201, Elapsed: 700 * time.Microsecond, StoreClaim: 300 * time.Microsecond}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		hooks.Observe(ctx, ev)
	}
}
