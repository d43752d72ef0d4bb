package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/redistopo"
	"github.com/idemkit/idem/redisstore"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	code := m.Run()
	if err := redistopo.StopShared(); err != nil { // before the leak check: each server has a goroutine
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 {
		// A client whose dials to a killed node failed keeps one goroutine that retries
		// once a second; it ends within that second of the client's Close.
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// envAddr names the Redis the tests use. Default: defaultAddr.
const (
	envAddr     = "TEST_REDIS_ADDR"
	defaultAddr = "127.0.0.1:6379"
	startHint   = `redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no`
)

// redisAddr is the address of the test Redis.
func redisAddr() string {
	if a := os.Getenv(envAddr); a != "" {
		return a
	}
	return defaultAddr
}

// newClient returns a client of the test Redis at addr ("" for redisAddr()), closed when
// the test ends. It fails the test, saying how to start Redis, when none answers.
func newClient(t testing.TB, addr string, tweak ...func(*redis.Options)) *redis.Client {
	t.Helper()
	if addr == "" {
		addr = redisAddr()
	}
	opt := &redis.Options{Addr: addr, ContextTimeoutEnabled: true}
	for _, f := range tweak {
		f(opt)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil && addr == redisAddr() {
		t.Fatalf("no Redis at %s (%v): start one with\n\t%s\nor set %s", addr, err, startHint, envAddr)
	}
	return c
}

// run is this test binary's run: every prefix starts with it, so runs never see each
// other's keys.
var run = func() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

var prefixes atomic.Int64

// newPrefix returns a key prefix no other store of any run uses. The test's cleanup
// deletes its keys.
func newPrefix(t testing.TB) string {
	t.Helper()
	p := fmt.Sprintf("idemtest:%s:%d:", run, prefixes.Add(1))
	t.Cleanup(func() { dropPrefix(p) })
	return p
}

// dropPrefix deletes every key starting with prefix.
func dropPrefix(prefix string) {
	c := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		c.Del(ctx, iter.Val())
	}
}

// newStore returns a store on the test Redis with a prefix of its own.
func newStore(t testing.TB, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	return redisstore.New(newClient(t, ""), append([]redisstore.Option{redisstore.WithPrefix(newPrefix(t))}, opts...)...)
}
