package storetest

import (
	"fmt"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core/storage"
)

// storeTests do not depend on the mode; they run once per store, with phased claims.
var storeTests = []test{
	{"DeleteExpiredEmpty", testDeleteExpiredEmpty},
	{"DeleteExpired", testDeleteExpired},
}

// testDeleteExpiredEmpty: sweeping an empty store deletes nothing and does not fail.
func testDeleteExpiredEmpty(s *suite) {
	n, err := s.store.DeleteExpired(s.ctx, time.Now().Add(time.Hour), 100)
	require.NoError(s.t, err)
	require.Equal(s.t, 0, n)
}

// testDeleteExpired: DeleteExpired deletes keys created before its cut-off, no more than
// its limit per call, and never a key whose lease is live.
func testDeleteExpired(s *suite) {
	if se, ok := s.store.(storage.SelfExpiring); ok && se.ExpiresKeys() {
		testSelfExpiring(s)
		return
	}
	const completed = 5
	var done []storage.Claim
	for i := range completed {
		c := s.claim(fmt.Sprint("done-", i), "a")
		s.complete(s.mustFresh(c), created(fmt.Sprint(i)))
		done = append(done, c)
	}
	abandoned := s.claim("abandoned", "a")
	abandoned.Lease = shortLease
	ab := s.mustFresh(abandoned)
	require.NoError(s.t, ab.Phase(s.ctx, "charged", noop))
	live := s.claim("live", "a")
	s.mustFresh(live)
	letTimePass(pastLease)

	n, err := s.store.DeleteExpired(s.ctx, time.Now().Add(-time.Hour), 100)
	require.NoError(s.t, err)
	require.Equal(s.t, 0, n, "no key was created before the cut-off")
	s.mustReplay(done[0], done[0], created("0"))

	cutoff := time.Now().Add(time.Hour)
	n, err = s.store.DeleteExpired(s.ctx, cutoff, 2)
	require.NoError(s.t, err)
	require.Equal(s.t, 2, n, "DeleteExpired must stop at its limit")

	n, err = s.store.DeleteExpired(s.ctx, cutoff, 100)
	require.NoError(s.t, err)
	require.Equal(s.t, completed+1-2, n, "the rest of the completed keys and the abandoned one")

	n, err = s.store.DeleteExpired(s.ctx, cutoff, 100)
	require.NoError(s.t, err)
	require.Equal(s.t, 0, n, "only a live key is left")

	s.mustStarted(live, live, storage.RecoveryStarted)
	for _, c := range done {
		other := c
		other.Fingerprint = fingerprint("b")
		s.mustFresh(other)
	}
	s.mustFresh(abandoned)
	err = ab.Complete(s.ctx, created("ab"))
	require.ErrorIs(s.t, err, storage.ErrLeaseLost, "Complete of a lock whose key was deleted and claimed afresh")
}

// testSelfExpiring: a store that expires keys itself deletes nothing when swept, not even
// a key created long before the cut-off, and the key still replays.
func testSelfExpiring(s *suite) {
	c := s.claim("done", "a")
	s.complete(s.mustFresh(c), created("0"))
	n, err := s.store.DeleteExpired(s.ctx, time.Now().Add(time.Hour), 100)
	require.NoError(s.t, err)
	require.Equal(s.t, 0, n, "a self-expiring store's DeleteExpired deletes nothing")
	s.mustReplay(c, c, created("0"))
}

// testUnsupportedMode: a store without a transaction to share refuses atomic claims.
func testUnsupportedMode(s *suite) {
	o := s.do(s.claim("k", "a"))
	require.ErrorIs(s.t, o.err, storage.ErrUnsupportedMode, "an atomic claim on a store whose SupportsAtomic is false")
}
