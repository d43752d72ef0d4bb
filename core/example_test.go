package core_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
)

// A POST route behind the net/http middleware: the retry gets the stored answer.
func ExampleEngine_Middleware() {
	createOrder := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/orders/42")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":42}`)
	})
	eng, err := core.New(core.Config{Store: memstore.New()})
	if err != nil {
		log.Fatal(err)
	}
	handler := eng.Middleware(func(r *http.Request) string { return r.Header.Get("X-Account-ID") })(createOrder)

	for range 2 {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader(`{"item":"book"}`))
		r.Header.Set("X-Account-ID", "acct-1") // what authentication would establish
		r.Header.Set("Idempotency-Key", "8e03978e-40d5-43e8-bc93-6894a57f9324")
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("Location"), w.Body, "replayed:", w.Header().Get("Idempotent-Replayed") == "true")
	}
	// Output:
	// 201 /orders/42 {"id":42} replayed: false
	// 201 /orders/42 {"id":42} replayed: true
}

// Phases of an operation that calls the outside world; a retry after a crash resumes
// after the last committed phase.
func ExampleOperation_Phase() {
	eng, err := core.New(core.Config{Store: memstore.New(), Mode: core.ModePhased})
	if err != nil {
		log.Fatal(err)
	}
	handler := eng.Middleware(func(*http.Request) string { return "account-1" })(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := core.MustOperation(r.Context())
		err := op.Phase(r.Context(), "charge_created", func(ctx context.Context) error {
			fmt.Println("charging with provider key", op.DerivedKey("charge"))
			return nil
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	r := httptest.NewRequest("POST", "/payments", nil)
	r.Header.Set("Idempotency-Key", "pay-1")
	w := httptest.NewRecorder()
	handler.ServeHTTP(w, r)
	fmt.Println(w.Code)
	// Output:
	// charging with provider key pay-1:charge
	// 201
}

// Counting outcomes for metrics: a Prometheus CounterVec or an OpenTelemetry counter
// takes the place of the map in a real service.
func ExampleHookFunc() {
	var mu sync.Mutex
	counts := map[core.Outcome]int{}
	eng, err := core.New(core.Config{
		Store: memstore.New(),
		Hooks: core.HookFunc(func(_ context.Context, ev core.Event) {
			mu.Lock()
			defer mu.Unlock()
			counts[ev.Outcome]++ // e.g. outcomes.WithLabelValues(string(ev.Outcome)).Inc()
		}),
	})
	if err != nil {
		log.Fatal(err)
	}
	handler := eng.Middleware(func(*http.Request) string { return "account-1" })(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))

	for _, key := range []string{"a", "a", "b"} {
		r := httptest.NewRequest("POST", "/orders", nil)
		r.Header.Set("Idempotency-Key", key)
		handler.ServeHTTP(httptest.NewRecorder(), r)
	}
	fmt.Println("claimed", counts[core.OutcomeClaimed], "completed", counts[core.OutcomeCompleted], "replayed", counts[core.OutcomeReplayed])
	// Output:
	// claimed 2 completed 2 replayed 1
}

// A sweeper deleting keys past retention, in the background until shutdown.
func ExampleSweeper() {
	store := memstore.New(memstore.WithRetention(24 * time.Hour)) // the sweeper reads it from the store
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- (&core.Sweeper{Store: store, Interval: time.Minute}).Run(ctx)
	}()
	cancel() // on shutdown
	fmt.Println(<-done)
	// Output:
	// <nil>
}
