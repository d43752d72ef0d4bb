package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/keyrow"
	"github.com/redis/go-redis/v9"
)

// Defaults of a Store.
const (
	// DefaultPrefix starts the name of every Redis key the store writes.
	DefaultPrefix = "idem:"
)

// Store is a storage.Store on Redis, for phased operations. It is safe for concurrent use
// and holds no state of its own beyond its settings: several instances of an application,
// each with its own Store and client, share the keys through Redis. Create it with New.
type Store struct {
	client     redis.UniversalClient
	prefix     string
	retention  time.Duration
	acks       int           // WithReplicaAcks: replicas a completion or phase waits for; 0: none
	ackTimeout time.Duration // how long it waits for them
	lastReload atomic.Int64  // when the store last asked a cluster client to reload (Unix ns)
}

var _ storage.Store = (*Store)(nil)

// Option configures a Store. An invalid option makes New panic, naming the option.
type Option func(*Store)

// WithPrefix sets the start of every Redis key the store writes, so several applications
// (or tests) can share one Redis. The rest of a key's name is a hash tag, so the prefix
// must not hold '{' or '}': Redis Cluster would hash the braces' content instead. Default:
// DefaultPrefix ("idem:").
func WithPrefix(prefix string) Option {
	if strings.ContainsAny(prefix, "{}") {
		panic(fmt.Sprintf("redisstore: WithPrefix(%q): the prefix must not hold '{' or '}' (the key's hash tag follows it)", prefix))
	}
	return func(s *Store) { s.prefix = prefix }
}

// WithRetention sets how long a key is kept: the key's TTL in Redis, set when it is
// claimed and never refreshed by a replay, and the age past which a claim treats a key
// whose lease is not live as absent. It is the one retention setting (the engine reads it
// from the store). It must be at least a millisecond. Default: storage.DefaultRetention (24h).
func WithRetention(d time.Duration) Option {
	if d < time.Millisecond {
		panic(fmt.Sprintf("redisstore: WithRetention(%s): the retention must be at least 1ms", d))
	}
	return func(s *Store) { s.retention = d }
}

// New returns a Store keeping its keys in Redis through client: a *redis.Client (one
// node), a failover client (Sentinel) or a *redis.ClusterClient. It panics if client is
// nil, or if WithReplicaAcks is given with another kind of client.
//
// The client's settings decide how long a Redis that is down or paused can hold a
// request: set ContextTimeoutEnabled so the deadline the engine puts in each call's
// context (core.Config.StoreTimeout) bounds it; without it the client's ReadTimeout and WriteTimeout do (5s by
// default), and -1 there would let a paused Redis hold requests for ever.
//
// On a cluster client the store reloads the client's view of the cluster itself when a
// call fails in a way that means a node is gone (a connection refused or cut, a timeout,
// CLUSTERDOWN, MOVED), at most every quarter of a second, so the keys of a master that
// failed over are served again as soon as its replica is promoted, whatever the client's
// ClusterStateReloadInterval.
func New(client redis.UniversalClient, opts ...Option) *Store {
	if isNil(client) {
		panic("redisstore: New: nil Redis client")
	}
	s := &Store{client: client, prefix: DefaultPrefix, retention: storage.DefaultRetention}
	for _, o := range opts {
		if o == nil {
			panic("redisstore: New: nil Option")
		}
		o(s)
	}
	if s.acks > 0 {
		switch client.(type) {
		case *redis.Client, *redis.ClusterClient:
		default:
			panic(fmt.Sprintf("redisstore: New: WithReplicaAcks needs a *redis.Client (one server or Sentinel) or a *redis.ClusterClient, not %T", client))
		}
	}
	return s
}

// isNil reports whether c is nil, or a nil pointer of a client type (go-redis's are
// pointers).
func isNil(c redis.UniversalClient) bool {
	v := reflect.ValueOf(c)
	return c == nil || v.Kind() == reflect.Pointer && v.IsNil()
}

// Retention reports how long keys are kept (WithRetention).
func (s *Store) Retention() time.Duration { return s.retention }

