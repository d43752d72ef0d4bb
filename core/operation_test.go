package core_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/core/storage"
)

// TestPhasedResumeSkipsCommittedPhases: an attempt that fails after its first phase
// keeps the recovery point; the retry resumes after it and runs each phase once.
func TestPhasedResumeSkipsCommittedPhases(t *testing.T) {
	t.Parallel()
	var charges, payments atomic.Int64
	var crash atomic.Bool
	crash.Store(true)
	var mu sync.Mutex
	var seen []string
	hs := newHarness(t, core.Config{Mode: core.ModePhased}, func(w http.ResponseWriter, r *http.Request) {
		op := core.MustOperation(r.Context())
		mu.Lock()
		seen = append(seen, op.RecoveryPoint())
		mu.Unlock()
		if err := op.Phase(r.Context(), "charge_created", func(context.Context) error {
			if op.DerivedKey("charge") != op.Key()+":charge" {
				t.Errorf("DerivedKey = %q", op.DerivedKey("charge"))
			}
			charges.Add(1)
			return nil
		}); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		if crash.Load() {
			panic("crash after charge_created")
		}
		if err := op.Phase(r.Context(), "finished", func(context.Context) error { payments.Add(1); return nil }); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.WriteHeader(201)
	})
	func() {
		defer func() { _ = recover() }()
		hs.do("POST", "pay", orderJSON)
	}()
	crash.Store(false)
	w := hs.do("POST", "pay", orderJSON)
	if w.Code != 201 || w.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("resumed attempt: %d", w.Code)
	}
	if charges.Load() != 1 || payments.Load() != 1 {
		t.Fatalf("charges %d payments %d, want 1 and 1", charges.Load(), payments.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0] != storage.RecoveryStarted || seen[1] != "charge_created" {
		t.Fatalf("recovery points seen by the handler: %v", seen)
	}
}

// TestStaleWorkerLosesLease: a worker whose lease expired and was taken over cannot
// commit a phase; the engine answers it 409 whatever the handler wrote.
func TestStaleWorkerLosesLease(t *testing.T) {
	t.Parallel()
	// The store's clock is moved past the lease instead of waiting for it.
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	store := memstore.New(memstore.WithClock(func() time.Time { return time.Unix(0, clock.Load()) }))
	entered := make(chan struct{}, 2)
	proceed := make(chan struct{})
	var phaseErr atomic.Value
	eng, err := core.New(core.Config{Store: store, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	h := eng.Middleware(func(*http.Request) string { return "s" })(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := core.MustOperation(r.Context())
		if calls.Add(1) == 1 {
			entered <- struct{}{}
			<-proceed // the lease runs out while this worker stalls
		}
		if err := op.Phase(r.Context(), "step", func(context.Context) error { return nil }); err != nil {
			phaseErr.Store(err)
			w.WriteHeader(201) // a careless handler ignores the error: the engine must not
			return
		}
		w.WriteHeader(201)
	}))
	req := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/p", nil)
		r.Header.Set("Idempotency-Key", "k")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	stale := make(chan *httptest.ResponseRecorder)
	go func() { stale <- req() }()
	<-entered
	clock.Add(int64(2 * time.Minute)) // the stalled worker's lease runs out
	if w := req(); w.Code != 201 {    // takes over the expired lease and completes
		t.Fatalf("taking-over worker: %d", w.Code)
	}
	close(proceed)
	w := <-stale
	if w.Code != http.StatusConflict {
		t.Fatalf("stale worker answered %d, want 409", w.Code)
	}
	if err, _ := phaseErr.Load().(error); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("stale phase error %v, want storage.ErrLeaseLost", err)
	}
	if w := req(); w.Code != 201 || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after both: %d, want the replay", w.Code)
	}
}

func TestOperationFromWithoutOperation(t *testing.T) {
	t.Parallel()
	if op, ok := core.OperationFromContext(context.Background()); ok || op != nil {
		t.Fatalf("OperationFromContext = %v, %t; want nil, false", op, ok)
	}
	defer func() {
		if err, _ := recover().(error); !errors.Is(err, core.ErrNoOperation) {
			t.Fatalf("MustOperation panicked with %v, want an error wrapping ErrNoOperation", err)
		}
	}()
	core.MustOperation(context.Background())
}
