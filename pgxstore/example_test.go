package pgxstore_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/pgxstore"
)

// A POST /orders endpoint whose order, key and recorded response commit together.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	store := pgxstore.New(pool)
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	eng, err := core.New(core.Config{
		Store: store,
	})
	if err != nil {
		log.Fatal(err)
	}
	createOrder := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		var id int64
		err := pgxstore.MustTx(ctx).QueryRow(ctx, `INSERT INTO orders (amount) VALUES ($1) RETURNING id`, 100).Scan(&id)
		if err != nil {
			// A 5xx rolls back: no order, no key; the client may retry with the same key.
			http.Error(w, "could not create the order", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", id))
		w.WriteHeader(http.StatusCreated) // recorded and committed before it is sent
	})
	http.Handle("POST /orders", eng.Middleware(func(r *http.Request) string { return r.Header.Get("X-Account-ID") })(createOrder))
	log.Fatal(http.ListenAndServe(":8080", nil))
}

// The DDL of a schema-qualified table, for a migration tool that keeps its own files.
// pgxpool.New connects lazily, so this runs without a database.
func ExampleStore_Schema() {
	pool, err := pgxpool.New(context.Background(), "postgres://localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store := pgxstore.New(pool, pgxstore.WithTable("billing.idem_keys"))
	for line := range strings.Lines(store.Schema()) {
		if strings.HasPrefix(line, "CREATE") {
			fmt.Print(line)
		}
	}
	// Output:
	// CREATE TABLE IF NOT EXISTS "billing"."idem_keys" (
	// CREATE INDEX IF NOT EXISTS "idem_keys_created_at_idx" ON "billing"."idem_keys" (created_at);
}

// A phased request: the charge commits as its own phase (a retry after a crash resumes
// after it), the order commits with the recorded response.
func ExampleTx_phases() {
	handler := func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		op := core.MustOperation(ctx)
		err := op.Phase(ctx, "charged", func(ctx context.Context) error {
			// The phase's own transaction: commits with the recovery point "charged".
			_, err := pgxstore.MustTx(ctx).Exec(ctx, `INSERT INTO charges (key) VALUES ($1)`, op.DerivedKey("charge"))
			return err
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		// Outside phases: the request's final transaction, committed with the response.
		if _, err := pgxstore.MustTx(ctx).Exec(ctx, `INSERT INTO orders (key) VALUES ($1)`, op.Key()); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}
	// Mount it behind an engine configured with Mode: core.ModePhased.
	http.Handle("POST /payments", http.HandlerFunc(handler))
}

// Code written against pgxstore.MustTx runs outside the middleware too, in a transaction the
// caller manages.
func ExampleWithTx() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := archiveOrders(pgxstore.WithTx(ctx, tx)); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
}

// archiveOrders is service code shared by a keyed HTTP handler and a nightly job.
func archiveOrders(ctx context.Context) error {
	_, err := pgxstore.MustTx(ctx).Exec(ctx, `UPDATE orders SET archived = true WHERE created_at < now() - interval '1 year'`)
	return err
}
