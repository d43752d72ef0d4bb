package redisstore_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/seamtest"
	"github.com/idemkit/idem/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewPanicsOnProgrammingErrors(t *testing.T) {
	t.Parallel()
	c := newClient(t, "")
	assert.PanicsWithValue(t, "redisstore: New: nil Redis client", func() { redisstore.New(nil) })
	assert.PanicsWithValue(t, "redisstore: New: nil Redis client", func() { redisstore.New((*redis.Client)(nil)) })
	assert.PanicsWithValue(t, "redisstore: New: nil Option", func() { redisstore.New(c, nil) })
	assert.PanicsWithValue(t, `redisstore: WithPrefix("app{1}:"): the prefix must not hold '{' or '}' (the key's hash tag follows it)`,
		func() { redisstore.WithPrefix("app{1}:") })
	assert.PanicsWithValue(t, "redisstore: WithRetention(0s): the retention must be at least 1ms", func() { redisstore.WithRetention(0) })

	s := redisstore.New(c)
	assert.Equal(t, storage.DefaultRetention, s.Retention())
	assert.False(t, s.SupportsAtomic())
	assert.True(t, strings.HasPrefix(s.Key("a", "b"), redisstore.DefaultPrefix+"{"))
	assert.Equal(t, time.Hour, redisstore.New(c, redisstore.WithRetention(time.Hour)).Retention())
}

func TestAtomicClaimIsUnsupported(t *testing.T) {
	t.Parallel()
	c := phasedClaim("k", "a")
	c.Mode = storage.ModeAtomic
	_, _, err := seamtest.Split(newStore(t).Claim(t.Context(), c))
	require.ErrorIs(t, err, storage.ErrUnsupportedMode)
}

// TestKeyLayout: one hash per operation, named prefix{hash tag} so it has one Cluster slot,
// and distinct for any bytes in scope and key, including splits that a separator would
// confuse.
func TestKeyLayout(t *testing.T) {
	t.Parallel()
	s := redisstore.New(newClient(t, ""), redisstore.WithPrefix("app:"))
	k := s.Key("tenant", "order-1")
	assert.Len(t, k, len("app:{}")+64)
	assert.Equal(t, "app:{", k[:5])
	assert.Equal(t, byte('}'), k[len(k)-1])
	assert.NotEqual(t, s.Key("a\x00b", "c"), s.Key("a", "b\x00c"))
	assert.NotEqual(t, s.Key("ab", "c"), s.Key("a", "bc"))
	assert.Equal(t, k, s.Key("tenant", "order-1"))
}

// TestBinarySafe: scopes and keys of any bytes are kept apart and given back unchanged,
// and bodies of any bytes replay byte for byte.
func TestBinarySafe(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	body := []byte{0, 0xff, '\r', '\n', 0xc3, 0x28, '{', '}', 0}
	for _, sc := range []struct{ scope, key string }{
		{"a\x00b", "c"}, {"a", "b\x00c"}, {"\xff\xfe", "\x00"}, {"{tag}", "}{"}, {"t", strings.Repeat("k", 255)},
	} {
		c := phasedClaim(sc.key, "a")
		c.Scope = sc.scope
		l, rec, err := seamtest.Split(s.Claim(ctx, c))
		require.NoError(t, err)
		require.Nil(t, rec, "scope %q key %q collided with another", sc.scope, sc.key)
		require.NoError(t, l.Complete(ctx, &storage.Response{Status: http.StatusOK, Header: http.Header{"Etag": {`"\x01"`}}, Body: body}))
		_, rec, err = seamtest.Split(s.Claim(ctx, c))
		require.NoError(t, err)
		require.NotNil(t, rec)
		assert.Equal(t, sc.scope, rec.Scope)
		assert.Equal(t, sc.key, rec.Key)
		assert.Equal(t, body, rec.Response.Body)
	}
}

// TestKeysExpireByTTL: the key's TTL is the retention, set by the claim and not refreshed
// by replays; Redis then deletes the key by itself, and the next claim is fresh.
func TestKeysExpireByTTL(t *testing.T) {
	t.Parallel()
	client := newClient(t, "")
	const retention = 400 * time.Millisecond
	s := redisstore.New(client, redisstore.WithPrefix(newPrefix(t)), redisstore.WithRetention(retention))
	ctx := t.Context()
	c := phasedClaim("k", "a")
	c.Lease, c.Retention = 100*time.Millisecond, retention
	l, _, err := seamtest.Split(s.Claim(ctx, c))
	require.NoError(t, err)
	require.NoError(t, l.Complete(ctx, &storage.Response{Status: http.StatusCreated}))
	key := s.Key(c.Scope, c.Key)
	ttl, err := client.PTTL(ctx, key).Result()
	require.NoError(t, err)
	assert.InDelta(t, retention, ttl, float64(200*time.Millisecond), "TTL after the claim")

	_, rec, err := seamtest.Split(s.Claim(ctx, c))
	require.NoError(t, err)
	require.NotNil(t, rec)
	after, err := client.PTTL(ctx, key).Result()
	require.NoError(t, err)
	assert.LessOrEqual(t, after, ttl, "a replay must not refresh the TTL")

	deadline := time.Now().Add(5 * time.Second)
	for client.Exists(ctx, key).Val() == 1 {
		require.True(t, time.Now().Before(deadline), "Redis did not expire the key")
		time.Sleep(50 * time.Millisecond) // waiting for the TTL to run out is the point
	}
	l, rec, err = seamtest.Split(s.Claim(ctx, c))
	require.NoError(t, err)
	require.Nil(t, rec)
	assert.False(t, l.Resumed())
	require.NoError(t, l.Release(ctx))
}

