package reliability_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/redisstore"
)

// redisServer is a private redis-server on a free port, without persistence, killed at
// cleanup: a restart loses every key.
type redisServer struct {
	t    *testing.T
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

const redisStart = `redis-server --port N --bind 127.0.0.1 --save "" --appendonly no`

func startRedisServer(t *testing.T) *redisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is not installed (%v): the Redis restart tests run their own, as %s", err, redisStart)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	s := &redisServer{t: t, port: port}
	s.start()
	t.Cleanup(s.kill)
	return s
}

func (s *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// start runs redis-server and waits until it answers PING.
func (s *redisServer) start() {
	s.t.Helper()
	s.cmd = exec.Command("redis-server", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "no")
	s.cmd.Stderr = os.Stderr
	require.NoError(s.t, s.cmd.Start(), "start %s", redisStart)
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(s.cmd, s.done)
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		select {
		case <-s.done:
			s.t.Fatalf("redis-server on port %d exited at start (%s)", s.port, redisStart)
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on port %d never answered PING: %v", s.port, err)
		}
		time.Sleep(10 * time.Millisecond) // polling the new server
	}
}

// kill SIGKILLs the server and waits for it to end: every key is gone.
func (s *redisServer) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// provider is a payment provider with its own idempotency: a charge request with a key it
// has seen returns the charge it made then. It lives outside Redis and survives restarts.
type provider struct {
	mu      sync.Mutex
	charges map[string]string // idempotency key → charge id
	calls   int
}

func (p *provider) charge(key string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if id, ok := p.charges[key]; ok {
		return id
	}
	id := fmt.Sprintf("ch_%04d", len(p.charges)+1)
	p.charges[key] = id
	return id
}

func (p *provider) made() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.charges)
}

// redisApp is a phased payments application on redisstore: one phase charges the
// provider with op.DerivedKey("charge"), then the response names the charge.
type redisApp struct {
	*endpoint
	prov   provider
	calls  atomic.Int64
	inside atomic.Pointer[func(key string)] // runs in the phase, after the charge
}

func newRedisApp(t *testing.T, s *redisServer) *redisApp {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: s.addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	eng, err := core.New(core.Config{Store: redisstore.New(client, redisstore.WithPrefix("rel:")), Mode: core.ModePhased,
		StoreTimeout: time.Second, Lease: 10 * time.Second})
	require.NoError(t, err)
	a := &redisApp{prov: provider{charges: map[string]string{}}}
	pay := func(w http.ResponseWriter, r *http.Request) {
		a.calls.Add(1)
		ctx := r.Context()
		op := core.MustOperation(ctx)
		var charge string
		err := op.Phase(ctx, "charged", func(ctx context.Context) error {
			charge = a.prov.charge(op.DerivedKey("charge"))
			if f := a.inside.Load(); f != nil {
				(*f)(op.Key())
			}
			return nil
		})
		if err != nil {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "try again: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if charge == "" { // resumed after "charged": the provider knows the charge by its key
			charge = a.prov.charge(op.DerivedKey("charge"))
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]string{"key": op.Key(), "charge": charge})
	}
	a.endpoint = newEndpoint(t, eng.Middleware(func(r *http.Request) string { return r.Header.Get("X-Account") })(http.HandlerFunc(pay)))
	return a
}

func chargeOf(t *testing.T, r reply) string {
	t.Helper()
	var b struct{ Charge string }
	require.NoError(t, json.Unmarshal(r.body, &b), "%v", r)
	require.NotEmpty(t, b.Charge, "%v", r)
	return b.Charge
}

// retryable reports whether r is an answer a client retries: 409 or 503 with Retry-After.
func retryable(r reply) bool {
	return r.err == nil && (r.status == http.StatusConflict || r.status == http.StatusServiceUnavailable) && r.header.Get("Retry-After") != ""
}

