package core

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"

	"github.com/idemkit/idem/core/storage"
)

type operationKey struct{}

// Operation is the idempotent operation a keyed request (or an Engine.Do) runs, as its
// handler sees it. Get it with OperationFrom. It is used by the request's goroutine only.
type Operation struct {
	key      string
	scope    string
	lock     storage.Lock
	point    string // last committed recovery point
	resume   string // recovery point to resume after; "" once reached
	leaseErr error
}

// run is the per-request state of an executing operation, in one allocation: the
// context the handler gets (its parent plus the Operation), the Operation, and the
// replayable request body.
type run struct {
	context.Context
	op   Operation
	body bytes.Reader
}

// requestRun is the run of an HTTP request, with the request the handler gets: the
// original's copy with the run's context.
type requestRun struct {
	run
	req http.Request
}

func newRun(parent context.Context, scope, key string, lock storage.Lock, body []byte) *run {
	rn := new(run)
	rn.start(parent, scope, key, lock, body)
	return rn
}

// start makes rn the state of an operation that runs under lock.
func (rn *run) start(parent context.Context, scope, key string, lock storage.Lock, body []byte) {
	rn.Context = parent
	rn.op = Operation{key: key, scope: scope, lock: lock, point: lock.RecoveryPoint()}
	if rn.op.point != storage.RecoveryStarted {
		rn.op.resume = rn.op.point
	}
	rn.body.Reset(body)
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

// OperationFrom returns the operation of a keyed request. It panics when ctx has none:
// use it in handlers behind the middleware on keyed routes, and OperationFromSafely
// where the key is optional.
func OperationFrom(ctx context.Context) *Operation {
	op, err := OperationFromSafely(ctx)
	if err != nil {
		panic(fmt.Sprintf("%v: is the route behind the idem middleware, with a key?", err))
	}
	return op
}

// OperationFromSafely returns the operation of a keyed request, or ErrNoOperation.
func OperationFromSafely(ctx context.Context) (*Operation, error) {
	if op, ok := ctx.Value(operationKey{}).(*Operation); ok {
		return op, nil
	}
	return nil, ErrNoOperation
}

// Key returns the operation's key: the request's Idempotency-Key (or the key Config.Key
// found), or the message ID given to Engine.Do.
func (o *Operation) Key() string { return o.key }

// Scope returns the scope the key lives in.
func (o *Operation) Scope() string { return o.scope }

// RecoveryPoint returns the last committed phase: RecoveryStarted until one commits.
func (o *Operation) RecoveryPoint() string { return o.point }

// Resumed reports whether this run took over an earlier attempt whose lease expired.
func (o *Operation) Resumed() bool { return o.lock.TakenOver() }

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

// Phase runs fn as the named phase and records name as the recovery point.
//
// In phased mode fn runs in a transaction of its own (the store's getter, such as
// pgxstore.Tx or gormstore.DB, returns it from the ctx fn receives) that commits together
// with the new recovery point, fenced by the lease: if another worker took the key over,
// nothing commits and Phase returns an error wrapping ErrLeaseLost (return it; the engine
// answers 409). A phase that committed in an earlier attempt is skipped when the
// operation resumes, so handlers must call their phases in the same order every time and
// read what a skipped phase produced from the database. In atomic mode fn simply runs in
// the request's transaction.
func (o *Operation) Phase(ctx context.Context, name string, fn func(ctx context.Context) error) error {
	if name == "" || name == storage.RecoveryStarted {
		return fmt.Errorf("idem: phase name %q is reserved", name)
	}
	if o.resume != "" {
		if name == o.resume {
			o.resume = ""
		}
		return nil
	}
	if err := o.lock.Phase(ctx, name, fn); err != nil {
		if errors.Is(err, ErrLeaseLost) {
			o.leaseErr = err
		}
		return fmt.Errorf("idem: phase %q: %w", name, err)
	}
	o.point = name
	return nil
}
