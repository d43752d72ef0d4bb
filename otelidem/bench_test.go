package otelidem_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/otelidem"
)

// BenchmarkObserve is what the span annotation and the metrics cost a replay, beyond
// the engine's own work: on a recording span, and with no span (metrics only).
func BenchmarkObserve(b *testing.B) {
	hooks, err := otelidem.New(otelidem.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))))
	if err != nil {
		b.Fatal(err)
	}
	ev := core.Event{Outcome: core.OutcomeReplayed, Route: "POST /v1/orders", Status: 201, Elapsed: 700 * time.Microsecond, StoreClaim: 300 * time.Microsecond}
	tracer := sdktrace.NewTracerProvider().Tracer("bench") // recording, exporting nowhere
	b.Run("span", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, span := tracer.Start(context.Background(), "POST /v1/orders")
			hooks.Observe(ctx, ev)
			span.End()
		}
	})
	b.Run("span-only-cost", func(b *testing.B) { // the span alone, to subtract
		b.ReportAllocs()
		for b.Loop() {
			_, span := tracer.Start(context.Background(), "POST /v1/orders")
			span.End()
		}
	})
	b.Run("no-span", func(b *testing.B) {
		b.ReportAllocs()
		ctx := context.Background()
		for b.Loop() {
			hooks.Observe(ctx, ev)
		}
	})
}
