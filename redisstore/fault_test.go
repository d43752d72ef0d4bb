package redisstore_test

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/internal/reliability"
	"github.com/idemkit/idem/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Settings of the fault tests: a store call may take faultTimeout before it fails, so a
// request against a paused Redis is answered within requestBound.
const (
	faultLockWait = 100 * time.Millisecond
	faultTimeout  = 500 * time.Millisecond // core.Config.StoreTimeout
	faultLease    = 300 * time.Millisecond
	requestBound  = 10 * time.Second // a hung request never ends; a loaded CI machine is slow
)

var faultConfig = core.Config{Lease: faultLease, LockWait: faultLockWait, StoreTimeout: faultTimeout, RetryAfter: time.Second}

// behindProxy returns a store whose Redis connections go through a proxy the test can cut,
// stall or take down.
func behindProxy(t *testing.T) (*redisstore.Store, *reliability.Proxy) {
	t.Helper()
	p, err := reliability.Listen(redisAddr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	c := newClient(t, p.Addr(), func(o *redis.Options) {
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = faultTimeout, time.Second, time.Second
	})
	return redisstore.New(c, redisstore.WithPrefix(newPrefix(t))), p
}

// timedPost posts and requires an answer within requestBound.
func timedPost(t *testing.T, base, key string) *reply {
	t.Helper()
	start := time.Now()
	r, err := post(t.Context(), base, "acct", key, `{"amount":100}`)
	require.NoError(t, err)
	require.Less(t, time.Since(start), requestBound, "answer %v took too long", r)
	return r
}

func TestRedisDownFailsClosed(t *testing.T) {
	t.Parallel()
	store, proxy := behindProxy(t)
	prov := newProvider(t)
	var runs atomic.Int32
	srv := serve(t, store, faultConfig, payments(prov.srv.URL, noCrash, func(string) { runs.Add(1) }))

	proxy.Down()
	r := timedPost(t, srv.URL, "k")
	assert.Equal(t, http.StatusServiceUnavailable, r.Status, "%v", r)
	assert.Equal(t, "1", r.Header.Get("Retry-After"))
	assert.Zero(t, runs.Load(), "the handler ran without the store")

	proxy.Up()
	r, _, err := untilCreated(t.Context(), srv.URL, "acct", "k", `{"amount":100}`, 10*time.Second, true)
	require.NoError(t, err)
	assert.Equal(t, int32(1), runs.Load())
	assert.Len(t, prov.charges("k"), 1)
	assert.Contains(t, string(r.Body), prov.charges("k")[0])
}

// TestRedisPausedMidPhase: Redis stops answering (connections open, nothing forwarded)
// right after the provider charged, before the phase is recorded. The request fails
// within its bound instead of hanging; once Redis answers again, a retry takes the lease
// over, runs the phase again with the same derived key, and the provider still has one
// charge.
func TestRedisPausedMidPhase(t *testing.T) {
	t.Parallel()
	store, proxy := behindProxy(t)
	prov := newProvider(t)
	var once sync.Once
	pause := func(point string) {
		if point == atProviderCalled {
			once.Do(proxy.Stall)
		}
	}
	srv := serve(t, store, faultConfig, payments(prov.srv.URL, pause, nil))

	r := timedPost(t, srv.URL, "k")
	assert.GreaterOrEqual(t, r.Status, 500, "%v", r)
	proxy.Resume()

	r, seen, err := untilCreated(t.Context(), srv.URL, "acct", "k", `{"amount":100}`, 10*time.Second, true)
	require.NoError(t, err)
	t.Logf("answers after the pause: %v", seen)
	require.Len(t, prov.charges("k"), 1)
	assert.Contains(t, string(r.Body), prov.charges("k")[0])
	again := timedPost(t, srv.URL, "k")
	assert.True(t, again.replayed())
	assert.Equal(t, r.Body, again.Body)
}

// TestRedisFaultsUnderLoad: while 20 clients each retry their own payment, the proxy cuts
// every Redis connection over and over, pauses Redis for a while, and takes it down. Every
// answer comes within its bound and is a 201, a 409 or a 5xx; once the faults stop every
// payment completes with exactly one charge, replayed identically.
func TestRedisFaultsUnderLoad(t *testing.T) {
	t.Parallel()
	store, proxy := behindProxy(t)
	prov := newProvider(t)
	srv := serve(t, store, faultConfig, payments(prov.srv.URL, noCrash, nil))

	stop := make(chan struct{})
	faults := make(chan string, 1)
	go func() { // the fault schedule: time is what it injects faults by, not a synchronisation
		defer close(faults)
		cuts := 0
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				faults <- fmt.Sprintf("%d cuts, a pause and an outage", cuts)
				return
			case <-tick.C:
			}
			switch i {
			case 5: // paused longer than a store call may take
				proxy.Stall()
			case 40:
				proxy.Resume()
			case 50:
				proxy.Down()
			case 60:
				proxy.Up()
			default:
				cuts += proxy.CutAll()
			}
		}
	}()

	const keys = 20
	var wg sync.WaitGroup
	answers := make([][]int, keys)
	firsts := make([]*reply, keys)
	for k := range keys {
		wg.Go(func() {
			key := fmt.Sprintf("pay-%d", k)
			deadline := time.Now().Add(1500 * time.Millisecond)
			for time.Now().Before(deadline) {
				start := time.Now()
				r, err := post(t.Context(), srv.URL, "acct", key, `{"amount":100}`)
				if !assert.NoError(t, err) || !assert.Less(t, time.Since(start), requestBound) {
					return
				}
				answers[k] = append(answers[k], r.Status)
				if r.Status == http.StatusCreated && firsts[k] == nil {
					firsts[k] = r
				}
				if r.Status != http.StatusCreated && r.Status != http.StatusConflict && r.Status < 500 {
					t.Errorf("%s: %v, want 201, 409 or 5xx", key, r)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	statuses := map[int]int{}
	for _, a := range answers {
		for _, st := range a {
			statuses[st]++
		}
	}
	t.Logf("faults: %s; answers by status: %v", <-faults, statuses)
	proxy.Resume()
	proxy.Up()

	for k := range keys {
		key := fmt.Sprintf("pay-%d", k)
		r, _, err := untilCreated(t.Context(), srv.URL, "acct", key, `{"amount":100}`, 10*time.Second, true)
		require.NoError(t, err, key)
		if firsts[k] != nil {
			assert.Equal(t, firsts[k].Body, r.Body, "%s: two different 201s", key)
		}
		require.Len(t, prov.charges(key), 1, "charges of %s (answers during the faults: %v)", key, answers[k])
		assert.Contains(t, string(r.Body), prov.charges(key)[0])
	}
}