// TestRedisRestartMidPhase: Redis (no persistence) is killed while a phased request is
// inside its phase, after it charged the provider, and restarted empty. Every key is lost
// with it, so what redisstore guarantees becomes: a key lost with Redis is a key never
// claimed, and the provider's own idempotency on op.DerivedKey is what stops a second
// charge. While Redis is down every request answers 503 + Retry-After at once (bounded by
// StoreTimeout), the handler not run; the request caught mid-phase answers a retryable
// problem; once Redis is back, every retry gets a 201 naming the charge made the first
// time, and the provider made one charge per key.
func TestRedisRestartMidPhase(t *testing.T) {
	t.Parallel()
	s := startRedisServer(t)
	a := newRedisApp(t, s)

	before := map[string]string{}
	for i := range 3 {
		key := fmt.Sprintf("before-%d", i)
		r := a.post("acct", key, "", jsonBody(i))
		require.Equal(t, http.StatusCreated, r.status, "%s: %v", key, r)
		before[key] = chargeOf(t, r)
	}

	// The restart, from inside the phase of "mid": kill, answer requests while Redis is
	// down, start it again, then let the phase go on.
	down, resume := make(chan struct{}), make(chan struct{})
	inside := func(key string) {
		if key != "mid" {
			return
		}
		s.kill()
		close(down)
		<-resume
	}
	a.inside.Store(&inside)
	mid := make(chan reply, 1)
	go func() { mid <- a.post("acct", "mid", "", jsonBody(9)) }()
	select {
	case <-down:
	case r := <-mid:
		t.Fatalf("mid returned before its phase: %v", r)
	case <-time.After(unbounded):
		t.Fatal("mid never reached its phase")
	}
	calls := a.calls.Load()
	for i, key := range []string{"down-0", "before-0"} {
		ch := make(chan reply, 1)
		began := time.Now()
		go func() { ch <- a.post("acct", key, "", jsonBody(i)) }()
		r, ok := waitReply(ch, unbounded)
		if !ok {
			close(resume)
			t.Fatalf("%s: no answer after %v while Redis was down: unbounded", key, unbounded)
		}
		mustProblem(t, r, http.StatusServiceUnavailable, core.ProblemStoreUnavailable, true)
		t.Logf("%s while Redis was down: 503 in %v (StoreTimeout 1s)", key, time.Since(began).Round(time.Millisecond))
	}
	assert.Equal(t, calls, a.calls.Load(), "a handler ran while Redis was down")
	s.start()
	close(resume)
	r, ok := waitReply(mid, unbounded)
	require.True(t, ok, "mid: no answer after the restart")
	assert.True(t, retryable(r), "mid, whose phase outlived its key: %v, want 409 or 503 + Retry-After", r)
	t.Logf("mid, caught in its phase by the restart: %d %s", r.status, r.body)
	a.inside.Store(nil)

	rs := a.retryUntilDone("acct", "mid", "", jsonBody(9), 30)
	last := rs[len(rs)-1]
	require.Equal(t, http.StatusCreated, last.status, "mid after the restart: %v", rs)
	assert.False(t, last.replayed(), "mid cannot be replayed: Redis lost it")
	assert.Equal(t, "ch_0004", chargeOf(t, last), "mid: the charge made before the restart")
	// The keys completed before the restart are gone too: they run again, and the provider
	// hands back the charge it made the first time.
	for key, charge := range before {
		r := a.post("acct", key, "", jsonBody(int(key[len(key)-1]-'0')))
		require.Equal(t, http.StatusCreated, r.status, "%s after the restart: %v", key, r)
		assert.False(t, r.replayed(), "%s: replayed from an empty Redis", key)
		assert.Equal(t, charge, chargeOf(t, r), "%s: a second charge", key)
	}
	rs = a.retryUntilDone("acct", "down-0", "", jsonBody(0), 30)
	require.Equal(t, http.StatusCreated, rs[len(rs)-1].status, "down-0 after the restart: %v", rs)
	assert.Equal(t, 5, a.prov.made(), "charges: one per key")
}

// TestRedisRestartUnderLoad: parallel clients send phased payments while Redis is killed
// and restarted empty, twice. Every answer comes in bounded time; every key ends with a
// 201 after its retries; the provider made exactly one charge per key and every 201 of a
// key names that charge.
func TestRedisRestartUnderLoad(t *testing.T) {
	t.Parallel()
	const clients, perClient = 6, 40
	s := startRedisServer(t)
	a := newRedisApp(t, s)
	var done atomic.Int64
	restarts := make(chan struct{})
	go func() {
		defer close(restarts)
		for _, at := range []int64{clients * perClient / 3, 2 * clients * perClient / 3} {
			deadline := time.Now().Add(2 * time.Minute)
			for done.Load() < at && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond) // polling the load's progress
			}
			s.kill()
			s.start()
		}
	}()
	var mu sync.Mutex
	statuses := map[int]int{}
	var slowest time.Duration
	charges := map[string]map[string]bool{}
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perClient {
				key := fmt.Sprintf("load-%d-%03d", c, i)
				for attempt := 0; ; attempt++ {
					began := time.Now()
					r := a.post("acct", key, "", jsonBody(i))
					took := time.Since(began)
					mu.Lock()
					statuses[r.status]++
					slowest = max(slowest, took)
					if r.err == nil && r.status == http.StatusCreated {
						var b struct{ Charge string }
						_ = json.Unmarshal(r.body, &b)
						if charges[key] == nil {
							charges[key] = map[string]bool{}
						}
						charges[key][b.Charge] = true
					}
					mu.Unlock()
					if r.err == nil && r.status == http.StatusCreated {
						break
					}
					if !retryable(r) || attempt == 100 {
						t.Errorf("%s: %v", key, r)
						break
					}
					time.Sleep(20 * time.Millisecond) // the client's back-off
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	<-restarts
	t.Logf("answers by status over two restarts: %v; slowest answer %v", statuses, slowest.Round(time.Millisecond))
	assert.Less(t, slowest, unbounded, "an answer took unbounded time")
	assert.Len(t, charges, clients*perClient, "keys with a 201")
	for key, ids := range charges {
		assert.Len(t, ids, 1, "%s: its 201s name %d charges", key, len(ids))
	}
	assert.Equal(t, clients*perClient, a.prov.made(), "charges: one per key")
}
