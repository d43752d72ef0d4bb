package gormstore_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/internal/testdb"
)

// createOrder is the handler under test: it writes an order through the request's
// transaction; with X-Fail it writes it and then answers 500.
func createOrder(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Ref    string `json:"ref"`
		Amount int    `json:"amount"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o := order{Ref: in.Ref, Amount: in.Amount}
	if err := gormstore.MustDB(r.Context()).Create(&o).Error; err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if r.Header.Get("X-Fail") != "" {
		http.Error(w, "the warehouse is on fire", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/orders/%d", o.ID))
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":%d,"ref":%q,"amount":%d}`, o.ID, o.Ref, o.Amount)
}

// app is the handler behind core's net/http middleware, on a fresh database of d.
type app struct {
	db    *gorm.DB
	table string
	h     http.Handler
}

func newApp(t *testing.T, d dialect) *app {
	t.Helper()
	db := withOrders(t, d.open(t))
	table := testdb.Name("keys")
	store := gormstore.New(db, gormstore.WithTable(table))
	if err := store.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	eng, err := core.New(core.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	mw := eng.Middleware(func(*http.Request) string { return "tenant" })
	return &app{db: db, table: table, h: mw(http.HandlerFunc(createOrder))}
}

func (a *app) post(key, body string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	a.h.ServeHTTP(w, r)
	return w
}

func (a *app) keys(t *testing.T) int64 {
	t.Helper()
	var n int64
	if err := a.db.Table(a.table).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMiddleware drives core's net/http middleware with a GORM handler on each dialect,
// in the engine's default mode for the store (atomic).
func TestMiddleware(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			t.Run("ParallelIdentical", func(t *testing.T) {
				t.Parallel()
				a := newApp(t, d)
				const n = 20
				res := make([]*httptest.ResponseRecorder, n)
				var wg sync.WaitGroup
				for i := range res {
					wg.Go(func() { res[i] = a.post("same", `{"ref":"same","amount":5}`) })
				}
				wg.Wait()
				original, replays, conflicts := 0, 0, 0
				var body string
				for _, w := range res {
					switch {
					case w.Code == http.StatusCreated && w.Header().Get("Idempotent-Replayed") == "":
						original++
						body = w.Body.String()
					case w.Code == http.StatusCreated:
						replays++
					case w.Code == http.StatusConflict && w.Header().Get("Retry-After") != "":
						conflicts++
					default:
						t.Fatalf("unexpected response %d %q", w.Code, w.Body)
					}
				}
				for _, w := range res {
					if w.Code == http.StatusCreated && w.Body.String() != body {
						t.Fatalf("replay %q differs from the original %q", w.Body, body)
					}
				}
				if original != 1 {
					t.Fatalf("%d original responses (replays %d, conflicts %d), want 1", original, replays, conflicts)
				}
				if rows := countOrders(t, a.db, "same"); rows != 1 {
					t.Fatalf("%d orders, want 1", rows)
				}
				t.Logf("%d requests: 1 original, %d replays, %d conflicts", n, replays, conflicts)
			})
			t.Run("KeysTimesDuplicates", func(t *testing.T) {
				t.Parallel()
				a := newApp(t, d)
				const keys, dups = 20, 5
				bodies := make(map[string]map[string]bool) // key → 201 bodies seen
				var mu sync.Mutex
				send := func(k int) int {
					key := fmt.Sprint("key-", k)
					w := a.post(key, fmt.Sprintf(`{"ref":%q,"amount":%d}`, key, k))
					mu.Lock()
					defer mu.Unlock()
					if w.Code == http.StatusCreated {
						if bodies[key] == nil {
							bodies[key] = map[string]bool{}
						}
						bodies[key][w.Body.String()] = true
					} else if w.Code != http.StatusConflict {
						t.Errorf("%s: unexpected response %d %q", key, w.Code, w.Body)
					}
					return w.Code
				}
				var wg sync.WaitGroup
				for k := range keys {
					for range dups {
						wg.Go(func() { send(k) })
					}
				}
				wg.Wait()
				// A client whose every attempt got 409 retries. Every request has ended by
				// now, so nothing holds its key: the retry runs.
				for k := range keys {
					if bodies[fmt.Sprint("key-", k)] == nil {
						if code := send(k); code != http.StatusCreated {
							t.Fatalf("key-%d: the retry after every request ended got %d, want 201", k, code)
						}
					}
				}
				for key, seen := range bodies {
					if len(seen) != 1 {
						t.Errorf("%s answered with %d different bodies: %v", key, len(seen), seen)
					}
				}
				if rows := countOrders(t, a.db, ""); rows != keys {
					t.Fatalf("%d orders, want %d", rows, keys)
				}
			})
			t.Run("HandlerErrorLeavesNothing", func(t *testing.T) {
				t.Parallel()
				a := newApp(t, d)
				body := `{"ref":"fail","amount":1}`
				if w := a.post("k", body, "X-Fail", "1"); w.Code != http.StatusInternalServerError {
					t.Fatalf("failing handler: %d %q, want 500", w.Code, w.Body)
				}
				if rows, keys := countOrders(t, a.db, ""), a.keys(t); rows != 0 || keys != 0 {
					t.Fatalf("after a 500: %d orders and %d keys, want none", rows, keys)
				}
				if w := a.post("k", body); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "" {
					t.Fatalf("retry after a 500: %d %q, want a fresh 201", w.Code, w.Body)
				}
				if w := a.post("k", body); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "true" {
					t.Fatalf("second retry: %d %q, want a replayed 201", w.Code, w.Body)
				}
				if rows, keys := countOrders(t, a.db, ""), a.keys(t); rows != 1 || keys != 1 {
					t.Fatalf("after the retries: %d orders and %d keys, want 1 and 1", rows, keys)
				}
			})
			t.Run("Mismatch", func(t *testing.T) {
				t.Parallel()
				a := newApp(t, d)
				if w := a.post("k", `{"ref":"m","amount":1}`); w.Code != http.StatusCreated {
					t.Fatalf("first: %d %q", w.Code, w.Body)
				}
				w := a.post("k", `{"ref":"m","amount":999}`)
				if w.Code != http.StatusUnprocessableEntity {
					t.Fatalf("same key, other body: %d %q, want 422", w.Code, w.Body)
				}
				if rows := countOrders(t, a.db, ""); rows != 1 {
					t.Fatalf("%d orders, want 1", rows)
				}
			})
		})
	}
}
