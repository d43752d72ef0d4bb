package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/core/storage"
)

// errEnded is returned by a lock used after Complete or Release.
var errEnded = errors.New("redisstore: the lock has ended (completed or released)")

// lock is a claimed key: the Redis hash's name and the fencing token this claim wrote
// into it. Every write it makes is a script that checks the token first.
type lock struct {
	s         *Store
	key       string // the Redis hash
	tok       string
	lease     time.Duration
	point     string // the recovery point when the lock was obtained
	takenOver bool
	ended     bool
}

var _ storage.Lock = (*lock)(nil)

// Context returns ctx unchanged: Redis has no transaction to share with the handler.
func (l *lock) Context(ctx context.Context) context.Context { return ctx }

// RecoveryPoint is the last recorded phase when the lock was obtained.
func (l *lock) RecoveryPoint() string { return l.point }

// Resumed reports whether the lock took over an expired lease.
func (l *lock) Resumed() bool { return l.takenOver }

// Phase renews the lease (fenced by the token: ErrLeaseLost, and fn does not run, if it was
// taken over), runs fn with ctx, then records point and renews the lease again, fenced
// once more. These are three separate steps, because fn's side effect happens outside
// Redis:
//
//   - fn runs only while the lock held the key a moment ago, with a full lease ahead.
//   - If the process dies or loses the lease between fn and the record, fn's effect
//     happened but the point was not recorded: the next holder runs the phase again. fn
//     must therefore be idempotent itself (call the provider with
//     core.Operation.DerivedKey), which is what phased mode asks of every phase.
//   - If fn fails, nothing is recorded and Phase returns fn's error; the lease is kept
//     until Complete or Release.
//
// Recording first and running fn afterwards would be the unsafe order: a crash in
// between would make the next holder skip a phase that never ran.
func (l *lock) Phase(ctx context.Context, point string, fn func(ctx context.Context) error) error {
	if l.ended {
		return errEnded
	}
	if err := l.renew(ctx, "phase "+point+": renew before running", nil); err != nil {
		return err
	}
	if fn != nil {
		if err := fn(ctx); err != nil {
			return err
		}
	}
	return l.renew(ctx, "phase "+point+": record", &point)
}

// Renew extends the lease by the claim's lease from now, fenced by the token (the renew
// script, without a point), bounded by ctx (the engine's). It reads only what the lock
// was claimed with, so it may run on another goroutine while Phase runs.
func (l *lock) Renew(ctx context.Context) error {
	return l.renew(ctx, "renew", nil)
}

// renew runs the renew script: the lease, and point when not nil. A recorded point waits
// for the replicas.
func (l *lock) renew(ctx context.Context, op string, point *string) error {
	args := []any{l.lease.Microseconds()}
	if point != nil {
		args = append(args, *point)
	}
	return l.fenced(ctx, op, renewScript, point != nil, args...)
}

// fenced runs script on the lock's key with the lock's token, then args: a script that
// answers 0 found another token there (storage.ErrLeaseLost).
func (l *lock) fenced(ctx context.Context, op string, script *redis.Script, acked bool, args ...any) error {
	n, err := l.s.run(ctx, script, l.key, acked, append([]any{l.tok}, args...)...).Int()
	switch {
	case err != nil:
		return classify(ctx, op, err)
	case n == 0:
		return fmt.Errorf("redisstore: %s: %w", op, storage.ErrLeaseLost)
	}
	return nil
}

// Complete records r while the key holds the lock's token: one script run. r is encoded
// into the call's arguments, so nothing of it is kept. After a failure the lock stays
// usable for Release.
func (l *lock) Complete(ctx context.Context, r *storage.Response) error {
	if l.ended {
		return errEnded
	}
	if r == nil {
		return errors.New("redisstore: complete: nil response")
	}
	if err := l.fenced(ctx, "complete", completeScript, true, r.Status, storage.EncodeHeader(r.Header), r.Body); err != nil {
		return err
	}
	l.ended = true
	return nil
}

// Release gives the key up: the script deletes it when no phase was ever recorded, or
// else ends the lease at once and keeps the recovery point, so the next retry takes over
// and resumes. Fenced by the token: when another lock holds the key it changes nothing
// and returns ErrLeaseLost; a key already gone (this release, sent again after its reply
// was lost, deleted it) is released. After a successful Complete it does nothing; after a
// failed one whose outcome was unknown (a cut connection) it finds the completion if it
// landed, and then changes nothing and returns nil.
func (l *lock) Release(ctx context.Context) error {
	if l.ended {
		return nil
	}
	l.ended = true
	return l.fenced(ctx, "release", releaseScript, false)
}
