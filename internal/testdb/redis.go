package testdb

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	defaultRedis = "127.0.0.1:6379"
	startRedis   = `start it with: redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no`
)

// RedisAddr is the Redis tests use: TEST_REDIS_ADDR or the local default.
func RedisAddr() string {
	if a := os.Getenv("TEST_REDIS_ADDR"); a != "" {
		return a
	}
	return defaultRedis
}

// Redis returns a client of the test Redis, closed at cleanup, and a key prefix of the
// test's own whose keys are deleted at cleanup, so tests sharing the server run in
// parallel and re-run cleanly. It fails the test, saying how to start Redis, when none
// answers.
func Redis(t testing.TB) (client *redis.Client, prefix string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: RedisAddr(), ContextTimeoutEnabled: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		t.Fatalf("testdb: Redis at %s is unreachable (%v); %s", RedisAddr(), err, startRedis)
	}
	prefix = Name("idemtest") + ":"
	t.Cleanup(func() {
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	return c, prefix
}
