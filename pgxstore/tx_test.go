package pgxstore_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/seamtest"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgxstore"
)

func testClaim(key string, mode storage.Mode) storage.Claim {
	fp := sha256.Sum256([]byte("POST /things\n" + key))
	return storage.Claim{Scope: "acme", Key: key, Fingerprint: fp[:], Method: http.MethodPost, Path: "/things",
		Mode: mode, Lease: time.Minute, LockWait: time.Second, Retention: 24 * time.Hour}
}

func mustLock(t *testing.T, store storage.Store, c storage.Claim) storage.Lock {
	t.Helper()
	lock, rec, err := seamtest.Split(store.Claim(t.Context(), c))
	if err != nil || lock == nil {
		t.Fatalf("claim %q: lock %v, record %+v, err %v", c.Key, lock, rec, err)
	}
	t.Cleanup(func() { _ = lock.Release(context.Background()) })
	return lock
}

// thingsTable creates schema.things(v text) and returns its qualified name.
func thingsTable(t *testing.T, db pgxstore.DB, schema string) string {
	t.Helper()
	table := schema + ".things"
	exec(t, db, "CREATE TABLE "+table+" (v text NOT NULL)")
	return table
}

func insertThing(ctx context.Context, table, v string) error {
	_, err := pgxstore.MustTx(ctx).Exec(ctx, "INSERT INTO "+table+" (v) VALUES ($1)", v)
	return err
}

