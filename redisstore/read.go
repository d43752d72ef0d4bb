package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/core/storage"
)

var _ storage.KeyCounter = (*Store)(nil)

// Lookup implements storage.Store: one script run reads the key's hash and the Redis
// server's clock, the one its leases run on.
func (s *Store) Lookup(ctx context.Context, scope, key string) (*storage.Record, time.Time, error) {
	res, err := s.run(ctx, lookupScript, s.Key(scope, key), false).Slice()
	if err != nil {
		return nil, time.Time{}, classify(ctx, "look up", err)
	}
	if len(res) == 0 {
		return nil, time.Time{}, fmt.Errorf("redisstore: look up: empty reply")
	}
	now, err := micros(res[0])
	if err != nil {
		return nil, time.Time{}, err
	}
	if len(res) == 1 {
		return nil, now, fmt.Errorf("redisstore: key %q in scope %q: %w", key, scope, storage.ErrNotFound)
	}
	rec, err := record(scope, key, res[1:])
	return rec, now, err
}

// countBatch is how many keys one SCAN step asks for and one pipeline reads.
const countBatch = 1000

// CountKeys implements storage.KeyCounter. It walks the store's keys with SCAN (on Redis
// Cluster, on every master; on a Ring, on every shard) and reads each one's state, lease
// and creation time, a pipeline per batch: it reads the whole key space under the
// prefix, an operator's query. Each node's keys are measured against that node's clock;
// Now is the latest of them. Keys claimed or deleted while it runs may or may not be
// counted.
func (s *Store) CountKeys(ctx context.Context) (*storage.KeyCounts, error) {
	counts, err := eachNode(ctx, s, s.countNode)
	if err != nil {
		return nil, classify(ctx, "count keys", err)
	}
	total := &storage.KeyCounts{}
	for _, kc := range counts {
		total.Started += kc.Started
		total.Completed += kc.Completed
		total.Live += kc.Live
		total.Expired += kc.Expired
		total.ExpiredLive += kc.ExpiredLive
		if kc.Oldest != nil && (total.Oldest == nil || kc.Oldest.CreatedAt.Before(total.Oldest.CreatedAt)) {
			total.Oldest = kc.Oldest
		}
		if kc.Now.After(total.Now) {
			total.Now = kc.Now
		}
	}
	return total, nil
}

// countNode counts the store's keys on one node.
func (s *Store) countNode(ctx context.Context, node redis.Cmdable) (*storage.KeyCounts, error) {
	t, err := node.Time(ctx).Result()
	if err != nil {
		return nil, err
	}
	kc := &storage.KeyCounts{Now: t}
	err = s.scanKeys(ctx, node, []string{"st", "lu", "ca", "s", "k"}, func(f []any) error {
		st := storage.State(str(f[0]))
		if st == "" {
			return nil // expired or deleted since SCAN saw it
		}
		lu, _ := strconv.ParseInt(str(f[1]), 10, 64)
		ca, err := micros(f[2])
		if err != nil {
			return err
		}
		live := st == storage.StateStarted && time.UnixMicro(lu).After(kc.Now)
		switch st {
		case storage.StateStarted:
			kc.Started++
			if live {
				kc.Live++
			}
		case storage.StateCompleted:
			kc.Completed++
		}
		if kc.Now.Sub(ca) > s.retention {
			kc.Expired++
			if live {
				kc.ExpiredLive++
			}
		}
		if kc.Oldest == nil || ca.Before(kc.Oldest.CreatedAt) {
			kc.Oldest = &storage.Record{Scope: str(f[3]), Key: str(f[4]), State: st, CreatedAt: ca}
		}
		return nil
	})
	return kc, err
}

// eachNode runs fn on every node that holds the store's keys: each master of a Redis
// Cluster and each shard of a Ring (concurrently, as go-redis runs them), else the one
// client. It returns what fn returned on each node.
func eachNode[T any](ctx context.Context, s *Store, fn func(context.Context, redis.Cmdable) (T, error)) ([]T, error) {
	var (
		mu  sync.Mutex
		all []T
	)
	one := func(ctx context.Context, node redis.Cmdable) error {
		v, err := fn(ctx, node)
		mu.Lock()
		defer mu.Unlock()
		all = append(all, v)
		return err
	}
	var err error
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return one(ctx, n) })
	case *redis.Ring:
		err = c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return one(ctx, n) })
	default:
		err = one(ctx, s.client)
	}
	return all, err
}

// scanKeys reads fields of every key of the store on node, a SCAN step and a pipeline
// per countBatch keys, and calls each with their values. SCAN may return a key twice,
// and a key that expired or was deleted since it saw it comes back with nil values.
func (s *Store) scanKeys(ctx context.Context, node redis.Cmdable, fields []string, each func(f []any) error) error {
	match := globEscape(s.prefix) + "{*}"
	var cursor uint64
	for {
		names, next, err := node.Scan(ctx, cursor, match, countBatch).Result()
		if err != nil {
			return err
		}
		pipe := node.Pipeline()
		cmds := make([]*redis.SliceCmd, 0, len(names))
		for _, name := range names {
			if len(name) == len(s.prefix)+2+64 { // prefix{hex SHA-256}: see Key
				cmds = append(cmds, pipe.HMGet(ctx, name, fields...))
			}
		}
		if len(cmds) > 0 {
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
		}
		for _, cmd := range cmds {
			if err := each(cmd.Val()); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// globEscape escapes the characters SCAN's MATCH pattern gives a meaning to.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
