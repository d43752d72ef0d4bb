package redisstore

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrUnavailable reports that Redis could not be reached, did not answer in time, or
// refused a call it could not serve then (loading its data, failing over, a cluster
// missing a master or a majority, a script running too long), or that too few replicas
// acknowledged a change (ErrNotReplicated). The call's outcome may be unknown, but
// retrying later with the same key is safe: the engine answers 503 with Retry-After for
// a claim (store-unavailable) or a completion (not-recorded), and a handler whose
// Phase returns it should answer 503 with Retry-After too, never 500. The store's
// errors that wrap it wrap the driver's error as well.
var ErrUnavailable = errors.New("redisstore: Redis unavailable, retry later")

// reloadEvery is the least time between two reloads of a cluster client's view of the
// topology that the store asks for.
const reloadEvery = 250 * time.Millisecond

// run runs script on key and returns its reply. With acked and WithReplicaAcks, it then
// waits for the replicas (runAcked). An error that means a node is gone makes the store
// refresh the client's view of the cluster (noticeFailure).
func (s *Store) run(ctx context.Context, script *redis.Script, key string, acked bool, args ...any) *redis.Cmd {
	var cmd *redis.Cmd
	if acked && s.acks > 0 {
		cmd = s.runAcked(ctx, script, key, args)
	} else {
		cmd = script.Run(ctx, s.client, []string{key}, args...)
	}
	if err := cmd.Err(); err != nil {
		s.noticeFailure(err)
	}
	return cmd
}

// noticeFailure asks a cluster client to reload its view of the cluster (which node
// serves which slots) when err means that a node is gone or the cluster changed, at most
// once per reloadEvery. go-redis reloads it by itself only after a MOVED or READONLY
// reply, which a dead master never sends, or every ClusterStateReloadInterval (a minute
// by default): without this, the keys of a failed-over master would fail until then,
// though its replica was promoted seconds after.
func (s *Store) noticeFailure(err error) {
	c, ok := s.client.(*redis.ClusterClient)
	if !ok || !nodeGone(err) {
		return
	}
	now := time.Now().UnixNano()
	last := s.lastReload.Load()
	if now-last < int64(reloadEvery) || !s.lastReload.CompareAndSwap(last, now) {
		return
	}
	c.ReloadState(context.Background()) // in the background; the context is not used
}

// nodeGone reports whether err means that the node a command went to is gone, or no
// longer serves the key: a connection refused, reset or timed out, or a reply by which
// the cluster says it changed (CLUSTERDOWN, MOVED, ASK, TRYAGAIN, READONLY, MASTERDOWN).
// A cancelled context (the client hung up) is not.
func nodeGone(err error) bool {
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return false
	case errors.As(err, &ne), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		redis.IsClusterDownError(err), redis.IsTryAgainError(err), redis.IsReadOnlyError(err), redis.IsMasterDownError(err):
		return true
	}
	if _, moved := redis.IsMovedError(err); moved {
		return true
	}
	_, ask := redis.IsAskError(err)
	return ask
}
