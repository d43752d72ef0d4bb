package storekit

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/core/storage"
)

// Shop is an app, built by an adapter's test, whose POST /orders inserts an order through
// the transaction its request context carries (Backend.Insert) and answers 201, behind
// the framework's recovery middleware and the adapter.
type Shop struct {
	http.Handler
	*Backend
	Runs     atomic.Int64 // handler runs
	Inserted atomic.Int64 // inserts that succeeded inside a handler
}

// Failure is what the handler does after its insert on its first run; later runs succeed.
type Failure int

const (
	// Succeed answers 201.
	Succeed Failure = iota
	// Fail500 answers 500 the framework's way (Gin: c.AbortWithStatusJSON; Echo: a returned error).
	Fail500
	// Panic panics.
	Panic
)

// NewShop builds a Shop on b for one test.
type NewShop func(t *testing.T, b *Backend, fail Failure) *Shop

// RunHandlerTests runs, on every backend, the tests that an adapter's handler writes
// commit with the key: insert + completion commit together, a 500 or a panic after the
// insert leaves neither order nor key, 20 parallel duplicates commit one order.
func RunHandlerTests(t *testing.T, newShop NewShop) {
	for name, test := range map[string]func(*testing.T, NewShop){
		"InsertCommitsWithKey":         testInsertCommitsWithKey,
		"Handler500RollsBackInsert":    testHandler500RollsBackInsert,
		"PanicRollsBackInsert":         testPanicRollsBackInsert,
		"ParallelDuplicatesInsertOnce": testParallelDuplicatesInsertOnce,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, newShop)
		})
	}
}

func (s *Shop) post(t *testing.T, key string) reply {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":"book"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	return reply{status: rec.Code, header: rec.Result().Header, body: rec.Body.String()}
}

// reply is one answer of the shop.
type reply struct {
	status int
	header http.Header
	body   string
}

func (r reply) replayed() bool { return r.header.Get("Idempotent-Replayed") == "true" }

// check fails the test unless key has want committed orders and the key table holds
// exactly keys.
func (s *Shop) check(t *testing.T, key string, want int, keys map[string]string) {
	t.Helper()
	if n := s.Orders(t, key); n != want {
		t.Errorf("orders for %q: %d, want %d", key, n, want)
	}
	if got := s.Keys(t); fmt.Sprint(got) != fmt.Sprint(keys) {
		t.Errorf("key rows: %v, want %v", got, keys)
	}
}

// testInsertCommitsWithKey: the handler's insert through the request's transaction
// is committed with the key: after the 201 there is exactly one order and the key row is
// completed; the replay answers the same bytes and adds no order.
func testInsertCommitsWithKey(t *testing.T, newShop NewShop) {
	for _, be := range Backends {
		t.Run(be.Name, func(t *testing.T) {
			t.Parallel()
			s := newShop(t, be.Open(t), Succeed)
			first := s.post(t, "k1")
			if first.status != http.StatusCreated || first.replayed() {
				t.Fatalf("first: %d replayed=%t %s", first.status, first.replayed(), first.body)
			}
			s.check(t, "k1", 1, map[string]string{"k1": string(storage.StateCompleted)})

			again := s.post(t, "k1")
			if again.status != http.StatusCreated || !again.replayed() || again.body != first.body {
				t.Fatalf("replay: %d replayed=%t %s, want 201 replayed %s", again.status, again.replayed(), again.body, first.body)
			}
			if r := s.Runs.Load(); r != 1 {
				t.Errorf("handler ran %d times, want 1", r)
			}
			s.check(t, "k1", 1, map[string]string{"k1": string(storage.StateCompleted)})
		})
	}
}

