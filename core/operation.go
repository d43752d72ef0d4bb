package core

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idem/core/storage"
)

type operationKey struct{}

// Operation is the idempotent operation a keyed request (or an Engine.Do) runs, as its
// handler sees it. Get it with MustOperation. It is used by the request's goroutine only.
type Operation struct {
	key    string
	scope  string
	lock   storage.Lock
	point  string // last committed recovery point
	resume string // recovery point to resume after; "" once reached
	lease  lease  // whether the key is known lost; in phased mode, its renewal
	// completing: core.Completer runs the operation (Completing)
	completing bool
}

// run is the per-operation state of an executing operation, in one allocation made once
// its key is claimed: the context its work gets (its parent plus the Operation), the
// Operation (with its lease, which the engine's renewals list), the replayable request
// body, for an HTTP request the request its handler gets (the original's copy with the
// run's context), and the context of its completion or release.
type run struct {
	context.Context
	op      Operation
	body    bytes.Reader
	req     http.Request
	ctx     storeCtx
	ctxUsed bool
}

// start makes rn the state of an operation that runs under lock, and starts renewing its
// lease of length lease (phased mode; 0 in atomic mode, which has none) until the work
// returns (guard stops it).
func (rn *run) start(parent context.Context, e *Engine, c *call, lock storage.Lock, lease time.Duration, body []byte) {
	rn.Context = parent
	rn.op = Operation{key: c.Key, scope: c.Scope, lock: lock, point: lock.RecoveryPoint(), completing: c.completing}
	if rn.op.point != storage.RecoveryStarted {
		rn.op.resume = rn.op.point
	}
	rn.op.lease.start(parent, e, c, lock, lease)
	rn.body.Reset(body)
}

// unreached returns an error wrapping ErrRecoveryPointUnreached when the operation
// resumed after a recovery point that its work never reached: no phase of that name
// ran, so every later phase was skipped.
func (o *Operation) unreached() error {
	if o.resume == "" {
		return nil
	}
	return fmt.Errorf("%w: an earlier attempt committed phase %q, and this one returned without calling it "+
		"(renamed or removed?), so every phase after it was skipped", ErrRecoveryPointUnreached, o.resume)
}

// Value answers the Operation for its key and defers everything else to the parent.
func (rn *run) Value(key any) any {
	if key == (operationKey{}) {
		return &rn.op
	}
	return rn.Context.Value(key)
}

// Read and Close make run the handler's request body: an identical copy of what the
// engine read.
func (rn *run) Read(p []byte) (int, error) { return rn.body.Read(p) }

// Close does nothing: the server closes the original body.
func (rn *run) Close() error { return nil }

// MustOperation returns the operation of a keyed request. It panics with an error wrapping
// ErrNoOperation when ctx has none: use it in handlers behind the middleware on keyed
// routes, and OperationFromContext where the key is optional.
func MustOperation(ctx context.Context) *Operation {
	op, ok := OperationFromContext(ctx)
	if !ok {
		panic(fmt.Errorf("%w: is the route behind the idem middleware, with a key?", ErrNoOperation))
	}
	return op
}

// OperationFromContext returns the operation of a keyed request, and whether ctx carries
// one (it does not on a route without the middleware, nor when an optional key was absent).
func OperationFromContext(ctx context.Context) (*Operation, bool) {
	op, ok := ctx.Value(operationKey{}).(*Operation)
	return op, ok
}

// Key returns the operation's key: the request's Idempotency-Key (or the key Config.Key
// found), or the message ID given to Engine.Do.
func (o *Operation) Key() string { return o.key }

// Scope returns the scope the key lives in.
func (o *Operation) Scope() string { return o.scope }

// RecoveryPoint returns the last committed phase: RecoveryStarted until one commits.
func (o *Operation) RecoveryPoint() string { return o.point }

// Resumed reports whether this run took over an earlier attempt whose lease expired.
func (o *Operation) Resumed() bool { return o.lock.Resumed() }

// DerivedKey returns "<key>:<suffix>", an idempotency key for a call to another
// service (a payment provider, say) that is stable across retries and takeovers. It is
// unique within the operation's scope only: where one provider account serves several
// scopes (a platform charging for all its tenants), two tenants sending the same key
// would collide there; use ScopedDerivedKey.
func (o *Operation) DerivedKey(suffix string) string { return o.key + ":" + suffix }

// ScopedDerivedKey returns "<scope id>:<key>:<suffix>", a derived key that is unique
// across scopes, for a provider account shared by several scopes. The scope id is the
// first 16 hex digits of the scope's SHA-256, so the key's length does not depend on the
// scope and the scope's name is not disclosed to the provider.
func (o *Operation) ScopedDerivedKey(suffix string) string {
	sum := sha256.Sum256([]byte(o.scope))
	return hex.EncodeToString(sum[:8]) + ":" + o.key + ":" + suffix
}

// Phase runs fn as the named phase and records name as the recovery point. If fn returns
// an error, Phase returns it wrapped and keeps none of fn's writes through the store's
// transaction, in either mode.
//
// In phased mode fn runs in a transaction of its own (the store's getter, such as
// pgxstore.MustTx or gormstore.MustDB, returns it from the ctx fn receives) that commits together
// with the new recovery point, fenced by the lease: if another worker took the key over,
// nothing commits and Phase returns an error wrapping storage.ErrLeaseLost (return it; the engine
// answers 409). While the handler runs, its phases included, the engine renews the lease
// every Config.Lease/3, so a slow phase keeps the key; a renewal that finds the lease
// taken over makes the next phase commit nothing and return storage.ErrLeaseLost. Phases come
// before the handler's final writes: once the handler has opened the request's final
// transaction (the getter called outside a phase), Phase returns an error wrapping
// storage.ErrFinalTxOpen and fn does not run.
//
// A phase that committed in an earlier attempt is skipped when the operation resumes,
// together with every phase before it, so handlers must call their phases in the same
// order every time and read what a skipped phase produced from the database. A resumed
// handler that returns without calling the recorded phase at all (a phase renamed or
// removed between deploys) is not recorded: the client gets a 500 problem of kind
// ProblemCannotResume naming the phase, the logger an error, and the key keeps its
// recovery point, so a deploy that calls the phase again resumes after it.
//
// In atomic mode fn runs in the request's transaction under a savepoint: if fn fails,
// its writes are rolled back and the request's earlier writes stay.
func (o *Operation) Phase(ctx context.Context, name string, fn func(ctx context.Context) error) error {
	if name == "" || name == storage.RecoveryStarted {
		return fmt.Errorf("idem: phase %q is reserved", name)
	}
	if o.resume != "" {
		if name == o.resume {
			o.resume = ""
		}
		return nil
	}
	if err := o.lease.lost(); err != nil { // another worker has the key: fn must not run
		return fmt.Errorf("idem: phase %q: %w", name, err)
	}
	err := o.lock.Phase(ctx, name, func(ctx context.Context) error {
		if fn != nil {
			if err := fn(ctx); err != nil {
				return err
			}
		}
		return o.lease.lost() // lost while fn ran: commit nothing
	})
	if err != nil {
		if errors.Is(err, storage.ErrLeaseLost) {
			o.lease.lose(err)
		}
		return fmt.Errorf("idem: phase %q: %w", name, err)
	}
	o.point = name
	return nil
}
