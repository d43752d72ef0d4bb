package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/core/storage"
)

var _ storage.Completable = (*Store)(nil)

// beginAttemptScript counts a completer attempt: while the key is started, its lease not
// live and its attempts are ARGV[1], it records ARGV[1]+1 attempts and the next attempt
// ARGV[2] µs from now. Returns 1, or 0 changing nothing.
var beginAttemptScript = redis.NewScript(prelude + `
local k = KEYS[1]
local r = redis.call('HMGET', k, 'st', 'lu', 'at')
local now = now_us()
if r[1] ~= 'started' or (tonumber(r[2]) or 0) > now or (tonumber(r[3]) or 0) ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', k, 'at', ARGV[1] + 1, 'na', us(now + tonumber(ARGV[2])))
return 1
`)

// kept sets rec's kept request, attempts and next attempt from the fields rq, at, na. A
// request it cannot read (a format of a later version, a damaged value) is left out
// (Request nil): it must not fail the key's reads nor the completer's listing, which then
// skips the key, left to its client.
func kept(rec *storage.Record, rq, at, na any) error {
	var err error
	if req, derr := storage.DecodeRequest([]byte(str(rq))); derr == nil {
		rec.Request = req
	}
	if s := str(at); s != "" {
		if rec.Attempts, err = strconv.Atoi(s); err != nil {
			return fmt.Errorf("redisstore: key %q: stored attempts: %w", rec.Key, err)
		}
	}
	if str(na) != "" {
		if rec.NextAttempt, err = micros(na); err != nil {
			return err
		}
	}
	return nil
}

// BeginAttempt implements storage.Completable: one script run.
func (s *Store) BeginAttempt(ctx context.Context, scope, key string, seen int, backoff time.Duration) (bool, error) {
	n, err := s.run(ctx, beginAttemptScript, s.Key(scope, key), false, seen, backoff.Microseconds()).Int()
	if err != nil {
		return false, classify(ctx, "begin a completer attempt", err)
	}
	return n == 1, nil
}

// Abandoned implements storage.Completable. Redis has no index of started keys across
// hash slots, so it walks the store's keys with SCAN (on every master of a cluster, every
// shard of a Ring), as CountKeys does, and reads each one's fields, a pipeline per batch:
// its cost grows with the key space, not with the abandoned keys; run the Completer at an
// Interval that cost allows. Each node's keys are judged by that node's clock.
func (s *Store) Abandoned(ctx context.Context, q storage.AbandonedQuery) ([]*storage.Record, error) {
	if q.Limit <= 0 {
		return nil, nil
	}
	found, err := eachNode(ctx, s, func(ctx context.Context, node redis.Cmdable) ([]*storage.Record, error) {
		return s.abandonedOn(ctx, node, q)
	})
	if err != nil {
		return nil, classify(ctx, "list abandoned keys", err)
	}
	all := slices.Concat(found...)
	slices.SortFunc(all, func(a, b *storage.Record) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return all[:min(len(all), q.Limit)], nil
}

// abandonedFields are the fields Abandoned reads of each key.
var abandonedFields = []string{"st", "fp", "rp", "lu", "ca", "m", "p", "co", "sc", "h", "b", "rq", "at", "na", "rl", "s", "k"}

// abandonedOn lists the abandoned keys of one node.
func (s *Store) abandonedOn(ctx context.Context, node redis.Cmdable, q storage.AbandonedQuery) ([]*storage.Record, error) {
	now, err := node.Time(ctx).Result()
	if err != nil {
		return nil, err
	}
	var found []*storage.Record
	err = s.scanKeys(ctx, node, abandonedFields, func(f []any) error {
		if str(f[0]) != string(storage.StateStarted) || str(f[11]) == "" {
			return nil // not started (or gone since SCAN saw it), or no request kept
		}
		rec, err := record(str(f[15]), str(f[16]), f[:14])
		if err != nil {
			return err
		}
		if rec.Request == nil {
			return nil // unreadable: left to its client
		}
		ended := rec.LockedUntil
		if ended.IsZero() && str(f[14]) != "" { // released: the lease ended then
			if ended, err = micros(f[14]); err != nil {
				return err
			}
		}
		if ended.After(now.Add(-q.Grace)) || now.Sub(rec.CreatedAt) >= q.Horizon ||
			rec.Attempts >= q.MaxAttempts || rec.NextAttempt.After(now) {
			return nil
		}
		if !slices.ContainsFunc(found, func(r *storage.Record) bool { return r.Scope == rec.Scope && r.Key == rec.Key }) {
			found = append(found, rec) // SCAN may return a key twice
		}
		return nil
	})
	return found, err
}
