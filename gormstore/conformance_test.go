package gormstore_test

import (
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core/storetest"
	"github.com/idemkit/idem/gormstore"
)

// TestConformance runs core/storetest on each dialect at the database's default
// isolation (READ COMMITTED on PostgreSQL, REPEATABLE READ on MariaDB), with the default
// atomic claim (on PostgreSQL the single write). SQLite runs both modes too.
func TestConformance(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			storetest.Run(t, d.newStores(t))
		})
	}
}

// TestConformanceIsolation runs core/storetest on PostgreSQL at REPEATABLE READ, where
// twins meet serialization failures: the path distributed PostgreSQL engines take.
func TestConformanceIsolation(t *testing.T) {
	t.Run("postgres/"+sql.LevelRepeatableRead.String(), func(t *testing.T) {
		t.Parallel()
		storetest.Run(t, dialects[0].newStores(t, gormstore.WithIsolation(sql.LevelRepeatableRead)))
	})
}

// TestConformanceRowFirst runs core/storetest on PostgreSQL with WithClaimRowFirst (the
// started key row written first, then updated to completed) at READ COMMITTED. (TestConformance
// runs PostgreSQL's default claim, the single write: the key's advisory lock, the
// completed row inserted once. At REPEATABLE READ, TestConformanceIsolation, both claim
// with the row first.)
func TestConformanceRowFirst(t *testing.T) {
	t.Run("postgres/"+sql.LevelReadCommitted.String(), func(t *testing.T) {
		t.Parallel()
		stores := dialects[0].newStores(t, gormstore.WithClaimRowFirst(), gormstore.WithIsolation(sql.LevelReadCommitted))
		require.NotNil(t, stores)
		storetest.Run(t, stores)
	})
}
