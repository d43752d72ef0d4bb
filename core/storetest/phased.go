package storetest

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core/storage"
)

// phasedTests run in ModePhased only: they look at started keys, leases and takeovers.
var phasedTests = []test{
	{"InProgress", testInProgress},
	{"ReleaseAfterPhase", testReleaseAfterPhase},
	{"LeaseExpiryTakeover", testLeaseExpiryTakeover},
	{"TakeoverRace", testTakeoverRace},
	{"Fencing", testFencing},
	{"PhaseRenewsLease", testPhaseRenewsLease},
	{"RenewExtendsLease", testRenewExtendsLease},
	{"RenewAfterEnd", testRenewAfterEnd},
	{"RetentionKeepsLiveLease", testRetentionKeepsLiveLease},
	{"RetentionOnExpiredLease", testRetentionOnExpiredLease},
}

// testInProgress: a key held by a live lease is reported as a started record, with the
// holder's fingerprint, to the same request and to a different one; the holder is not
// disturbed.
func testInProgress(s *suite) {
	c := s.claim("k", "a")
	l := s.mustFresh(c)
	s.mustStarted(c, c, storage.RecoveryStarted)
	rec := s.mustStarted(s.claim("k", "b"), c, storage.RecoveryStarted)
	requireOtherFingerprint(s.t, fingerprint("b"), rec)
	s.complete(l, created("1"))
	s.mustReplay(c, c, created("1"))
}

// testReleaseAfterPhase: a failed attempt that recorded a phase keeps the key and its
// recovery point but ends its lease: the next claim with the same request takes over at
// once and resumes; one with another request gets the record.
func testReleaseAfterPhase(s *suite) {
	c := s.claim("k", "a")
	l := s.mustFresh(c)
	require.NoError(s.t, l.Phase(s.ctx, "charged", noop))
	require.NoError(s.t, l.Release(s.ctx), "Release")

	rec := s.mustRecord(s.claim("k", "b"))
	s.checkRecord(rec, c, storage.StateStarted)
	require.Equal(s.t, "charged", rec.RecoveryPoint)
	require.False(s.t, rec.LockedUntil.After(time.Now().Add(time.Second)),
		"a released lease must have ended, LockedUntil is %v", rec.LockedUntil)

	l2 := s.mustLock(c)
	require.True(s.t, l2.Resumed(), "the retry after a released phase must take over")
	require.Equal(s.t, "charged", l2.RecoveryPoint(), "the retry resumes from the recorded phase")
	s.mustStarted(c, c, "charged")
	s.complete(l2, created("1"))
	s.mustReplay(c, c, created("1"))
}

// testLeaseExpiryTakeover: once a lease runs out, a claim with the same request takes
// over with the recorded point and a fresh lease; one with another request gets the
// record and takes nothing over.
func testLeaseExpiryTakeover(s *suite) {
	c := s.claim("k", "a")
	c.Lease = shortLease
	l := s.mustFresh(c)
	require.NoError(s.t, l.Phase(s.ctx, "charged", noop))
	letTimePass(pastLease)

	rec := s.mustRecord(s.claim("k", "b"))
	s.checkRecord(rec, c, storage.StateStarted)
	require.Equal(s.t, "charged", rec.RecoveryPoint)
	require.True(s.t, rec.LockedUntil.Before(time.Now()), "the lease has run out: LockedUntil %v", rec.LockedUntil)

	retry := s.claim("k", "a")
	l2 := s.mustLock(retry)
	require.True(s.t, l2.Resumed(), "Resumed after an expired lease")
	require.Equal(s.t, "charged", l2.RecoveryPoint())
	s.mustStarted(retry, retry, "charged")
	s.complete(l2, created("1"))
	s.mustReplay(c, c, created("1"))
}

// takeoverRacers is how many goroutines race to take over one expired lease.
const takeoverRacers = 16

// testTakeoverRace: several claimers racing for one expired lease: exactly one takes it
// over, the others see its live lease.
func testTakeoverRace(s *suite) {
	c := s.claim("k", "a")
	c.Lease = shortLease
	l := s.mustFresh(c)
	require.NoError(s.t, l.Phase(s.ctx, "charged", noop))
	letTimePass(pastLease)

	retry := s.claim("k", "a")
	start := make(chan struct{})
	results := make([]outcome, takeoverRacers)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			<-start
			results[i] = s.claimOnce(retry)
		})
	}
	close(start)
	wg.Wait()

	// Count the winners first, so that two of them fail here, whatever their order.
	var winners []*held
	for _, o := range results {
		s.checkShape(o)
		if o.lock != nil {
			winners = append(winners, s.track(o.lock))
		}
	}
	require.Len(s.t, winners, 1, "exactly one of %d claimers must take the expired lease over", takeoverRacers)
	winner := winners[0]
	require.True(s.t, winner.Resumed(), "the winner of a race for an expired lease must report Resumed")
	require.Equal(s.t, "charged", winner.RecoveryPoint())
	for _, o := range results {
		switch {
		case o.lock != nil:
		case o.rec != nil:
			s.checkRecord(o.rec, c, storage.StateStarted)
			require.Equal(s.t, "charged", o.rec.RecoveryPoint)
		default:
			require.ErrorIs(s.t, o.err, storage.ErrTransient, "a losing claimer")
		}
	}
	s.mustStarted(retry, retry, "charged")
	s.complete(winner, created("1"))
	s.mustReplay(c, c, created("1"))
}

