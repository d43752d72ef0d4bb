package gormstore_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/internal/testdb"
)

// TestAnUnreadableKeptRequestDoesNotLockOutTheClientOnMariaDB: the kept request is the
// completer's alone; gormstore decodes it on every read of a started key (record()), so a
// value it cannot decode (a format a newer version wrote during a rolling deploy, a
// damaged value) turns the client's own retry into a store error (503) instead of its
// verdict, and Lookup (idem show) fails too. The claim and Lookup must not depend on it.
func TestAnUnreadableKeptRequestDoesNotLockOutTheClientOnMariaDB(t *testing.T) {
	t.Parallel()
	db := openMySQL(t)
	table := testdb.Name("keys")
	s := gormstore.New(db, gormstore.WithTable(table))
	require.NoError(t, s.Migrate(t.Context()))
	c := claimFor("k", "{}", storage.ModePhased)
	c.Request = &storage.Request{Method: http.MethodPost, URI: "/orders", Body: []byte("{}")}
	lock := mustLock(t, s, c)
	require.NoError(t, lock.Phase(t.Context(), "charged", func(context.Context) error { return nil }))
	require.NoError(t, db.Exec("UPDATE "+table+" SET request = ? WHERE idem_key = ?", []byte{2}, "k").Error)

	claimed, err := s.Claim(t.Context(), c) // the lease is live: the client's retry is told so
	require.NoError(t, err, "a client's retry gets its verdict, not a store error")
	assert.Equal(t, storage.VerdictInProgress, claimed.Verdict)
	_, _, err = s.Lookup(t.Context(), "tenant", "k")
	assert.NoError(t, err, "idem show reads the key")
}
