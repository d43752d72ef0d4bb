package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotReplicated reports that a state change was written on the key's master but fewer
// replicas than WithReplicaAcks asks for acknowledged it in time: a failover could still
// take it back. The engine answers 503 not-recorded; the client retries with the same key
// and gets the recorded response if the change survived, or a run from the last recorded
// phase if it did not.
var ErrNotReplicated = errors.New("redisstore: not acknowledged by enough replicas")

// WithReplicaAcks makes every state change that a client acts on — a completion, and the
// recovery point a phase records — wait until n replicas of the key's master have
// acknowledged it, for at most timeout: Redis's WAIT, pipelined after the script on the
// same connection to the key's own master (ClusterClient.MasterForKey on a cluster).
// When fewer answer in time, the call fails with an error wrapping ErrNotReplicated, and
// the client gets 503 not-recorded instead of a response that a failover could take back
// (replication is asynchronous: without this option a completion acknowledged a moment
// before its master dies can be missing on the promoted replica, and its retry runs the
// handler again).
//
// It costs one WAIT per completion and per phase: about one replication round trip
// (BENCHMARKS.md). It needs a *redis.Client (one server, or a failover client on
// Sentinel) or a *redis.ClusterClient; New panics on another client. n must be at least 1
// and timeout at least a millisecond (WAIT 0 would wait for ever); keep timeout below the
// client's ReadTimeout and core.Config.StoreTimeout, which bound the wait too. While
// fewer than n replicas are up, every completion answers 503: choose n below the number
// of replicas each master has, or accept that.
func WithReplicaAcks(n int, timeout time.Duration) Option {
	if n < 1 {
		panic(fmt.Sprintf("redisstore: WithReplicaAcks(%d, %s): n must be at least 1", n, timeout))
	}
	if timeout < time.Millisecond {
		panic(fmt.Sprintf("redisstore: WithReplicaAcks(%d, %s): the timeout must be at least 1ms", n, timeout))
	}
	return func(s *Store) { s.acks, s.ackTimeout = n, timeout }
}

// runAcked runs script on the connection of key's master, pipelined with WAIT for
// s.acks replicas. A reply of 0 means that the script's fence refused the change: it
// wrote nothing, so there is nothing to wait for. Otherwise too few acknowledgements make
// the command's error wrap ErrNotReplicated; the script's change stays on the master.
func (s *Store) runAcked(ctx context.Context, script *redis.Script, key string, args []any) *redis.Cmd {
	node, err := s.master(ctx, key)
	if err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	pipe := func(eval func(context.Context, redis.Scripter, []string, ...any) *redis.Cmd) (cmd, wait *redis.Cmd) {
		_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
			cmd = eval(ctx, p, []string{key}, args...)
			wait = p.Do(ctx, "wait", s.acks, s.ackTimeout.Milliseconds())
			return nil
		})
		return cmd, wait
	}
	cmd, wait := pipe(script.EvalSha)
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") { // a master that lost its script cache: a restart, a promoted replica
		cmd, wait = pipe(script.Eval)
	}
	if cmd.Err() != nil {
		return cmd
	}
	if n, ok := cmd.Val().(int64); ok && n == 0 {
		return cmd
	}
	switch n, err := wait.Int64(); {
	case err != nil:
		cmd.SetErr(fmt.Errorf("waiting for %d replicas: %w", s.acks, err))
	case n < int64(s.acks):
		cmd.SetErr(fmt.Errorf("%d of %d replicas acknowledged within %s: %w", n, s.acks, s.ackTimeout, ErrNotReplicated))
	}
	return cmd
}

// master returns a client whose connections go to key's master: the cluster node that
// serves key's slot, or the store's client itself (one server, or a failover client,
// which connects to the master Sentinel names). New accepts no other client with
// WithReplicaAcks.
func (s *Store) master(ctx context.Context, key string) (*redis.Client, error) {
	if c, ok := s.client.(*redis.ClusterClient); ok {
		return c.MasterForKey(ctx, key)
	}
	return s.client.(*redis.Client), nil
}
