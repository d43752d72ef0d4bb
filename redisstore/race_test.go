package redisstore_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/seamtest"
	"github.com/idemkit/idem/redisstore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// twoInstances returns two stores sharing one prefix, each on a client (a connection
// pool) of its own: two instances of an application.
func twoInstances(t *testing.T) (a, b *redisstore.Store) {
	p := newPrefix(t)
	return redisstore.New(newClient(t, ""), redisstore.WithPrefix(p)), redisstore.New(newClient(t, ""), redisstore.WithPrefix(p))
}

func TestTwoHundredClaimersOneWinner(t *testing.T) {
	t.Parallel()
	a, b := twoInstances(t)
	c := phasedClaim("one-key", "a")
	const claimers = 200
	type result struct {
		lock storage.Lock
		rec  *storage.Record
		err  error
	}
	results := make([]result, claimers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range results {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			<-start
			l, rec, err := seamtest.Split(s.Claim(t.Context(), c))
			results[i] = result{l, rec, err}
		})
	}
	close(start)
	wg.Wait()

	var winner storage.Lock
	for _, r := range results {
		require.NoError(t, r.err)
		if r.lock != nil {
			require.Nil(t, winner, "two claimers got the key")
			winner = r.lock
			continue
		}
		require.NotNil(t, r.rec)
		assert.Equal(t, storage.StateStarted, r.rec.State)
	}
	require.NotNil(t, winner, "one of %d claimers must win", claimers)
	require.NoError(t, winner.Complete(t.Context(), &storage.Response{Status: http.StatusCreated, Body: []byte("one")}))
	_, rec, err := seamtest.Split(b.Claim(t.Context(), c))
	require.NoError(t, err)
	require.NotNil(t, rec)
	assert.Equal(t, []byte("one"), rec.Response.Body)
}

// TestTakeoverFencesTheStaleWorker: instance A's lease runs out mid-operation; of several
// claimers on instance B exactly one takes it over, and from then on A can neither record
// a phase, nor complete, nor release, while B's work stands.
func TestTakeoverFencesTheStaleWorker(t *testing.T) {
	t.Parallel()
	a, b := twoInstances(t)
	ctx := t.Context()
	c := phasedClaim("k", "a")
	c.Lease = 150 * time.Millisecond
	stale, _, err := seamtest.Split(a.Claim(ctx, c))
	require.NoError(t, err)
	require.NoError(t, stale.Phase(ctx, "charged", nil))
	waitLeaseEnd(t, b, c)
	retry := c
	retry.Lease = 10 * time.Second // the new holder's lease outlives the test

	const racers = 16
	locks := make(chan storage.Lock, racers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range racers {
		wg.Go(func() {
			<-start
			l, rec, err := seamtest.Split(b.Claim(ctx, retry))
			if !assert.NoError(t, err) {
				return
			}
			if l != nil {
				locks <- l
				return
			}
			assert.Equal(t, storage.StateStarted, rec.State)
			assert.Equal(t, "charged", rec.RecoveryPoint)
		})
	}
	close(start)
	wg.Wait()
	close(locks)
	require.Len(t, locks, 1, "exactly one racer takes the expired lease over")
	fresh := <-locks
	assert.True(t, fresh.Resumed())
	assert.Equal(t, "charged", fresh.RecoveryPoint())

	ran := false
	err = stale.Phase(ctx, "emailed", func(ctx context.Context) error { ran = true; return nil })
	require.ErrorIs(t, err, storage.ErrLeaseLost)
	assert.False(t, ran, "a stale worker's phase must not run its side effect")
	require.ErrorIs(t, stale.Complete(ctx, &storage.Response{Status: http.StatusCreated, Body: []byte("stale")}), storage.ErrLeaseLost)
	require.ErrorIs(t, stale.Release(ctx), storage.ErrLeaseLost)

	_, rec, err := seamtest.Split(a.Claim(ctx, c))
	require.NoError(t, err)
	require.NotNil(t, rec, "the key is still held by the new worker")
	assert.Equal(t, "charged", rec.RecoveryPoint)
	assert.True(t, rec.LockedUntil.After(time.Now()))

	require.NoError(t, fresh.Phase(ctx, "emailed", nil))
	require.NoError(t, fresh.Complete(ctx, &storage.Response{Status: http.StatusCreated, Body: []byte("fresh")}))
	_, rec, err = seamtest.Split(a.Claim(ctx, c))
	require.NoError(t, err)
	require.NotNil(t, rec)
	assert.Equal(t, "emailed", rec.RecoveryPoint)
	assert.Equal(t, []byte("fresh"), rec.Response.Body)
}

// TestStaleWorkerCannotReleaseTheNewClaim: a stale worker that never recorded a phase
// must not delete the key another worker took over.
func TestStaleWorkerCannotReleaseTheNewClaim(t *testing.T) {
	t.Parallel()
	a, b := twoInstances(t)
	ctx := t.Context()
	c := phasedClaim("k", "a")
	c.Lease = 150 * time.Millisecond
	stale, _, err := seamtest.Split(a.Claim(ctx, c))
	require.NoError(t, err)
	waitLeaseEnd(t, b, c)
	retry := c
	retry.Lease = 10 * time.Second
	fresh, _, err := seamtest.Split(b.Claim(ctx, retry))
	require.NoError(t, err)
	require.NotNil(t, fresh)
	require.True(t, fresh.Resumed())

	require.ErrorIs(t, stale.Release(ctx), storage.ErrLeaseLost)
	_, rec, err := seamtest.Split(a.Claim(ctx, c))
	require.NoError(t, err)
	require.NotNil(t, rec, "the stale release deleted the new claim")
	require.NoError(t, fresh.Complete(ctx, &storage.Response{Status: http.StatusOK}))
}

// waitLeaseEnd polls until c's key is no longer held by a live lease: waiting for the
// lease to run out is the point.
func waitLeaseEnd(t *testing.T, s *redisstore.Store, c storage.Claim) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(c.Lease / 3)
		probe := c
		probe.Fingerprint = []byte("probe: another request never takes over")
		_, rec, err := seamtest.Split(s.Claim(t.Context(), probe))
		require.NoError(t, err)
		require.NotNil(t, rec)
		if rec.LockedUntil.Before(time.Now()) {
			return
		}
	}
	t.Fatalf("lease of %v still live after 5s", c.Lease)
}

