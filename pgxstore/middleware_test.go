package pgxstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgxstore"
)

// shop is an HTTP API creating orders behind the idem middleware, on a pgxstore in a
// schema of its own holding the key table and the business tables:
//
//	customers(id)                       -- customer 1 exists
//	orders(id, idem_key, amount, customer_id → customers, checked at COMMIT)
//	charges(idem_key), reservations(idem_key)   -- written by phases
type shop struct {
	t      *testing.T
	db     *pgxpool.Pool
	schema string
	store  *pgxstore.Store
	srv    *httptest.Server
	client *http.Client

	// before, when set, runs in the handler after the order is written and before the
	// response; a non-zero status it returns is the response.
	before func(r *http.Request, attempt int) int
	calls  atomic.Int64
}

func newShop(t *testing.T, iso pgx.TxIsoLevel, cfg core.Config, handler func(*shop) http.HandlerFunc) *shop {
	t.Helper()
	db := sharedPool(t)
	store, schema := newStore(t, db, pgxstore.WithIsolation(iso))
	return newShopOn(t, db, store, schema, cfg, handler)
}

// newShopOn is newShop on a pool and a migrated store of the caller's, whose key table is
// in schema.
func newShopOn(t *testing.T, db *pgxpool.Pool, store *pgxstore.Store, schema string, cfg core.Config, handler func(*shop) http.HandlerFunc) *shop {
	t.Helper()
	s := &shop{t: t, db: db, schema: schema, store: store}
	exec(t, db, fmt.Sprintf(`CREATE TABLE %[1]s.customers (id int PRIMARY KEY);
		INSERT INTO %[1]s.customers VALUES (1);
		CREATE TABLE %[1]s.orders (
			id bigserial PRIMARY KEY,
			idem_key text NOT NULL,
			amount int NOT NULL,
			customer_id int NOT NULL REFERENCES %[1]s.customers DEFERRABLE INITIALLY DEFERRED);
		CREATE TABLE %[1]s.charges (idem_key text NOT NULL);
		CREATE TABLE %[1]s.reservations (idem_key text NOT NULL)`, schema))

	if c, ok := cfg.Store.(*cutOff); ok {
		c.Store = store
	} else {
		cfg.Store = store
	}
	eng, err := core.New(cfg)
	require.NoError(t, err, "core.New")
	if handler == nil {
		handler = (*shop).createOrder
	}
	s.srv = httptest.NewServer(eng.Middleware(func(r *http.Request) string { return r.Header.Get("X-Account") })(handler(s)))
	tr := &http.Transport{MaxIdleConnsPerHost: 512}
	s.client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	t.Cleanup(func() {
		s.srv.Close()
		tr.CloseIdleConnections()
	})
	return s
}

type orderRequest struct {
	Amount   int `json:"amount"`
	Customer int `json:"customer"`
}

// createOrder inserts the order in the request's transaction and answers 201 with it.
func (s *shop) createOrder() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		attempt := int(s.calls.Add(1))
		var in orderRequest
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ctx := r.Context()
		op := core.MustOperation(ctx)
		var id int64
		err := pgxstore.MustTx(ctx).QueryRow(ctx,
			fmt.Sprintf(`INSERT INTO %s.orders (idem_key, amount, customer_id) VALUES ($1, $2, $3) RETURNING id`, s.schema),
			op.Key(), in.Amount, in.Customer).Scan(&id)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if s.before != nil {
			if status := s.before(r, attempt); status != 0 {
				http.Error(w, "failed on purpose", status)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", id))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d,"amount":%d,"attempt":%d}`, id, in.Amount, attempt)
	}
}

// reply is what the client got.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) replayed() bool { return r.header.Get("Idempotent-Replayed") == "true" }

func (r reply) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

