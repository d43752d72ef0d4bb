package redisstore_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/seamtest"
	"github.com/idemkit/idem/redisstore"
)

// TestClaimScriptDecidesAsDecide holds the claim script, which decides inside Redis so
// that a takeover cannot race, to storage.Decide: for every combination of state,
// fingerprint, lease and age written into a key's hash, what the script does (claim the
// key afresh, take it over, or report the record) is what Decide says at the server's
// clock, and Lookup reads the hash back as it was written.
func TestClaimScriptDecidesAsDecide(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	client := newClient(t, "")
	s := redisstore.New(client, redisstore.WithPrefix(newPrefix(t)))
	const retention = 2 * time.Hour
	mine, other := phasedClaim("x", "mine").Fingerprint, phasedClaim("x", "other").Fingerprint

	type stored struct {
		state         storage.State
		fp            []byte
		lease, age    string
		lockedUntilUS func(now time.Time) int64
		createdUS     func(now time.Time) int64
	}
	leases := map[string]func(now time.Time) int64{
		"live":  func(now time.Time) int64 { return now.Add(time.Minute).UnixMicro() },
		"ended": func(now time.Time) int64 { return now.Add(-time.Minute).UnixMicro() },
		"none":  func(time.Time) int64 { return 0 },
	}
	ages := map[string]func(now time.Time) int64{
		"young":          func(now time.Time) int64 { return now.Add(-time.Minute).UnixMicro() },
		"past retention": func(now time.Time) int64 { return now.Add(-retention - time.Hour).UnixMicro() },
	}
	var cases []stored
	for _, st := range []storage.State{storage.StateStarted, storage.StateCompleted} {
		for _, fp := range [][]byte{mine, other} {
			for ln, lu := range leases {
				for an, ca := range ages {
					cases = append(cases, stored{st, fp, ln, an, lu, ca})
				}
			}
		}
	}
	seen := map[storage.Verdict]bool{}
	for i, sc := range cases {
		name := fmt.Sprintf("%s/same=%v/lease %s/%s", sc.state, string(sc.fp) == string(mine), sc.lease, sc.age)
		c := phasedClaim(fmt.Sprint("k", i), "mine")
		c.Retention = retention

		now, err := client.Time(ctx).Result()
		require.NoError(t, err)
		lu, ca := sc.lockedUntilUS(now), sc.createdUS(now)
		fields := []any{"s", c.Scope, "k", c.Key, "st", string(sc.state), "fp", sc.fp, "m", "POST", "p", "/v1/payments",
			"rp", "charged", "lu", strconv.FormatInt(lu, 10), "tok", "someone-else", "ca", strconv.FormatInt(ca, 10)}
		if sc.state == storage.StateCompleted {
			fields = append(fields, "co", strconv.FormatInt(ca, 10), "sc", "201", "h", "Location: /v1/payments/1\n", "b", `{"id":1}`)
		}
		hash := s.Key(c.Scope, c.Key)
		require.NoError(t, client.HSet(ctx, hash, fields...).Err())
		require.NoError(t, client.PExpire(ctx, hash, time.Hour).Err())

		rec, lnow, err := s.Lookup(ctx, c.Scope, c.Key)
		require.NoError(t, err, name)
		assert.Equal(t, sc.state, rec.State, name)
		assert.Equal(t, sc.fp, rec.Fingerprint, name)
		assert.Equal(t, ca, rec.CreatedAt.UnixMicro(), name)
		if sc.state == storage.StateStarted && lu > 0 {
			assert.Equal(t, lu, rec.LockedUntil.UnixMicro(), name)
		} else {
			assert.True(t, rec.LockedUntil.IsZero(), "%s: LockedUntil %v", name, rec.LockedUntil)
		}
		want := storage.Decide(rec, c, lnow)
		seen[want] = true

		lock, got, err := seamtest.Split(s.Claim(ctx, c))
		require.NoError(t, err, name)
		switch want {
		case storage.VerdictAbsent:
			require.NotNil(t, lock, "%s: Decide says absent, the script did not claim", name)
			assert.False(t, lock.Resumed(), name)
			assert.Equal(t, storage.RecoveryStarted, lock.RecoveryPoint(), name)
		case storage.VerdictTakeOver:
			require.NotNil(t, lock, "%s: Decide says take over, the script did not", name)
			assert.True(t, lock.Resumed(), name)
			assert.Equal(t, "charged", lock.RecoveryPoint(), name)
		default:
			require.Nil(t, lock, "%s: Decide says %s, the script claimed the key", name, want)
			require.NotNil(t, got, name)
			assert.Equal(t, want, storage.Decide(got, c, time.Time{}), name)
		}
	}
	assert.Len(t, seen, 5, "the cases cover every verdict")
}
