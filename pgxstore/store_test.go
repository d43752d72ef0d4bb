package pgxstore_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/core/storetest"
	"github.com/idemkit/idem/pgxstore"
)

// TestConformance runs the store conformance suite on a pool, at both isolation levels
// the store supports, with both atomic claims: the default single write (the key's
// advisory lock, the completed row inserted at Complete; at REPEATABLE READ it writes the
// row first) and WithClaimRowFirst; each subtest has its own schema.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, v := range []struct {
		name string
		opts []pgxstore.Option
	}{{"single-write", nil}, {"row-first", []pgxstore.Option{pgxstore.WithClaimRowFirst()}}} {
		for _, level := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead} {
			t.Run(v.name+"/"+string(level), func(t *testing.T) {
				t.Parallel()
				storetest.Run(t, func(t *testing.T) storage.Store {
					store, _ := newStore(t, sharedPool(t), append([]pgxstore.Option{pgxstore.WithIsolation(level)}, v.opts...)...)
					require.NotNil(t, store)
					return store
				})
			})
		}
	}
}

// TestLockHashIsGormstores: the store locks the advisory lock number gormstore locks for
// the same table and key (the values internal/keyrow pins).
func TestLockHashIsGormstores(t *testing.T) {
	t.Parallel()
	pool := sharedPool(t)
	require.Equal(t, int64(2482266343148212868), pgxstore.New(pool).LockHash("alice", "k1"))
	require.Equal(t, int64(6952158868718321469),
		pgxstore.New(pool, pgxstore.WithTable("billing.idem_keys")).LockHash("tenant-42", "3f2c9a1e-0b7d-4c55-9a0e-6d1f2b3c4d5e"))
}
