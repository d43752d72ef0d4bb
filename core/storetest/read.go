package storetest

import (
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core/storage"
)

// readTests are the tests of Store.Lookup and of the optional KeyCounter, if the store
// implements it; they run once per store, with phased claims.
func readTests(store storage.Store) []test {
	tests := []test{{"Lookup", testLookup}, {"LookupDecidesAsClaim", testLookupDecidesAsClaim}}
	if store.SupportsAtomic() {
		tests = append(tests, test{"LookupAtomicInFlight", testLookupAtomicInFlight})
	}
	if _, ok := store.(storage.KeyCounter); ok {
		tests = append(tests, test{"CountKeys", testCountKeys})
	}
	return tests
}

// lookup looks the key of c up and requires a record; it also returns the store's clock.
func (s *suite) lookup(c storage.Claim) (*storage.Record, time.Time) {
	s.t.Helper()
	rec, now, err := s.store.Lookup(s.ctx, c.Scope, c.Key)
	require.NoError(s.t, err, "Lookup(%q, %q)", c.Scope, c.Key)
	require.NotNil(s.t, rec, "Lookup returned no record and no error")
	require.WithinDuration(s.t, time.Now(), now, clockSlack, "Lookup's clock must be about now")
	return rec, now
}

// requireNotFound requires Lookup of c's key to fail with storage.ErrNotFound.
func (s *suite) requireNotFound(c storage.Claim, why string) {
	s.t.Helper()
	rec, _, err := s.store.Lookup(s.ctx, c.Scope, c.Key)
	require.ErrorIs(s.t, err, storage.ErrNotFound, why)
	require.Nil(s.t, rec, "Lookup returned a record with its error")
}

// testLookup: Lookup reads a key as it stands — started with its lease and recovery
// point, completed with its response — changes nothing, and keeps scopes apart.
func testLookup(s *suite) {
	c := s.claim("k", "a")
	s.requireNotFound(c, "a key never claimed")

	l := s.mustFresh(c)
	rec, now := s.lookup(c)
	s.checkRecord(rec, c, storage.StateStarted)
	require.Equal(s.t, storage.RecoveryStarted, rec.RecoveryPoint)
	require.True(s.t, rec.LockedUntil.After(now), "the lease of a fresh claim is live at Lookup's now")
	require.Nil(s.t, rec.Response, "a started record has no response")
	s.mustStarted(c, c, storage.RecoveryStarted) // Lookup changed nothing

	require.NoError(s.t, l.Phase(s.ctx, "charged", noop))
	rec, _ = s.lookup(c)
	require.Equal(s.t, "charged", rec.RecoveryPoint, "the recovery point after a phase")

	s.complete(l, created("1"))
	rec, _ = s.lookup(c)
	s.checkRecord(rec, c, storage.StateCompleted)
	require.False(s.t, rec.CompletedAt.IsZero(), "CompletedAt of a completed record")
	requireResponse(s.t, created("1"), rec.Response)
	s.mustReplay(c, c, created("1"))

	other := c
	other.Scope = scope + "-other"
	s.requireNotFound(other, "the same key in another scope")
}

// testLookupDecidesAsClaim: storage.Decide on what Lookup reads, at Lookup's now, says
// what a claim does next: replay, 422, 409, take over or claim afresh.
func testLookupDecidesAsClaim(s *suite) {
	decide := func(c storage.Claim) storage.Verdict {
		s.t.Helper()
		rec, now := s.lookup(c)
		return storage.Decide(rec, c, now)
	}

	done := s.claim("done", "a")
	s.complete(s.mustFresh(done), created("done"))
	require.Equal(s.t, storage.VerdictReplay, decide(done), "a completed key: Decide must say replay")
	s.mustReplay(done, done, created("done"))
	otherBody := done
	otherBody.Fingerprint = fingerprint("b")
	require.Equal(s.t, storage.VerdictMismatch, decide(otherBody), "another request: Decide must say mismatch")
	s.mustReplay(otherBody, done, created("done"))

	live := s.claim("live", "a")
	s.mustFresh(live)
	require.Equal(s.t, storage.VerdictInProgress, decide(live), "a live lease: Decide must say in progress")
	s.mustStarted(live, live, storage.RecoveryStarted)

	released := s.claim("released", "a")
	l := s.mustFresh(released)
	require.NoError(s.t, l.Phase(s.ctx, "charged", noop))
	require.NoError(s.t, l.Release(s.ctx))
	require.Equal(s.t, storage.VerdictTakeOver, decide(released), "a released lease: Decide must say take over")
	again := s.mustLock(released)
	require.True(s.t, again.Resumed(), "the claim after Decide said take over")
	require.Equal(s.t, "charged", again.RecoveryPoint())

	old := s.claim("old", "a")
	s.complete(s.mustFresh(old), created("old"))
	old.Retention = shortLease
	letTimePass(pastLease)
	require.Equal(s.t, storage.VerdictAbsent, decide(old), "a completed key past the claim's retention: Decide must say absent")
	s.mustFresh(old)
}

// testLookupAtomicInFlight: Lookup neither waits for nor sees an atomic request's key
// before it commits.
func testLookupAtomicInFlight(s *suite) {
	c := s.claim("k", "a")
	c.Mode = storage.ModeAtomic
	l := s.mustFresh(c)
	s.requireNotFound(c, "an atomic claim not yet committed")
	s.complete(l, created("1"))
	rec, _ := s.lookup(c)
	s.checkRecord(rec, c, storage.StateCompleted)
	requireResponse(s.t, created("1"), rec.Response)
}

// testCountKeys: CountKeys counts keys by state and lease, and names the oldest.
func testCountKeys(s *suite) {
	kc, err := s.store.(storage.KeyCounter).CountKeys(s.ctx)
	require.NoError(s.t, err)
	require.Equal(s.t, storage.KeyCounts{Now: kc.Now}, *kc, "an empty store")
	require.WithinDuration(s.t, time.Now(), kc.Now, clockSlack, "CountKeys's clock must be about now")

	first := s.claim("first", "a")
	s.complete(s.mustFresh(first), created("first"))
	s.mustFresh(s.claim("live", "a"))
	released := s.claim("released", "a")
	l := s.mustFresh(released)
	require.NoError(s.t, l.Phase(s.ctx, "charged", noop))
	require.NoError(s.t, l.Release(s.ctx))
	gone := s.claim("gone", "a")
	require.NoError(s.t, s.mustFresh(gone).Release(s.ctx)) // no phase: deleted

	kc, err = s.store.(storage.KeyCounter).CountKeys(s.ctx)
	require.NoError(s.t, err)
	require.Equal(s.t, 1, kc.Completed, "completed")
	require.Equal(s.t, 2, kc.Started, "started: the live lease and the released key")
	require.Equal(s.t, 1, kc.Live, "live leases")
	require.Zero(s.t, kc.Expired, "nothing is past the store's retention")
	require.Zero(s.t, kc.ExpiredLive)
	require.NotNil(s.t, kc.Oldest, "the oldest key")
	require.Equal(s.t, first.Scope, kc.Oldest.Scope)
	require.Equal(s.t, first.Key, kc.Oldest.Key)
	require.Equal(s.t, storage.StateCompleted, kc.Oldest.State)
	require.WithinDuration(s.t, time.Now(), kc.Oldest.CreatedAt, clockSlack)
	require.False(s.t, kc.Oldest.CreatedAt.After(kc.Now), "the oldest key was created before the count")
}