// SupportsAtomic reports false: Redis has no transaction to share with the handler's own
// writes, so the store runs phased mode only.
func (s *Store) SupportsAtomic() bool { return false }

// DeleteExpired deletes nothing and returns 0, nil, at no cost: Redis expires each key by
// itself when its retention has passed (its TTL is set when it is claimed), so there is
// nothing for core.Sweeper to do. Running one against this store is harmless and useless.
func (s *Store) DeleteExpired(ctx context.Context, before time.Time, limit int) (int, error) {
	return 0, nil
}

// ExpiresKeys reports true: the store is a storage.SelfExpiring one.
func (s *Store) ExpiresKeys() bool { return true }

var _ storage.SelfExpiring = (*Store)(nil)

// Key returns the name of the Redis hash that holds the key of scope and key: the prefix,
// then a hash tag of the hex SHA-256 of both, so that any bytes are safe in either, names
// have one length, and everything of one operation lives in one Cluster hash slot.
func (s *Store) Key(scope, key string) string {
	h := sha256.New()
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(scope)))) // length first: ("a", "bc") and ("ab", "c") differ
	h.Write([]byte(scope))
	h.Write([]byte(key))
	return s.prefix + "{" + hex.EncodeToString(h.Sum(nil)) + "}"
}

// newToken returns a fresh fencing token (keyrow.Token) as hex: a token of a key deleted
// and claimed again never matches the new claim's.
func newToken() string {
	t := keyrow.NewToken()
	return hex.EncodeToString(t[:])
}

// Claim implements storage.Store in one script run, one round trip: a fresh claim, a
// takeover and a replay alike. ModeAtomic fails with an error wrapping
// storage.ErrUnsupportedMode. ctx bounds the call (the engine sets its deadline).
func (s *Store) Claim(ctx context.Context, c storage.Claim) (storage.Claimed, error) {
	if c.Mode != storage.ModePhased {
		return storage.Claimed{}, fmt.Errorf("redisstore: mode %s: %w: Redis has no transaction to share, use ModePhased",
			c.Mode, storage.ErrUnsupportedMode)
	}
	ttl := max(s.retention, c.Retention)
	key, tok := s.Key(c.Scope, c.Key), newToken()
	res, err := s.run(ctx, claimScript, key, false,
		c.Fingerprint, c.Method, c.Path, tok, c.Lease.Microseconds(), c.Retention.Microseconds(), ttl.Milliseconds(),
		c.Scope, c.Key, storage.EncodeRequest(c.Request)).Slice()
	if err != nil {
		return storage.Claimed{}, classify(ctx, "claim", err)
	}
	if len(res) == 0 || (res[0] != "claimed" && len(res) < 2) {
		return storage.Claimed{}, fmt.Errorf("redisstore: claim: short reply %v", res)
	}
	l := &lock{s: s, key: key, tok: tok, lease: c.Lease, point: storage.RecoveryStarted}
	switch kind, _ := res[0].(string); kind {
	case "claimed":
		return storage.Claimed{Verdict: storage.VerdictAbsent, Lock: l}, nil
	case "takeover", "mine":
		l.point = str(res[1])
		// A claim whose reply was lost and that the client sent again finds its own token:
		// it was a takeover if the key had progress (a fresh claim starts at "started").
		l.takenOver = kind == "takeover" || l.point != storage.RecoveryStarted
		v := storage.VerdictAbsent
		if l.takenOver {
			v = storage.VerdictTakeOver
		}
		return storage.Claimed{Verdict: v, Lock: l}, nil
	case "record":
		now, err := micros(res[1])
		if err != nil {
			return storage.Claimed{}, err
		}
		rec, err := record(c.Scope, c.Key, res[2:])
		if err != nil {
			return storage.Claimed{}, err
		}
		v := storage.Decide(rec, c, now)
		if v.Claims() {
			// The script reports what it did not act on; it must decide as Decide does.
			return storage.Claimed{}, fmt.Errorf("redisstore: claim: the claim script reported key %q, which storage.Decide would %s", c.Key, v)
		}
		return storage.Claimed{Verdict: v, Record: rec}, nil
	default:
		return storage.Claimed{}, fmt.Errorf("redisstore: claim: unexpected reply %v", res[0])
	}
}

