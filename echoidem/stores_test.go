package echoidem_test

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/echoidem"
	"github.com/idemkit/idem/internal/storekit"
)

// The tests in this file run an Echo handler that inserts an order through the transaction
// the request context carries, on real stores: pgxstore on PostgreSQL, gormstore on
// PostgreSQL and on SQLite. Each test gets a schema or file of its own, holding the key
// table (idempotency_keys, the stores' default) and the business table orders.

// shop is an Echo app whose POST /orders inserts an order through
// c.Request().Context()'s transaction and answers 201, behind middleware.Recover and
// echoidem.
type shop struct {
	http.Handler
	*storekit.Backend
	runs     atomic.Int64 // handler runs
	inserted atomic.Int64 // inserts that succeeded inside a handler
}

// failure is what the handler does after its insert on its first run: nothing, return
// an error (Echo's 500 page), or panic. Later runs succeed.
type failure int

const (
	succeed failure = iota
	return500
	panicking
)

func newShop(t *testing.T, b *storekit.Backend, fail failure) *shop {
	t.Helper()
	s := &shop{Backend: b}
	e := newEcho()
	e.Use(middleware.Recover())
	e.Use(echoidem.NewWithConfig(echoidem.Config{
		Scope:  func(echo.Context) string { return "tenant" },
		Config: core.Config{Store: b.Store},
	}))
	e.POST("/orders", func(c echo.Context) error {
		run := s.runs.Add(1)
		ctx := c.Request().Context()
		id, err := b.Insert(ctx, core.OperationFrom(ctx).Key())
		if err != nil {
			return err
		}
		s.inserted.Add(1)
		if run == 1 {
			switch fail {
			case return500:
				return errors.New("payment provider down")
			case panicking:
				panic("after the insert")
			}
		}
		return c.JSON(http.StatusCreated, map[string]int64{"id": id, "run": run})
	})
	s.Handler = e
	return s
}

func (s *shop) post(t *testing.T, key string) resp {
	t.Helper()
	return do(t, s, http.MethodPost, "/orders", key, "", `{"item":"book"}`)
}

// check fails the test unless key has want committed orders and the key table holds
// exactly keys.
func (s *shop) check(t *testing.T, key string, want int, keys map[string]string) {
	t.Helper()
	if n := s.Orders(t, key); n != want {
		t.Errorf("orders for %q: %d, want %d", key, n, want)
	}
	if got := s.Keys(t); fmt.Sprint(got) != fmt.Sprint(keys) {
		t.Errorf("key rows: %v, want %v", got, keys)
	}
}

// TestStoreInsertCommitsWithKey: the handler's insert through the request's transaction
// is committed with the key: after the 201 there is exactly one order and the key row is
// completed; the replay answers the same bytes and adds no order.
func TestStoreInsertCommitsWithKey(t *testing.T) {
	t.Parallel()
	for _, be := range storekit.Backends {
		t.Run(be.Name, func(t *testing.T) {
			t.Parallel()
			s := newShop(t, be.Open(t), succeed)
			first := s.post(t, "k1")
			if first.status != http.StatusCreated || first.replayed() {
				t.Fatalf("first: %d replayed=%t %s", first.status, first.replayed(), first.body)
			}
			s.check(t, "k1", 1, map[string]string{"k1": string(core.StateCompleted)})

			again := s.post(t, "k1")
			if again.status != http.StatusCreated || !again.replayed() || again.body != first.body {
				t.Fatalf("replay: %d replayed=%t %s, want 201 replayed %s", again.status, again.replayed(), again.body, first.body)
			}
			if r := s.runs.Load(); r != 1 {
				t.Errorf("handler ran %d times, want 1", r)
			}
			s.check(t, "k1", 1, map[string]string{"k1": string(core.StateCompleted)})
		})
	}
}

// TestStoreHandler500RollsBackInsert: a handler that inserted and then returned an error
// (Echo's 500 page) leaves neither the order nor the key; the retry with the same key
// runs again and commits exactly one order.
func TestStoreHandler500RollsBackInsert(t *testing.T) {
	t.Parallel()
	for _, be := range storekit.Backends {
		t.Run(be.Name, func(t *testing.T) {
			t.Parallel()
			s := newShop(t, be.Open(t), return500)
			failed := s.post(t, "k1")
			if failed.status != http.StatusInternalServerError || failed.replayed() {
				t.Fatalf("failing run: %d replayed=%t %s", failed.status, failed.replayed(), failed.body)
			}
			if n := s.inserted.Load(); n != 1 {
				t.Fatalf("the failing run inserted %d orders before answering, want 1", n)
			}
			s.check(t, "k1", 0, map[string]string{})

			retry := s.post(t, "k1")
			if retry.status != http.StatusCreated || retry.replayed() {
				t.Fatalf("retry: %d replayed=%t %s", retry.status, retry.replayed(), retry.body)
			}
			if r := s.runs.Load(); r != 2 {
				t.Errorf("handler ran %d times, want 2", r)
			}
			s.check(t, "k1", 1, map[string]string{"k1": string(core.StateCompleted)})
		})
	}
}

// TestStorePanicRollsBackInsert: a handler that inserted and then panicked leaves neither
// the order nor the key, middleware.Recover answers 500, and the retry commits one order.
func TestStorePanicRollsBackInsert(t *testing.T) {
	t.Parallel()
	for _, be := range storekit.Backends {
		t.Run(be.Name, func(t *testing.T) {
			t.Parallel()
			s := newShop(t, be.Open(t), panicking)
			failed := s.post(t, "k1")
			if failed.status != http.StatusInternalServerError || failed.replayed() {
				t.Fatalf("panicking run: %d replayed=%t %s", failed.status, failed.replayed(), failed.body)
			}
			if n := s.inserted.Load(); n != 1 {
				t.Fatalf("the panicking run inserted %d orders before panicking, want 1", n)
			}
			s.check(t, "k1", 0, map[string]string{})

			retry := s.post(t, "k1")
			if retry.status != http.StatusCreated || retry.replayed() {
				t.Fatalf("retry: %d replayed=%t %s", retry.status, retry.replayed(), retry.body)
			}
			s.check(t, "k1", 1, map[string]string{"k1": string(core.StateCompleted)})
		})
	}
}

// TestStoreParallelDuplicatesInsertOnce: 20 identical requests at once commit one order.
// One of them runs the handler; the others replay its answer, or get 409 with
// Retry-After when the store's lock wait ran out first.
func TestStoreParallelDuplicatesInsertOnce(t *testing.T) {
	t.Parallel()
	for _, be := range storekit.Backends {
		t.Run(be.Name, func(t *testing.T) {
			t.Parallel()
			s := newShop(t, be.Open(t), succeed)
			const n = 20
			res := make([]resp, n)
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
			if r := s.runs.Load(); r != 1 {
				t.Errorf("handler ran %d times, want 1", r)
			}
			s.check(t, "dup", 1, map[string]string{"dup": string(core.StateCompleted)})
			t.Logf("1 original, %d replays, %d conflicts", replays, conflicts)
		})
	}
}
