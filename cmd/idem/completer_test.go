package main

import (
	"context"
	"crypto/sha256"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/seamtest"
)

// TestShowCompleter: show says whether the completer can finish a started key (its
// request kept or not), how often it tried and when it tries next.
func TestShowCompleter(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			const table = "idem_keys"
			db, store := b.setup(t, table)
			dbt := []string{"-db", db, "-table", table}
			_, stderr, code := idem(t, append([]string{"migrate"}, dbt...)...)
			require.Equal(t, 0, code, stderr)

			fp := sha256.Sum256([]byte("pay"))
			claim := storage.Claim{Scope: "alice", Key: "abandoned", Fingerprint: fp[:], Method: http.MethodPost, Path: "/v1/payments",
				Mode: storage.ModePhased, Lease: time.Minute, LockWait: time.Second, Retention: 24 * time.Hour,
				Request: &storage.Request{Method: http.MethodPost, URI: "/v1/payments?x=1", Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"amount":5}`)}}
			lock, rec, err := seamtest.Split(store.Claim(t.Context(), claim))
			require.NoError(t, err)
			require.Nil(t, rec)
			require.NoError(t, lock.Phase(t.Context(), "charge_created", func(context.Context) error { return nil }))
			require.NoError(t, lock.Release(t.Context()))

			out, stderr, code := idem(t, append([]string{"show", "-scope", "alice", "-key", "abandoned"}, dbt...)...)
			require.Equal(t, 0, code, stderr)
			assert.Contains(t, out, "completer       can complete it: POST /v1/payments?x=1 kept (1 header fields, 12 body bytes)")
			assert.Contains(t, out, "attempts        0 by the completer")
			assert.Contains(t, out, "next attempt    once the lease has ended")

			won, err := store.(storage.Completable).BeginAttempt(t.Context(), "alice", "abandoned", 0, time.Hour)
			require.NoError(t, err)
			require.True(t, won)
			out, stderr, code = idem(t, append([]string{"show", "-scope", "alice", "-key", "abandoned"}, dbt...)...)
			require.Equal(t, 0, code, stderr)
			assert.Contains(t, out, "attempts        1 by the completer")
			assert.Regexp(t, `next attempt +20\d\d-.* \(in (59m\d+s|1h0m0s)\)`, out)

			claim.Key, claim.Request = "plain", nil
			lock, _, err = seamtest.Split(store.Claim(t.Context(), claim))
			require.NoError(t, err)
			t.Cleanup(func() { _ = lock.Release(context.Background()) })
			out, stderr, code = idem(t, append([]string{"show", "-scope", "alice", "-key", "plain"}, dbt...)...)
			require.Equal(t, 0, code, stderr)
			assert.Contains(t, out, "completer       no: no request kept")
		})
	}
}
