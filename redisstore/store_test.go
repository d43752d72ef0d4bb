package redisstore_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/core/storetest"
	"github.com/idemkit/idem/internal/reliability"
	"github.com/idemkit/idem/internal/seamtest"
	"github.com/idemkit/idem/redisstore"
)

// TestConformance runs core/storetest on the test Redis, each subtest under a prefix of
// its own, and the stall and lost-reply tests on a store behind a fault proxy.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.RunHarness(t, storetest.Harness{
		New: func(t *testing.T) storetest.Subject {
			return storetest.Subject{Store: redisstore.New(newClient(t, ""), redisstore.WithPrefix(newPrefix(t)))}
		},
		Stalling: func(t *testing.T) (storage.Store, func() func()) {
			p, err := reliability.Listen(redisAddr())
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close() })
			// No read or write timeout of the client's own: the store's bound is tested.
			c := newClient(t, p.Addr(), func(o *redis.Options) { o.ReadTimeout, o.WriteTimeout = -1, -1 })
			return redisstore.New(c, redisstore.WithPrefix(newPrefix(t))), func() func() { p.Stall(); return p.Resume }
		},
		LosingReplies: func(t *testing.T) (storage.Store, func() <-chan struct{}) {
			p, err := reliability.ListenRaw(redisAddr())
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close() })
			// go-redis sends a command again on a new connection after a lost reply.
			return redisstore.New(newClient(t, p.Addr()), redisstore.WithPrefix(newPrefix(t))), p.LoseNextReply
		},
	})
}

func TestDeleteExpiredIsANoOp(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	c := phasedClaim("k", "a")
	l, _, err := seamtest.Split(s.Claim(ctx, c))
	require.NoError(t, err)
	require.NoError(t, l.Complete(ctx, &storage.Response{Status: http.StatusCreated}))

	n, err := s.DeleteExpired(ctx, time.Now().Add(48*time.Hour), 1000)
	require.NoError(t, err)
	assert.Zero(t, n)
	_, rec, err := seamtest.Split(s.Claim(ctx, c))
	require.NoError(t, err)
	require.NotNil(t, rec, "the completed key is still there")
	assert.Equal(t, storage.StateCompleted, rec.State)
}

// phasedClaim is a phased claim of key with the fingerprint of body.
func phasedClaim(key, body string) storage.Claim {
	fp := make([]byte, 32)
	copy(fp, body)
	return storage.Claim{Scope: "tenant", Key: key, Fingerprint: fp, Method: http.MethodPost, Path: "/v1/payments",
		Mode: storage.ModePhased, Lease: 10 * time.Second, Retention: storage.DefaultRetention}
}
