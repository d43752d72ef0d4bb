package gormstore_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"gorm.io/driver/postgres"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/internal/testdb"
)

// TestPostgresPgxstoreTable: the store works on a table made by hand from pgxstore's
// schema.sql, named with its schema; Migrate leaves such a table as it is.
func TestPostgresPgxstoreTable(t *testing.T) {
	t.Parallel()
	url, schema := testdb.PostgresSchema(t)
	db := withOrders(t, finish(t, postgres.Open(url)))
	ddl, err := os.ReadFile("../pgxstore/schema.sql")
	if err != nil {
		t.Fatalf("pgxstore's schema: %v", err)
	}
	if err := db.Exec(strings.ReplaceAll(string(ddl), "idempotency_keys", "handmade")).Error; err != nil {
		t.Fatalf("pgxstore's schema: %v", err)
	}
	shape := func() string {
		var cols, idx string
		db.Raw(`SELECT string_agg(column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, ''), ', ' ORDER BY ordinal_position)
			FROM information_schema.columns WHERE table_schema = ? AND table_name = 'handmade'`, schema).Row().Scan(&cols)
		db.Raw(`SELECT string_agg(indexname, ', ' ORDER BY indexname) FROM pg_indexes WHERE schemaname = ? AND tablename = 'handmade'`, schema).Row().Scan(&idx)
		return cols + " | " + idx
	}
	before := shape()

	s := gormstore.New(db, gormstore.WithTable(schema+".handmade"))
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if after := shape(); after != before {
		t.Fatalf("Migrate changed the table:\nbefore %s\nafter  %s", before, after)
	}

	// Atomic: a write through the handler's transaction commits with the response.
	c := claimFor("atomic", "a", storage.ModeAtomic)
	lock := mustLock(t, s, c)
	if err := gormstore.MustDB(lock.Context(t.Context())).Create(&order{Ref: "atomic"}).Error; err != nil {
		t.Fatal(err)
	}
	if err := lock.Complete(t.Context(), created); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if rec := mustRecord(t, s, c); rec.State != storage.StateCompleted || string(rec.Response.Body) != string(created.Body) {
		t.Fatalf("replay: %+v", rec)
	}

	// Phased: lease tokens in the uuid column fence a stale worker.
	p := claimFor("phased", "a", storage.ModePhased)
	p.Lease = 100 * time.Millisecond
	stale := mustLock(t, s, p)
	if err := stale.Phase(t.Context(), "charged", func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Phase: %v", err)
	}
	fresh := takeOver(t, s, p)
	if !fresh.Resumed() || fresh.RecoveryPoint() != "charged" {
		t.Fatalf("takeover: %v at %q", fresh.Resumed(), fresh.RecoveryPoint())
	}
	if err := stale.Complete(t.Context(), created); err == nil {
		t.Fatal("the stale worker completed")
	}
	if err := fresh.Complete(t.Context(), created); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if n, err := s.DeleteExpired(t.Context(), time.Now().Add(time.Hour), 10); err != nil || n != 2 {
		t.Fatalf("DeleteExpired = %d, %v; want 2", n, err)
	}
}

// TestPostgresLockHashIsPgxstores: on PostgreSQL the store locks the advisory lock number
// pgxstore locks for the same table and key (the values internal/keyrow pins), so the two
// stores hold each other's twins off on one table.
func TestPostgresLockHashIsPgxstores(t *testing.T) {
	t.Parallel()
	url, _ := testdb.PostgresSchema(t)
	db := finish(t, postgres.Open(url))
	if got := gormstore.New(db).LockHash("alice", "k1"); got != 2482266343148212868 {
		t.Errorf("lock hash of (alice, k1) in idempotency_keys = %d, want 2482266343148212868", got)
	}
	s := gormstore.New(db, gormstore.WithTable("billing.idem_keys"))
	if got := s.LockHash("tenant-42", "3f2c9a1e-0b7d-4c55-9a0e-6d1f2b3c4d5e"); got != 6952158868718321469 {
		t.Errorf("lock hash in billing.idem_keys = %d, want 6952158868718321469", got)
	}
}