// testFencing: after a takeover, the stale lock's Phase, Complete and Release fail with
// ErrLeaseLost and change nothing; the new holder carries on.
func testFencing(s *suite) {
	c := s.claim("k", "a")
	c.Lease = shortLease
	stale := s.mustFresh(c)
	require.NoError(s.t, stale.Phase(s.ctx, "p1", noop))
	letTimePass(pastLease)

	retry := s.claim("k", "a")
	fresh := s.mustLock(retry)
	require.True(s.t, fresh.Resumed())
	require.Equal(s.t, "p1", fresh.RecoveryPoint())

	err := stale.Phase(s.ctx, "stale-phase", noop)
	require.ErrorIs(s.t, err, storage.ErrLeaseLost, "Phase of a lock whose lease was taken over")
	s.mustStarted(retry, retry, "p1")

	err = stale.Complete(s.ctx, created("stale"))
	require.ErrorIs(s.t, err, storage.ErrLeaseLost, "Complete of a lock whose lease was taken over")
	s.mustStarted(retry, retry, "p1")

	err = stale.Renew(s.ctx)
	require.ErrorIs(s.t, err, storage.ErrLeaseLost, "Renew of a lock whose lease was taken over")
	s.mustStarted(retry, retry, "p1")

	err = stale.Release(s.ctx)
	require.ErrorIs(s.t, err, storage.ErrLeaseLost, "Release of a lock whose lease was taken over")
	s.mustStarted(retry, retry, "p1")

	require.NoError(s.t, fresh.Phase(s.ctx, "p2", noop))
	s.mustStarted(retry, retry, "p2")
	s.complete(fresh, created("fresh"))
	s.mustReplay(c, c, created("fresh"))
}

// testPhaseRenewsLease: a committed phase renews the lease, so a claim after the first
// lease would have run out still finds the key in progress.
func testPhaseRenewsLease(s *suite) {
	const lease = 3 * time.Second
	c := s.claim("k", "a")
	c.Lease = lease
	l := s.mustFresh(c)
	claimed := time.Now() // the lease began before this
	letTimePass(lease / 2)
	require.NoError(s.t, l.Phase(s.ctx, "charged", noop))
	// Just past the first lease, counted from the claim (so a slow Phase does not push
	// the check later): the renewed lease, which began at lease/2 or later, has at least
	// lease/2 - 200ms left, slack for a loaded machine.
	letTimePass(time.Until(claimed.Add(lease + 200*time.Millisecond)))
	s.mustStarted(c, c, "charged")
	s.complete(l, created("1"))
}

// testRenewExtendsLease: Renew extends the lease by the claim's lease from now, without
// recording a point, so a claim after the first lease would have run out still finds the
// key in progress.
func testRenewExtendsLease(s *suite) {
	const lease = 3 * time.Second
	c := s.claim("k", "a")
	c.Lease = lease
	l := s.mustFresh(c)
	claimed := time.Now() // the lease began before this
	letTimePass(lease / 2)
	require.NoError(s.t, l.Renew(s.ctx), "Renew")
	// Just past the first lease, counted from the claim (see testPhaseRenewsLease).
	letTimePass(time.Until(claimed.Add(lease + 200*time.Millisecond)))
	s.mustStarted(c, c, storage.RecoveryStarted)
	s.complete(l, created("1"))
	s.mustReplay(c, c, created("1"))
}

// testRenewAfterEnd: a renewal that lands after Release or Complete (the engine does not
// wait for one stuck behind a lock) changes nothing: a released lease stays released, a
// completed key stays completed, a deleted key stays free.
func testRenewAfterEnd(s *suite) {
	c := s.claim("k", "a")
	l := s.mustFresh(c)
	require.NoError(s.t, l.Phase(s.ctx, "charged", noop))
	require.NoError(s.t, l.Release(s.ctx), "Release")
	_ = l.Lock.Renew(s.ctx) // its answer does not matter; what it changed does
	l2 := s.mustLock(c)
	require.True(s.t, l2.Resumed(), "a renewal after Release must not extend the released lease: the retry takes over at once")
	require.Equal(s.t, "charged", l2.RecoveryPoint())
	s.complete(l2, created("1"))
	_ = l2.Lock.Renew(s.ctx)
	s.mustReplay(c, c, created("1"))

	c3 := s.claim("k3", "a")
	l3 := s.mustFresh(c3)
	require.NoError(s.t, l3.Release(s.ctx), "Release")
	_ = l3.Lock.Renew(s.ctx)
	s.mustFresh(s.claim("k3", "b"))
}

// testRetentionKeepsLiveLease: a started key older than the retention is not absent while
// its lease is live.
func testRetentionKeepsLiveLease(s *suite) {
	c := s.claim("k", "a")
	l := s.mustFresh(c)
	letTimePass(pastLease)
	same := c
	same.Retention = shortLease
	s.mustStarted(same, c, storage.RecoveryStarted)
	other := s.claim("k", "b")
	other.Retention = shortLease
	s.mustStarted(other, c, storage.RecoveryStarted)
	s.complete(l, created("1"))
}

// testRetentionOnExpiredLease: a started key past the retention whose lease has run out
// counts as absent: the claim is fresh, not a takeover, and the old lock has lost it.
func testRetentionOnExpiredLease(s *suite) {
	c := s.claim("k", "a")
	c.Lease = shortLease
	old := s.mustFresh(c)
	require.NoError(s.t, old.Phase(s.ctx, "charged", noop))
	letTimePass(pastLease)

	again := s.claim("k", "a")
	again.Retention = shortLease / 2
	l := s.mustFresh(again)
	err := old.Complete(s.ctx, created("old"))
	require.ErrorIs(s.t, err, storage.ErrLeaseLost, "Complete of a lock whose key was claimed afresh")
	s.complete(l, &storage.Response{Status: http.StatusOK})
	s.mustReplay(c, c, &storage.Response{Status: http.StatusOK})
}

func noop(context.Context) error { return nil }