// record builds the Record of scope and key from the fields st, fp, rp, lu, ca, m, p, co,
// sc, h, b of its hash, then, when f holds them too, rq, at, na (kept).
func record(scope, key string, f []any) (*storage.Record, error) {
	if len(f) != 11 && len(f) != 14 {
		return nil, fmt.Errorf("redisstore: record reply of %d fields, want 11 or 14", len(f))
	}
	rec := &storage.Record{
		Scope:         scope,
		Key:           key,
		State:         storage.State(str(f[0])),
		Fingerprint:   []byte(str(f[1])),
		RecoveryPoint: str(f[2]),
		Method:        str(f[5]),
		Path:          str(f[6]),
	}
	var err error
	if rec.CreatedAt, err = micros(f[4]); err != nil {
		return nil, err
	}
	switch rec.State {
	case storage.StateStarted:
		if lu, err := micros(f[3]); err != nil {
			return nil, err
		} else if lu.UnixMicro() > 0 {
			rec.LockedUntil = lu
		}
	case storage.StateCompleted:
		if rec.CompletedAt, err = micros(f[7]); err != nil {
			return nil, err
		}
		status, err := strconv.Atoi(str(f[8]))
		if err != nil {
			return nil, fmt.Errorf("redisstore: key %q: stored status: %w", key, err)
		}
		h, err := storage.DecodeHeader([]byte(str(f[9])))
		if err != nil {
			return nil, fmt.Errorf("redisstore: key %q: %w", key, err)
		}
		rec.Response = &storage.Response{Status: status, Header: h, Body: []byte(str(f[10]))}
	default:
		return nil, fmt.Errorf("redisstore: key %q: unknown stored state %q", key, rec.State)
	}
	if len(f) == 14 {
		if err := kept(rec, f[11], f[12], f[13]); err != nil {
			return nil, err
		}
	}
	return rec, nil
}

// str returns a bulk string of a script's reply; a nil reply (a missing field) is "".
func str(v any) string {
	s, _ := v.(string)
	return s
}

// micros parses a stored time in microseconds since the Unix epoch.
func micros(v any) (time.Time, error) {
	n, err := strconv.ParseInt(str(v), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("redisstore: stored time %q: %w", str(v), err)
	}
	return time.UnixMicro(n), nil
}

// classify wraps a client error for the caller. Errors by which Redis could not be
// reached or refused the call wrap ErrUnavailable: the engine answers them 503 with
// Retry-After, as it answers any store failure. The refusals (loading its data set after
// a restart, a failover in progress, a cluster without a majority or missing a master, a
// script already running too long) say that nothing changed; they do not wrap
// storage.ErrTransient, which tells the engine that a twin collided and an immediate
// retry will do, while these last until Redis recovers. A connection cut or a timeout
// leaves the outcome unknown. Anything else (a nil or malformed reply, a script error)
// is a bug and is wrapped as it is.
func classify(ctx context.Context, op string, err error) error {
	switch {
	case errors.Is(err, redis.Nil):
		return fmt.Errorf("redisstore: %s: unexpected nil reply: %w", op, err)
	case redis.IsLoadingError(err), redis.IsReadOnlyError(err), redis.IsClusterDownError(err),
		redis.IsTryAgainError(err), redis.IsMasterDownError(err), redis.HasErrorPrefix(err, "BUSY"):
		return fmt.Errorf("redisstore: %s: refused by Redis, nothing changed: %w: %w", op, ErrUnavailable, err)
	case nodeGone(err), errors.Is(err, ErrNotReplicated), errors.Is(err, redis.ErrPoolTimeout),
		errors.Is(err, redis.ErrPoolExhausted), errors.Is(err, redis.ErrClosed):
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			return fmt.Errorf("redisstore: %s: %w: %w (%w)", op, ErrUnavailable, err, context.Cause(ctx))
		}
		return fmt.Errorf("redisstore: %s: %w: %w", op, ErrUnavailable, err)
	}
	return fmt.Errorf("redisstore: %s: %w", op, err)
}