// testHandler500RollsBackInsert: a handler that inserted and then answered 500 (Gin:
// c.AbortWithStatusJSON; Echo: a returned error) leaves neither the order nor the key; the retry with the same key
// runs again and commits exactly one order.
func testHandler500RollsBackInsert(t *testing.T, newShop NewShop) {
	for _, be := range Backends {
		t.Run(be.Name, func(t *testing.T) {
			t.Parallel()
			s := newShop(t, be.Open(t), Fail500)
			failed := s.post(t, "k1")
			if failed.status != http.StatusInternalServerError || failed.replayed() {
				t.Fatalf("failing run: %d replayed=%t %s", failed.status, failed.replayed(), failed.body)
			}
			if n := s.Inserted.Load(); n != 1 {
				t.Fatalf("the failing run inserted %d orders before answering, want 1", n)
			}
			s.check(t, "k1", 0, map[string]string{})

			retry := s.post(t, "k1")
			if retry.status != http.StatusCreated || retry.replayed() {
				t.Fatalf("retry: %d replayed=%t %s", retry.status, retry.replayed(), retry.body)
			}
			if r := s.Runs.Load(); r != 2 {
				t.Errorf("handler ran %d times, want 2", r)
			}
			s.check(t, "k1", 1, map[string]string{"k1": string(storage.StateCompleted)})
		})
	}
}

// testPanicRollsBackInsert: a handler that inserted and then panicked leaves neither
// the order nor the key, the framework's recovery answers 500, and the retry commits one order.
func testPanicRollsBackInsert(t *testing.T, newShop NewShop) {
	for _, be := range Backends {
		t.Run(be.Name, func(t *testing.T) {
			t.Parallel()
			s := newShop(t, be.Open(t), Panic)
			failed := s.post(t, "k1")
			if failed.status != http.StatusInternalServerError || failed.replayed() {
				t.Fatalf("panicking run: %d replayed=%t %s", failed.status, failed.replayed(), failed.body)
			}
			if n := s.Inserted.Load(); n != 1 {
				t.Fatalf("the panicking run inserted %d orders before panicking, want 1", n)
			}
			s.check(t, "k1", 0, map[string]string{})

			retry := s.post(t, "k1")
			if retry.status != http.StatusCreated || retry.replayed() {
				t.Fatalf("retry: %d replayed=%t %s", retry.status, retry.replayed(), retry.body)
			}
			s.check(t, "k1", 1, map[string]string{"k1": string(storage.StateCompleted)})
		})
	}
}

// testParallelDuplicatesInsertOnce: 20 identical requests at once commit one order.
// One of them runs the handler; the others replay its answer, or get 409 with
// Retry-After when the store's lock wait ran out first.
func testParallelDuplicatesInsertOnce(t *testing.T, newShop NewShop) {
	for _, be := range Backends {
		t.Run(be.Name, func(t *testing.T) {
			t.Parallel()
			s := newShop(t, be.Open(t), Succeed)
			const n = 20
			res := make([]reply, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range res {
				wg.Go(func() {
					<-start
					res[i] = s.post(t, "dup")
				})
			}
			close(start)
			wg.Wait()

			var original string
			firsts, replays, conflicts := 0, 0, 0
			for _, r := range res {
				switch {
				case r.status == http.StatusCreated && !r.replayed():
					firsts++
					original = r.body
				case r.status == http.StatusCreated:
					replays++
				case r.status == http.StatusConflict && r.header.Get("Retry-After") != "":
					conflicts++
				default:
					t.Errorf("unexpected answer %d %s", r.status, r.body)
				}
			}
			if firsts != 1 {
				t.Fatalf("%d original answers, want 1 (replays %d, conflicts %d)", firsts, replays, conflicts)
			}
			for _, r := range res {
				if r.replayed() && r.body != original {
					t.Errorf("replay %s differs from the original %s", r.body, original)
				}
			}
			if r := s.Runs.Load(); r != 1 {
				t.Errorf("handler ran %d times, want 1", r)
			}
			s.check(t, "dup", 1, map[string]string{"dup": string(storage.StateCompleted)})
			t.Logf("1 original, %d replays, %d conflicts", replays, conflicts)
		})
	}
}
