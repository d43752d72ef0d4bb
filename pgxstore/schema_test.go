package pgxstore_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/seamtest"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgxstore"
)

// TestMigrate: Migrate is idempotent, safe from several instances at once, works on a
// table made by hand from the DDL, and quotes odd table names.
func TestMigrate(t *testing.T) {
	t.Parallel()
	db := sharedPool(t)
	ctx := t.Context()

	_, schema := testdb.PostgresSchema(t)
	store := pgxstore.New(db, pgxstore.WithTable(schema+`.odd "name"; DROP TABLE x`))
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = store.Migrate(ctx) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate: %v", err)
		}
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	if n := count(t, db, `SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND tablename = $2`,
		schema, `odd "name"; DROP TABLE x`); n != 2 {
		t.Fatalf("%d indexes on the table, want 2 (primary key, created_at)", n)
	}
	roundTrip(t, store)

	// A table made by hand from the DDL the store prints.
	_, schema = testdb.PostgresSchema(t)
	store = pgxstore.New(db, pgxstore.WithTable(schema+".by_hand"))
	if !strings.Contains(store.Schema(), fmt.Sprintf(`CREATE TABLE IF NOT EXISTS "%s"."by_hand" (`, schema)) ||
		!strings.Contains(store.Schema(), fmt.Sprintf(`CREATE INDEX IF NOT EXISTS "by_hand_created_at_idx" ON "%s"."by_hand" (created_at)`, schema)) {
		t.Fatalf("Schema() does not name the configured table:\n%s", store.Schema())
	}
	exec(t, db, store.Schema())
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("Migrate on a table made by hand: %v", err)
	}
	roundTrip(t, store)
}

// roundTrip claims, completes and replays a key.
func roundTrip(t *testing.T, store *pgxstore.Store) {
	t.Helper()
	c := testClaim("round-trip", storage.ModeAtomic)
	lock := mustLock(t, store, c)
	want := &storage.Response{Status: http.StatusCreated, Header: http.Header{"Location": {"/x/1"}}, Body: []byte{0, 1, 2, 0xff}}
	if err := lock.Complete(t.Context(), want); err != nil {
		t.Fatal(err)
	}
	_, rec, err := seamtest.Split(store.Claim(t.Context(), c))
	if err != nil || rec == nil || rec.Response == nil || rec.Response.Header.Get("Location") != "/x/1" ||
		string(rec.Response.Body) != string(want.Body) {
		t.Fatalf("replay: %+v, %v", rec, err)
	}
}

// TestReadmeDDL: the README repeats schema.sql word for word.
func TestReadmeDDL(t *testing.T) {
	t.Parallel()
	schema, err := os.ReadFile("schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```sql\n"+string(schema)+"```") {
		t.Fatal("README.md does not repeat schema.sql in a ```sql block; copy it over")
	}
}

// TestDeleteExpiredByPrimaryKey: the sweep deletes the oldest keys first, up to its
// limit, never a live lease, and leaves younger keys.
func TestDeleteExpiredByPrimaryKey(t *testing.T) {
	t.Parallel()
	db := sharedPool(t)
	store, schema := newStore(t, db)
	ctx := t.Context()
	for i := range 5 {
		lock := mustLock(t, store, testClaim(fmt.Sprint("done-", i), storage.ModeAtomic))
		if err := lock.Complete(ctx, &storage.Response{Status: http.StatusOK}); err != nil {
			t.Fatal(err)
		}
	}
	mustLock(t, store, testClaim("live", storage.ModePhased))
	// Age the keys: done-i was created i hours ago, live 10 hours ago.
	exec(t, db, fmt.Sprintf(`UPDATE %s.idempotency_keys SET created_at = now() - CASE
		WHEN idem_key = 'live' THEN interval '10 hours'
		ELSE substr(idem_key, 6)::int * interval '1 hour' END`, schema))

	cutoff := time.Now().Add(-90 * time.Minute) // done-2, done-3, done-4 and live are older
	n, err := store.DeleteExpired(ctx, cutoff, 2)
	if err != nil || n != 2 {
		t.Fatalf("first batch: %d, %v; want 2", n, err)
	}
	left := func() string {
		var s string
		if err := db.QueryRow(context.Background(), fmt.Sprintf(
			`SELECT string_agg(idem_key, ',' ORDER BY idem_key) FROM %s.idempotency_keys`, schema)).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got := left(); got != "done-0,done-1,done-2,live" {
		t.Fatalf("after the first batch: %s; want the two oldest completed keys gone", got)
	}
	if n, err = store.DeleteExpired(ctx, cutoff, 100); err != nil || n != 1 {
		t.Fatalf("second batch: %d, %v; want 1", n, err)
	}
	if got := left(); got != "done-0,done-1,live" {
		t.Fatalf("after the second batch: %s", got)
	}
}