// TestTwoInstancesOneExecutionPerKey: two application instances, each with its own Redis
// client, serve 50 keys × 10 concurrent requests: every key runs its handler exactly once,
// and every other request gets 409 while it runs or the identical replay after.
func TestTwoInstancesOneExecutionPerKey(t *testing.T) {
	t.Parallel()
	a, b := twoInstances(t)
	prov := newProvider(t)
	var mu sync.Mutex
	runs := map[string]int{}
	count := func(order string) { mu.Lock(); runs[order]++; mu.Unlock() }
	cfg := core.Config{Lease: time.Minute} // no lease runs out here, however loaded the machine: one run per key
	srvs := []string{
		serve(t, a, cfg, payments(prov.srv.URL, noCrash, count)).URL,
		serve(t, b, cfg, payments(prov.srv.URL, noCrash, count)).URL,
	}
	const keys, requests = 50, 10
	type answer struct {
		key string
		r   *reply
		err error
	}
	answers := make(chan answer, keys*requests)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for k := range keys {
		key := fmt.Sprintf("order-%d", k)
		for i := range requests {
			wg.Go(func() {
				<-start
				r, err := post(t.Context(), srvs[(k+i)%2], "acct", key, `{"amount":100}`)
				answers <- answer{key, r, err}
			})
		}
	}
	close(start)
	wg.Wait()
	close(answers)

	first := map[string]*reply{}
	conflicts := 0
	for an := range answers {
		require.NoError(t, an.err)
		switch an.r.Status {
		case http.StatusCreated:
			if f, ok := first[an.key]; ok {
				assert.Equal(t, f.Body, an.r.Body, "key %s answered two different 201s", an.key)
			} else {
				first[an.key] = an.r
			}
		case http.StatusConflict:
			conflicts++
		default:
			t.Fatalf("key %s: %v, want 201 or 409", an.key, an.r)
		}
	}
	t.Logf("%d requests: %d keys answered 201, %d answers 409 while in flight", keys*requests, len(first), conflicts)
	for k := range keys {
		key := fmt.Sprintf("order-%d", k)
		r, _, err := untilCreated(t.Context(), srvs[k%2], "acct", key, `{"amount":100}`, 10*time.Second, false)
		require.NoError(t, err, key)
		if f, ok := first[key]; ok {
			assert.Equal(t, f.Body, r.Body, key)
		}
		assert.Equal(t, 1, runs[key], "handler runs of %s", key)
		assert.Len(t, prov.charges(key), 1, "charges of %s", key)
	}
}