// post sends POST /orders with key and body for account "acme".
func (s *shop) post(key, body string) reply {
	req, err := http.NewRequest(http.MethodPost, s.srv.URL+"/orders", strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("X-Account", "acme")
	resp, err := s.client.Do(req)
	if err != nil {
		return reply{status: -1, body: []byte(err.Error())}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{status: -1, body: []byte(err.Error())}
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

func (s *shop) orders(where string, args ...any) int {
	return count(s.t, s.db, fmt.Sprintf(`SELECT count(*) FROM %s.orders WHERE %s`, s.schema, where), args...)
}

func (s *shop) keys() int {
	return count(s.t, s.db, fmt.Sprintf(`SELECT count(*) FROM %s.idempotency_keys`, s.schema))
}

// isolationLevels runs f at each isolation level the store supports.
func isolationLevels(t *testing.T, f func(t *testing.T, iso pgx.TxIsoLevel)) {
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead} {
		t.Run(strings.ReplaceAll(string(iso), " ", "_"), func(t *testing.T) {
			t.Parallel()
			f(t, iso)
		})
	}
}

// checkReplies requires exactly one original 201, every other reply a byte-identical
// replay of it or a 409 with Retry-After, and returns the original and the counts.
func checkReplies(t *testing.T, replies []reply) (orig reply, replays, conflicts int) {
	t.Helper()
	var original *reply
	for i, r := range replies {
		switch {
		case r.status == http.StatusCreated && !r.replayed():
			if original != nil {
				t.Fatalf("two originals: %v and %v", original, r)
			}
			original = &replies[i]
		case r.status == http.StatusCreated:
			replays++
		case r.status == http.StatusConflict:
			if r.header.Get("Retry-After") == "" {
				t.Fatalf("409 without Retry-After: %v", r)
			}
			conflicts++
		default:
			t.Fatalf("unexpected reply %v", r)
		}
	}
	if original == nil {
		t.Fatalf("no original 201 among %d replies (%d replays, %d conflicts)", len(replies), replays, conflicts)
	}
	for _, r := range replies {
		if r.status == http.StatusCreated && r.replayed() {
			if !bytes.Equal(r.body, original.body) || r.header.Get("Location") != original.header.Get("Location") ||
				r.header.Get("Content-Type") != original.header.Get("Content-Type") {
				t.Fatalf("replay %v (Location %q) differs from the original %v (Location %q)",
					r, r.header.Get("Location"), *original, original.header.Get("Location"))
			}
		}
	}
	return *original, replays, conflicts
}

// TestMiddlewareParallelIdentical: 20 and 200 identical requests at once create one
// order; every client gets the original, a byte-identical replay, or 409 + Retry-After.
// The first request holds its transaction until the database shows the others waiting
// for it.
func TestMiddlewareParallelIdentical(t *testing.T) {
	t.Parallel()
	isolationLevels(t, func(t *testing.T, iso pgx.TxIsoLevel) {
		for _, n := range []int{20, 200} {
			// A pool of the test's own: the first request holds one connection, and up to
			// poolSize-1 twins can wait in the database at once.
			db := newPool(t, poolSize, nil)
			store, schema := newStore(t, db, pgxstore.WithIsolation(iso))
			// 200 requests queue for 16 connections: on a loaded machine the last of them
			// can wait past the default 5 s StoreTimeout for a connection and get a 503,
			// which is correct but not what this test is about.
			s := newShopOn(t, db, store, schema, core.Config{StoreTimeout: time.Minute}, nil)
			want := min(n-1, poolSize-1)
			s.before = func(r *http.Request, attempt int) int {
				if attempt != 1 {
					return 0
				}
				ctx := r.Context()
				var pid int32
				if err := pgxstore.MustTx(ctx).QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
					t.Errorf("the first request's backend: %v", err)
					return http.StatusInternalServerError
				}
				ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				defer cancel()
				if err := testdb.AwaitBlockedBy(ctx, pid, want); err != nil {
					t.Errorf("the twins never waited for the first request: %v", err)
					return http.StatusInternalServerError
				}
				return 0
			}
			key := fmt.Sprintf("parallel-%d", n)
			replies := make([]reply, n)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range replies {
				wg.Go(func() {
					<-start
					replies[i] = s.post(key, `{"amount": 100, "customer": 1}`)
				})
			}
			close(start)
			wg.Wait()
			_, replays, conflicts := checkReplies(t, replies)
			t.Logf("%d requests: 1 original, %d replays, %d conflicts", n, replays, conflicts)
			if got := s.orders("true"); got != 1 {
				t.Fatalf("%d identical requests created %d orders, want 1", n, got)
			}
			if r := s.post(key, `{"customer": 1, "amount": 100}`); r.status != http.StatusCreated || !r.replayed() {
				t.Fatalf("a later retry (same JSON, other key order) got %v, want a replay", r)
			}
		}
	})
}

// TestMiddlewareManyKeys: 50 keys with 8 duplicates each, all at once: 50 orders, one per
// key.
func TestMiddlewareManyKeys(t *testing.T) {
	t.Parallel()
	isolationLevels(t, func(t *testing.T, iso pgx.TxIsoLevel) {
		const keys, dups = 50, 8
		s := newShop(t, iso, core.Config{}, nil)
		replies := make([][]reply, keys)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for k := range replies {
			replies[k] = make([]reply, dups)
			for d := range dups {
				wg.Go(func() {
					<-start
					replies[k][d] = s.post(fmt.Sprintf("key-%02d", k), fmt.Sprintf(`{"amount": %d, "customer": 1}`, k))
				})
			}
		}
		close(start)
		wg.Wait()
		replays, conflicts := 0, 0
		for k := range replies {
			_, r, c := checkReplies(t, replies[k])
			replays, conflicts = replays+r, conflicts+c
		}
		t.Logf("%d keys × %d: %d originals, %d replays, %d conflicts", keys, dups, keys, replays, conflicts)
		if got := s.orders("true"); got != keys {
			t.Fatalf("%d keys × %d duplicates created %d orders, want %d", keys, dups, got, keys)
		}
		if got := count(t, s.db, fmt.Sprintf(`SELECT count(DISTINCT idem_key) FROM %s.orders`, s.schema)); got != keys {
			t.Fatalf("orders carry %d distinct keys, want %d", got, keys)
		}
	})
}

// TestMiddlewareHandlerError: a handler answering 500 after writing its order leaves
// neither the order nor the key; the retry with the same key creates one order.
func TestMiddlewareHandlerError(t *testing.T) {
	t.Parallel()
	isolationLevels(t, func(t *testing.T, iso pgx.TxIsoLevel) {
		s := newShop(t, iso, core.Config{}, nil)
		var fail atomic.Bool
		fail.Store(true)
		s.before = func(*http.Request, int) int {
			if fail.Load() {
				return http.StatusInternalServerError
			}
			return 0
		}
		if r := s.post("k", `{"amount": 5, "customer": 1}`); r.status != http.StatusInternalServerError {
			t.Fatalf("failing handler: got %v, want its 500", r)
		}
		if o, k := s.orders("true"), s.keys(); o != 0 || k != 0 {
			t.Fatalf("after a 500: %d orders and %d keys remain, want none", o, k)
		}
		fail.Store(false)
		r := s.post("k", `{"amount": 5, "customer": 1}`)
		if r.status != http.StatusCreated || r.replayed() {
			t.Fatalf("retry after a 500: got %v, want an original 201", r)
		}
		if got := s.orders("idem_key = 'k'"); got != 1 {
			t.Fatalf("after the retry: %d orders, want 1", got)
		}
		if again := s.post("k", `{"amount": 5, "customer": 1}`); again.status != http.StatusCreated || !again.replayed() ||
			!bytes.Equal(again.body, r.body) {
			t.Fatalf("third request: got %v, want a replay of %v", again, r)
		}
	})
}

// TestMiddlewarePanic: a panicking handler rolls back (the panic reaches the server's
// recovery), so a retry creates the order once.
func TestMiddlewarePanic(t *testing.T) {
	t.Parallel()
	s := newShop(t, pgx.ReadCommitted, core.Config{}, nil)
	var panicked atomic.Bool
	s.before = func(*http.Request, int) int {
		if !panicked.Swap(true) {
			panic(http.ErrAbortHandler) // net/http's own "abort quietly" panic
		}
		return 0
	}
	if r := s.post("k", `{"amount": 1, "customer": 1}`); r.status == http.StatusCreated {
		t.Fatalf("a panicking handler's request got %v", r)
	}
	if o, k := s.orders("true"), s.keys(); o != 0 || k != 0 {
		t.Fatalf("after a panic: %d orders and %d keys remain, want none", o, k)
	}
	if r := s.post("k", `{"amount": 1, "customer": 1}`); r.status != http.StatusCreated || r.replayed() {
		t.Fatalf("retry after a panic: got %v", r)
	}
	if got := s.orders("true"); got != 1 {
		t.Fatalf("%d orders, want 1", got)
	}
}

// TestMiddlewareCommitFailure: an order whose deferred foreign key fails at COMMIT gets a
// 5xx, never the handler's 201; neither the order nor the key remains.
func TestMiddlewareCommitFailure(t *testing.T) {
	t.Parallel()
	isolationLevels(t, func(t *testing.T, iso pgx.TxIsoLevel) {
		s := newShop(t, iso, core.Config{}, nil)
		r := s.post("k", `{"amount": 5, "customer": 999}`) // no such customer
		if r.status < 500 {
			t.Fatalf("an order failing at COMMIT got %v, want a 5xx", r)
		}
		if r.header.Get("Location") != "" {
			t.Fatalf("the failed request leaked the handler's Location %q", r.header.Get("Location"))
		}
		if o, k := s.orders("true"), s.keys(); o != 0 || k != 0 {
			t.Fatalf("after a failed commit: %d orders and %d keys remain, want none", o, k)
		}
		if r := s.post("k", `{"amount": 5, "customer": 999}`); r.status < 500 {
			t.Fatalf("the retry (still failing at COMMIT) got %v", r)
		}
	})
}

// TestMiddlewareLockWaitExpiry: a duplicate arriving while the first request's
// transaction is open waits for the lock wait, then gets 409 + Retry-After.
func TestMiddlewareLockWaitExpiry(t *testing.T) {
	t.Parallel()
	isolationLevels(t, func(t *testing.T, iso pgx.TxIsoLevel) {
		s := newShop(t, iso, core.Config{LockWait: 200 * time.Millisecond}, nil)
		holding, done := make(chan struct{}), make(chan struct{})
		s.before = func(_ *http.Request, attempt int) int {
			if attempt == 1 {
				close(holding)
				<-done
			}
			return 0
		}
		first := make(chan reply, 1)
		go func() { first <- s.post("k", `{"amount": 5, "customer": 1}`) }()
		<-holding
		for _, body := range []string{`{"amount": 5, "customer": 1}`, `{"amount": 6, "customer": 1}`} {
			r := s.post("k", body)
			if r.status != http.StatusConflict || r.header.Get("Retry-After") == "" {
				close(done)
				t.Fatalf("duplicate while the first holds its transaction: got %v, want 409 with Retry-After", r)
			}
		}
		close(done)
		orig := <-first
		if orig.status != http.StatusCreated || orig.replayed() {
			t.Fatalf("first request: got %v", orig)
		}
		if r := s.post("k", `{"amount": 5, "customer": 1}`); r.status != http.StatusCreated || !bytes.Equal(r.body, orig.body) {
			t.Fatalf("retry after the first finished: got %v, want a replay of %v", r, orig)
		}
		if r := s.post("k", `{"amount": 6, "customer": 1}`); r.status != http.StatusUnprocessableEntity {
			t.Fatalf("same key, other body: got %v, want 422", r)
		}
	})
}

// TestMiddlewareTakeover: phased mode. The first attempt commits its "charge" phase, then
// stalls past its lease, cut off from the store (its renewals fail); a retry takes the key
// over, resumes after "charge" and completes; the stale attempt's next phase fails with
// ErrLeaseLost and its client gets 409. One charge, one reservation, one order.
func TestMiddlewareTakeover(t *testing.T) {
	t.Parallel()
	const lease = 300 * time.Millisecond
	stalled, resume := make(chan struct{}), make(chan struct{})
	staleErr := make(chan error, 1)
	handler := func(s *shop) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			attempt := s.calls.Add(1)
			ctx := r.Context()
			op := core.MustOperation(ctx)
			insert := func(table string) func(ctx context.Context) error {
				return func(ctx context.Context) error {
					_, err := pgxstore.MustTx(ctx).Exec(ctx, fmt.Sprintf(`INSERT INTO %s.%s VALUES ($1)`, s.schema, table), op.Key())
					return err
				}
			}
			if err := op.Phase(ctx, "charge", insert("charges")); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			if attempt == 1 {
				close(stalled)
				<-resume
			}
			if err := op.Phase(ctx, "reserve", insert("reservations")); err != nil {
				if attempt == 1 {
					staleErr <- err
				}
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			var id int64
			err := pgxstore.MustTx(ctx).QueryRow(ctx, fmt.Sprintf(
				`INSERT INTO %s.orders (idem_key, amount, customer_id) VALUES ($1, 1, 1) RETURNING id`, s.schema),
				op.Key()).Scan(&id)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"id":%d,"attempt":%d,"resumed":%v}`, id, attempt, op.Resumed())
		}
	}
	s := newShop(t, pgx.ReadCommitted, core.Config{Store: &cutOff{}, Mode: core.ModePhased, Lease: lease}, handler)

	first := make(chan reply, 1)
	go func() { first <- s.post("k", `{}`) }()
	<-stalled
	if r := s.post("k", `{}`); r.status != http.StatusConflict {
		close(resume)
		t.Fatalf("retry while the lease is live: got %v, want 409", r)
	}
	waitLeaseEnd(t, s.db, s.schema, "acme", "k")

	retry := s.post("k", `{}`)
	close(resume)
	stale := <-first
	if retry.status != http.StatusCreated || !strings.Contains(string(retry.body), `"resumed":true`) {
		t.Fatalf("retry after the lease ran out: got %v, want 201 from a resumed attempt", retry)
	}
	if err := <-staleErr; !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("the stale attempt's phase returned %v, want ErrLeaseLost", err)
	}
	if stale.status != http.StatusConflict {
		t.Fatalf("the stale attempt's client got %v, want 409", stale)
	}
	for table, want := range map[string]int{"charges": 1, "reservations": 1, "orders": 1} {
		if got := count(t, s.db, fmt.Sprintf(`SELECT count(*) FROM %s.%s`, s.schema, table)); got != want {
			t.Fatalf("%s: %d rows, want %d", table, got, want)
		}
	}
	if r := s.post("k", `{}`); r.status != http.StatusCreated || !r.replayed() || !bytes.Equal(r.body, retry.body) {
		t.Fatalf("a later retry got %v, want a replay of %v", r, retry)
	}
}

// TestMiddlewarePathNotUTF8: a client's path that decodes to bytes PostgreSQL's text
// refuses (%FF, %00) is still kept, for diagnostics, in a form the key table holds: the
// request runs and replays, where the store used to fail it as a 503 for ever.
func TestMiddlewarePathNotUTF8(t *testing.T) {
	t.Parallel()
	for _, mode := range []core.Mode{core.ModeAtomic, core.ModePhased} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			s := newShop(t, pgx.ReadCommitted, core.Config{Mode: mode}, nil)
			post := func() reply {
				req, err := http.NewRequest(http.MethodPost, s.srv.URL+"/orders/%FF%00x", strings.NewReader(`{"amount":5,"customer":1}`))
				require.NoError(t, err)
				req.Header.Set("Idempotency-Key", "k")
				req.Header.Set("X-Account", "acme")
				resp, err := s.client.Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				return reply{status: resp.StatusCode, header: resp.Header, body: b}
			}
			first := post()
			require.Equal(t, http.StatusCreated, first.status, "first: %v", first)
			again := post()
			require.Equal(t, http.StatusCreated, again.status, "retry: %v", again)
			require.True(t, again.replayed(), "the retry is a replay")
			require.Equal(t, first.body, again.body)
			var path string
			require.NoError(t, s.db.QueryRow(t.Context(), fmt.Sprintf(`SELECT path FROM %s.idempotency_keys`, s.schema)).Scan(&path))
			require.Equal(t, "/orders/%FF%00x", path, "the path as sent")
		})
	}
}

// cutOff is a store whose fresh claims' locks cannot renew their lease: their Renew fails
// as a network partition would, while takeovers' renewals go through. It stands for a
// worker cut off from the database. newShopOn fills in the store.
type cutOff struct{ storage.Store }

func (c *cutOff) Claim(ctx context.Context, cl storage.Claim) (storage.Claimed, error) {
	claimed, err := c.Store.Claim(ctx, cl)
	if claimed.Lock != nil && !claimed.Lock.Resumed() {
		claimed.Lock = cutOffLock{claimed.Lock}
	}
	return claimed, err
}

type cutOffLock struct{ storage.Lock }

func (cutOffLock) Renew(context.Context) error {
	return errors.New("the worker is cut off from the database")
}