func things(t *testing.T, db pgxstore.DB, table string) string {
	t.Helper()
	var s string
	if err := db.QueryRow(context.Background(), "SELECT coalesce(string_agg(v, ',' ORDER BY v), '') FROM "+table).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestTxFromContext: Tx panics with ErrNoTx and TxFromContext reports false without a
// transaction; WithTx puts one in.
func TestTxFromContext(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	if got, ok := pgxstore.TxFromContext(ctx); ok || got != nil {
		t.Fatalf("TxFromContext without a transaction = %v, %t; want nil, false", got, ok)
	}
	func() {
		defer func() {
			p := recover()
			if err, _ := p.(error); !errors.Is(err, pgxstore.ErrNoTx) || !strings.Contains(err.Error(), "idem middleware") {
				t.Fatalf("Tx without a transaction: recovered %v, want ErrNoTx naming the middleware", p)
			}
		}()
		pgxstore.MustTx(ctx)
	}()

	tx, err := sharedPool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	wctx := pgxstore.WithTx(ctx, tx)
	if got := pgxstore.MustTx(wctx); got != tx {
		t.Fatalf("Tx(WithTx(ctx, tx)) = %v, want tx", got)
	}
	if got, ok := pgxstore.TxFromContext(wctx); got != tx || !ok {
		t.Fatalf("TxFromContext(WithTx(ctx, tx)) = %v, %t", got, ok)
	}
}

// TestAtomicTx: the handler's transaction is the claim's; the handler cannot end it; its
// writes commit with Complete and vanish with Release; after the lock ends the
// transaction is closed.
func TestAtomicTx(t *testing.T) {
	t.Parallel()
	db := sharedPool(t)
	store, schema := newStore(t, db)
	table := thingsTable(t, db, schema)

	lock := mustLock(t, store, testClaim("released", storage.ModeAtomic))
	ctx := lock.Context(t.Context())
	if err := insertThing(ctx, table, "released"); err != nil {
		t.Fatal(err)
	}
	if err := pgxstore.MustTx(ctx).Commit(ctx); !errors.Is(err, pgxstore.ErrTxOwned) {
		t.Fatalf("handler Commit: %v, want ErrTxOwned", err)
	}
	if err := pgxstore.MustTx(ctx).Rollback(ctx); !errors.Is(err, pgxstore.ErrTxOwned) {
		t.Fatalf("handler Rollback: %v, want ErrTxOwned", err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pgxstore.MustTx(ctx).Exec(ctx, "SELECT 1"); !errors.Is(err, pgx.ErrTxClosed) {
		t.Fatalf("Exec after Release: %v, want ErrTxClosed", err)
	}

	lock = mustLock(t, store, testClaim("completed", storage.ModeAtomic))
	ctx = lock.Context(t.Context())
	tx := pgxstore.MustTx(ctx)
	if err := insertThing(ctx, table, "completed"); err != nil {
		t.Fatal(err)
	}
	// A nested transaction is the handler's own: a savepoint it may roll back.
	nested, err := tx.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nested.Exec(ctx, "INSERT INTO "+table+" (v) VALUES ('nested')"); err != nil {
		t.Fatal(err)
	}
	if err := nested.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lock.Complete(ctx, &storage.Response{Status: http.StatusCreated}); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); !errors.Is(err, pgx.ErrTxClosed) {
		t.Fatalf("Exec after Complete: %v, want ErrTxClosed", err)
	}
	if err := tx.QueryRow(ctx, "SELECT 1").Scan(new(int)); !errors.Is(err, pgx.ErrTxClosed) {
		t.Fatalf("QueryRow after Complete: %v, want ErrTxClosed", err)
	}
	if got := things(t, db, table); got != "completed" {
		t.Fatalf("things = %q, want only the completed request's row", got)
	}
	if err := lock.Complete(ctx, &storage.Response{Status: http.StatusCreated}); err == nil {
		t.Fatal("a second Complete succeeded")
	}
}

// TestAtomicPhase: in atomic mode a phase runs under a savepoint of the claim's
// transaction: a failed phase's writes go, the request's others stay.
func TestAtomicPhase(t *testing.T) {
	t.Parallel()
	db := sharedPool(t)
	store, schema := newStore(t, db)
	table := thingsTable(t, db, schema)
	lock := mustLock(t, store, testClaim("k", storage.ModeAtomic))
	ctx := lock.Context(t.Context())
	if err := insertThing(ctx, table, "before"); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := lock.Phase(ctx, "fails", func(ctx context.Context) error {
		if err := insertThing(ctx, table, "failed-phase"); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("failing phase: %v, want its error", err)
	}
	if err := lock.Phase(ctx, "works", func(ctx context.Context) error { return insertThing(ctx, table, "phase") }); err != nil {
		t.Fatal(err)
	}
	if lock.RecoveryPoint() != "works" {
		t.Fatalf("recovery point %q, want works", lock.RecoveryPoint())
	}
	if err := lock.Complete(ctx, &storage.Response{Status: http.StatusOK}); err != nil {
		t.Fatal(err)
	}
	if got := things(t, db, table); got != "before,phase" {
		t.Fatalf("things = %q, want before,phase", got)
	}
}

// TestPhasedTx: phased mode. Each phase's writes commit with the phase (a failed phase's
// roll back); the final transaction begins on first use, commits with Complete, rolls back
// with Release; a phase after it is open is refused.
func TestPhasedTx(t *testing.T) {
	t.Parallel()
	db := newPool(t, 1, nil) // one connection: nothing may need a second
	store, schema := newStore(t, db)
	check := sharedPool(t) // the test's own reads
	table := thingsTable(t, db, schema)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	lock := mustLock(t, store, testClaim("k", storage.ModePhased))
	lctx := lock.Context(ctx)
	if err := lock.Phase(lctx, "p1", func(ctx context.Context) error { return insertThing(ctx, table, "p1") }); err != nil {
		t.Fatal(err)
	}
	if got := things(t, check, table); got != "p1" {
		t.Fatalf("after phase p1: things = %q, want p1 committed", got)
	}
	boom := errors.New("boom")
	err := lock.Phase(lctx, "p2", func(ctx context.Context) error {
		if err := insertThing(ctx, table, "p2"); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) || lock.RecoveryPoint() != "p1" {
		t.Fatalf("failing phase: err %v, point %q; want boom, p1", err, lock.RecoveryPoint())
	}
	if err := insertThing(lctx, table, "final"); err != nil {
		t.Fatal(err)
	}
	if got := things(t, check, table); got != "p1" {
		t.Fatalf("final write visible before Complete: things = %q", got)
	}
	if err := lock.Phase(lctx, "late", func(context.Context) error { return nil }); err == nil ||
		!strings.Contains(err.Error(), "final transaction") {
		t.Fatalf("phase after the final transaction opened: %v, want a refusal", err)
	}
	if err := lock.Complete(lctx, &storage.Response{Status: http.StatusOK}); err != nil {
		t.Fatal(err)
	}
	if got := things(t, check, table); got != "final,p1" {
		t.Fatalf("after Complete: things = %q, want final,p1", got)
	}

	lock = mustLock(t, store, testClaim("released", storage.ModePhased))
	lctx = lock.Context(ctx)
	if err := insertThing(lctx, table, "released"); err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(lctx); err != nil {
		t.Fatal(err)
	}
	if got := things(t, check, table); got != "final,p1" {
		t.Fatalf("after Release: things = %q, want the released write gone", got)
	}
	if n := count(t, check, "SELECT count(*) FROM "+schema+".idempotency_keys WHERE idem_key = 'released'"); n != 0 {
		t.Fatalf("a released key without phases remains (%d rows)", n)
	}
}

// TestAtomicOnePoolConnection: with a pool of one connection, a claim holds it until
// Complete; a twin waits for it up to its lock wait, then gets ErrInProgress.
func TestAtomicOnePoolConnection(t *testing.T) {
	t.Parallel()
	db := newPool(t, 1, nil)
	store, _ := newStore(t, db)
	c := testClaim("k", storage.ModeAtomic)
	lock := mustLock(t, store, c)
	twin := c
	twin.LockWait = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	// The pool has no connection to give: the twin waits on the pool, then its context.
	if _, err := store.Claim(ctx, twin); err == nil {
		t.Fatal("a twin claimed while the only connection was held")
	}
	if err := lock.Complete(t.Context(), &storage.Response{Status: http.StatusCreated, Body: []byte("done")}); err != nil {
		t.Fatal(err)
	}
	_, rec, err := seamtest.Split(store.Claim(t.Context(), c))
	if err != nil || rec == nil || string(rec.Response.Body) != "done" {
		t.Fatalf("replay: %+v, %v", rec, err)
	}
}

// TestErrorMapping: the lock wait running out is ErrInProgress with the driver's 55P03
// in the chain.
func TestErrorMapping(t *testing.T) {
	t.Parallel()
	store, _ := newStore(t, sharedPool(t))
	c := testClaim("k", storage.ModeAtomic)
	mustLock(t, store, c)
	twin := c
	twin.LockWait = 50 * time.Millisecond
	_, _, err := seamtest.Split(store.Claim(t.Context(), twin))
	var pgErr *pgconn.PgError
	if !errors.Is(err, storage.ErrInProgress) || !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("twin of an open claim: %v, want ErrInProgress wrapping SQLSTATE 55P03", err)
	}
	if _, err := store.Claim(t.Context(), storage.Claim{Mode: storage.Mode(42)}); !errors.Is(err, storage.ErrUnsupportedMode) {
		t.Fatalf("unknown mode: %v, want ErrUnsupportedMode", err)
	}
}

// TestSingleConn: on one *pgx.Conn the store runs one transaction at a time: claims,
// completions and replays work in both modes, and a second atomic claim waits for the
// connection up to its lock wait, then gets ErrTransient.
func TestSingleConn(t *testing.T) {
	t.Parallel()
	url, _ := testdb.PostgresSchema(t)
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	store := pgxstore.New(conn)
	if err := store.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	exec(t, conn, "CREATE TABLE things (v text NOT NULL)")
	for _, mode := range []storage.Mode{storage.ModeAtomic, storage.ModePhased} {
		c := testClaim("k-"+mode.String(), mode)
		lock := mustLock(t, store, c)
		if mode == storage.ModeAtomic {
			other := testClaim("other", mode)
			other.LockWait = 50 * time.Millisecond
			if _, err := store.Claim(t.Context(), other); !errors.Is(err, storage.ErrTransient) {
				t.Fatalf("a second atomic claim while the connection is in use: %v, want ErrTransient", err)
			}
		}
		if err := insertThing(lock.Context(t.Context()), "things", mode.String()); err != nil {
			t.Fatal(err)
		}
		if err := lock.Complete(t.Context(), &storage.Response{Status: http.StatusCreated, Body: []byte(mode.String())}); err != nil {
			t.Fatalf("%v: complete: %v", mode, err)
		}
		_, rec, err := seamtest.Split(store.Claim(t.Context(), c))
		if err != nil || rec == nil || string(rec.Response.Body) != mode.String() {
			t.Fatalf("%v: replay: %+v, %v", mode, rec, err)
		}
	}
	if got := things(t, conn, "things"); got != "atomic,phased" {
		t.Fatalf("things = %q, want both requests' writes", got)
	}
}

// TestInsideTx: on a pgx.Tx the store works in savepoints of the caller's transaction;
// everything goes when the caller rolls back.
func TestInsideTx(t *testing.T) {
	t.Parallel()
	db := sharedPool(t)
	_, schema := newStore(t, db)
	ctx := t.Context()
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	store := pgxstore.New(tx, pgxstore.WithTable(schema+"."+"idempotency_keys"))
	for _, mode := range []storage.Mode{storage.ModeAtomic, storage.ModePhased} {
		c := testClaim("k-"+mode.String(), mode)
		lock := mustLock(t, store, c)
		if err := lock.Complete(ctx, &storage.Response{Status: http.StatusCreated, Body: []byte(mode.String())}); err != nil {
			t.Fatalf("%v: complete: %v", mode, err)
		}
		_, rec, err := seamtest.Split(store.Claim(ctx, c))
		if err != nil || rec == nil || string(rec.Response.Body) != mode.String() {
			t.Fatalf("%v: replay in the transaction: %+v, %v", mode, rec, err)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, "SELECT count(*) FROM "+schema+".idempotency_keys"); n != 0 {
		t.Fatalf("%d keys remain after the caller's rollback", n)
	}
}

// TestAtomicTakeover: an atomic claim takes over a phased key whose lease ran out, with
// its recovery point; the stale phased lock then loses every write.
func TestAtomicTakeover(t *testing.T) {
	t.Parallel()
	db := sharedPool(t)
	store, schema := newStore(t, db)
	ctx := t.Context()
	c := testClaim("k", storage.ModePhased)
	c.Lease = 100 * time.Millisecond
	stale := mustLock(t, store, c)
	if err := stale.Phase(ctx, "charged", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	waitLeaseEnd(t, db, schema, c.Scope, c.Key)

	a := c
	a.Mode = storage.ModeAtomic
	lock := mustLock(t, store, a)
	if !lock.Resumed() || lock.RecoveryPoint() != "charged" {
		t.Fatalf("atomic claim of an expired lease: taken over %v, point %q; want true, charged", lock.Resumed(), lock.RecoveryPoint())
	}
	if err := lock.Complete(ctx, &storage.Response{Status: http.StatusCreated, Body: []byte("atomic")}); err != nil {
		t.Fatal(err)
	}
	if err := stale.Phase(ctx, "late", func(context.Context) error { return nil }); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("stale phase: %v, want ErrLeaseLost", err)
	}
	if err := stale.Complete(ctx, &storage.Response{Status: http.StatusOK}); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("stale complete: %v, want ErrLeaseLost", err)
	}
	_, rec, err := seamtest.Split(store.Claim(ctx, c))
	if err != nil || rec == nil || string(rec.Response.Body) != "atomic" {
		t.Fatalf("replay: %+v, %v", rec, err)
	}
}

// TestAtomicAbortedTransaction: a handler whose statement failed (leaving the
// transaction aborted) cannot be completed: Complete fails, nothing remains, and the one
// connection of the pool is healthy for the next request.
func TestAtomicAbortedTransaction(t *testing.T) {
	t.Parallel()
	db := newPool(t, 1, nil)
	store, schema := newStore(t, db)
	ctx := t.Context()
	c := testClaim("k", storage.ModeAtomic)
	lock := mustLock(t, store, c)
	lctx := lock.Context(ctx)
	if _, err := pgxstore.MustTx(lctx).Exec(lctx, "SELECT 1/0"); err == nil {
		t.Fatal("division by zero succeeded")
	}
	if err := lock.Complete(ctx, &storage.Response{Status: http.StatusCreated}); err == nil {
		t.Fatal("Complete of an aborted transaction succeeded")
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatalf("Release after a failed Complete: %v", err)
	}
	if n := count(t, db, "SELECT count(*) FROM "+schema+".idempotency_keys"); n != 0 {
		t.Fatalf("%d keys remain", n)
	}
	lock = mustLock(t, store, c)
	if err := lock.Complete(ctx, &storage.Response{Status: http.StatusCreated}); err != nil {
		t.Fatalf("the next request on the same connection: %v", err)
	}
}
