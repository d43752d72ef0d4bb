package pgxstore_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/core/storetest"
	"github.com/idemkit/idem/pgxstore"
)

// TestConformance runs the store conformance suite on a pool, at both isolation levels
// the store supports; each subtest has its own schema.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, level := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead} {
		t.Run(string(level), func(t *testing.T) {
			t.Parallel()
			storetest.Run(t, func(t *testing.T) storage.Store {
				store, _ := newStore(t, sharedPool(t), pgxstore.WithIsolation(level))
				return store
			})
		})
	}
}