// TestTTLCoversALiveLease: a lease longer than what is left of the retention keeps the
// key alive until the lease ends, so Redis never expires a key in progress.
func TestTTLCoversALiveLease(t *testing.T) {
	t.Parallel()
	client := newClient(t, "")
	s := redisstore.New(client, redisstore.WithPrefix(newPrefix(t)), redisstore.WithRetention(100*time.Millisecond))
	ctx := t.Context()
	c := phasedClaim("k", "a")
	c.Lease, c.Retention = 10*time.Second, 100*time.Millisecond
	l, _, err := seamtest.Split(s.Claim(ctx, c))
	require.NoError(t, err)
	require.NoError(t, l.Phase(ctx, "charged", nil))
	ttl, err := client.PTTL(ctx, s.Key(c.Scope, c.Key)).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 9*time.Second)
	require.NoError(t, l.Release(ctx))
}

// TestLeaseOnRedisClock: a lease's end is Redis's TIME plus the lease, whatever the
// application's clock says.
func TestLeaseOnRedisClock(t *testing.T) {
	t.Parallel()
	client := newClient(t, "")
	s := redisstore.New(client, redisstore.WithPrefix(newPrefix(t)))
	ctx := t.Context()
	c := phasedClaim("k", "a")
	before, err := client.Time(ctx).Result()
	require.NoError(t, err)
	l, _, err := seamtest.Split(s.Claim(ctx, c))
	require.NoError(t, err)
	after, err := client.Time(ctx).Result()
	require.NoError(t, err)
	probe := c
	probe.Fingerprint = []byte("other")
	_, rec, err := seamtest.Split(s.Claim(ctx, probe))
	require.NoError(t, err)
	assert.False(t, rec.LockedUntil.Before(before.Add(c.Lease)), "lease end %v before Redis's %v + lease", rec.LockedUntil, before)
	assert.False(t, rec.LockedUntil.After(after.Add(c.Lease)), "lease end %v after Redis's %v + lease", rec.LockedUntil, after)
	assert.False(t, rec.CreatedAt.Before(before) || rec.CreatedAt.After(after), "created %v, Redis time %v..%v", rec.CreatedAt, before, after)
	require.NoError(t, l.Release(ctx))
}

// cmdCounter counts the commands a client sends, pipelines included: one command is one
// round trip here (the store never pipelines).
type cmdCounter struct{ n atomic.Int64 }

func (h *cmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}

// countedStore returns a store whose client counts its round trips, with the scripts
// already cached by Redis (a restarted Redis costs one EVAL more per script, once).
func countedStore(t testing.TB) (*redisstore.Store, *cmdCounter) {
	t.Helper()
	client := newClient(t, "")
	s := redisstore.New(client, redisstore.WithPrefix(newPrefix(t)))
	warm(t, s)
	h := &cmdCounter{}
	client.AddHook(h)
	return s, h
}

// warm runs every script once.
func warm(t testing.TB, s *redisstore.Store) {
	t.Helper()
	ctx := context.Background()
	c := phasedClaim("warm-up", "a")
	l, _, err := seamtest.Split(s.Claim(ctx, c))
	require.NoError(t, err)
	require.NoError(t, l.Phase(ctx, "p", nil))
	require.NoError(t, l.Release(ctx))
	l, _, err = seamtest.Split(s.Claim(ctx, c))
	require.NoError(t, err)
	require.NoError(t, l.Complete(ctx, &storage.Response{Status: http.StatusOK}))
}

// TestRoundTrips: through the engine, a first request costs the store two round trips
// (claim, complete), a replay one, and a phase two (renew, record).
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	s, h := countedStore(t)
	mw, err := middleware(s, core.Config{})
	require.NoError(t, err)
	plain := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	phased := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = core.MustOperation(r.Context()).Phase(r.Context(), "charged", func(context.Context) error { return nil })
		w.WriteHeader(http.StatusCreated)
	}))
	trips := func(h2 http.Handler, key string) int64 {
		before := h.n.Load()
		w := serveOnce(h2, key)
		require.Equal(t, http.StatusCreated, w.Code)
		return h.n.Load() - before
	}
	assert.Equal(t, int64(2), trips(plain, "a"), "first request: claim + complete")
	assert.Equal(t, int64(1), trips(plain, "a"), "replay: claim")
	assert.Equal(t, int64(4), trips(phased, "b"), "first request with one phase: claim + renew + record + complete")
}
