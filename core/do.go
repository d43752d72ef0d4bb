package core

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemkit/idem/core/storage"
)

// Do runs fn at most once for the message or job id in scope, across redeliveries,
// retries and instances: the function-level entry point, for code that is not an HTTP
// handler (a queue consumer, a job, a webhook processed after it was acknowledged). It
// runs the middleware's protocol (claim, execute, record) on the same store and Config:
// Mode, Lease, LeaseWait, LockWait, StoreTimeout, MaxResponseBody, Logger and Hooks apply.
//
// fingerprint identifies what the message asks for (its payload, or a hash of it; any
// bytes, Do hashes them): a redelivery of id with another fingerprint is refused. nil
// means the ID is enough. The id is held to the key contract (1–255 characters of
// printable ASCII; Config.MinKeyLength does not apply, the ID is not a client's guess).
//
// fn runs with a ctx carrying the Operation (MustOperation: phases, derived keys) and the
// store's transaction. In atomic mode (pgxstore, gormstore) that is the claim's: write
// through pgxstore.MustTx(ctx) or gormstore.MustDB(ctx), and the business write and the ID's
// record commit together or not at all. In phased mode each Operation.Phase commits on
// its own, and a retry after a failure or an expired lease resumes after the last one.
// The result is what fn chooses to keep (nothing, or a small JSON): it is recorded, at
// most MaxResponseBody bytes, and every duplicate gets it back.
//
// What Do returns:
//
//   - A fresh id: fn's result with replayed false, once fn returned nil and its outcome
//     was recorded (committed). Acknowledge the message now.
//   - A completed id with the same fingerprint: the recorded result, replayed true; fn
//     does not run. Acknowledge the message: it was a duplicate.
//   - An id in flight (another consumer runs it now; in atomic mode Do waits up to
//     LockWait first, in phased mode up to LeaseWait), or whose lease a phase of fn found
//     taken over: an error wrapping storage.ErrInProgress. Redeliver later (a NAK with a delay).
//   - An id recorded with another fingerprint: an error wrapping ErrKeyReused. The
//     message is not the one first seen under its ID; it will never succeed (terminate it).
//   - fn returned an error: the ID is released (atomic mode rolls fn's writes back) and
//     the error is returned wrapped, so a redelivery runs fn again. A panic in fn releases
//     the ID too and is re-raised. A ctx cancelled before fn returned, or a result over
//     MaxResponseBody, releases the ID and returns an error saying so.
//   - A redelivery that resumed after a phase an earlier attempt committed, and whose fn
//     returned without calling that phase (renamed or removed): an error wrapping
//     ErrRecoveryPointUnreached; nothing is recorded and the ID keeps its recovery
//     point, so a fixed deploy resumes after it.
//   - The store failed or could not record the outcome: an error wrapping the store's
//     (storage.ErrTransient for a serialization failure: retry at once). Nothing ran unprotected;
//     redeliver later.
//   - An empty scope: ErrEmptyScope; a scope no store can hold (see MaxScopeLength):
//     ErrInvalidScope; a malformed id: ErrInvalidKey. Each is the caller's bug; nothing
//     is claimed.
//
// Hooks and the Logger see Do's outcomes as they see a request's, with empty Method and
// Path and a Status of 0.
func (e *Engine) Do(ctx context.Context, scope, id string, fingerprint []byte, fn func(ctx context.Context) ([]byte, error)) (result []byte, replayed bool, err error) {
	c := &call{start: e.now(), Claim: storage.Claim{Scope: scope, Key: id, Fingerprint: doFingerprint(fingerprint), Mode: e.mode,
		Lease: e.cfg.Lease, LockWait: e.cfg.LockWait, Retention: e.retention, Timeout: e.cfg.LockWait + e.cfg.StoreTimeout}}
	if err := checkScope(scope); err != nil {
		c.Scope = clip(scope)
		e.observe(ctx, c, OutcomeRejected, 0, err)
		return nil, false, fmt.Errorf("idem: Do %q: %w", id, err)
	}
	if err := checkKey(id, 1); err != nil {
		e.observe(ctx, c, OutcomeRejected, 0, err)
		return nil, false, fmt.Errorf("idem: Do: message ID %q: %w", id, err)
	}
	lock, rec, err := e.claim(ctx, c)
	switch {
	case err != nil:
		return nil, false, e.doStoreFailed(ctx, c, err)
	case rec != nil:
		return e.doHeld(ctx, c, rec)
	}
	return e.doRun(ctx, c, lock, fn)
}

// doDomain separates Do's fingerprints from requests': a message ID never matches a
// request's key recorded in the same scope.
const doDomain = "idem.Do\x00"

func doFingerprint(fp []byte) []byte {
	h := sha256.New()
	h.Write([]byte(doDomain))
	h.Write(fp)
	return h.Sum(make([]byte, 0, sha256.Size))
}

// doHeld answers a Do whose ID rec holds, as storage.Decide says.
func (e *Engine) doHeld(ctx context.Context, c *call, rec *storage.Record) ([]byte, bool, error) {
	switch v := storage.Decide(rec, c.Claim, time.Time{}); {
	case v == storage.VerdictMismatch:
		e.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "idem: message ID reused with another fingerprint; returning ErrKeyReused", e.attrs(c, ErrKeyReused)...)
		e.observe(ctx, c, OutcomeMismatch, 0, ErrKeyReused)
		return nil, false, fmt.Errorf("idem: Do %q: %w", c.Key, ErrKeyReused)
	case v != storage.VerdictReplay || rec.Response == nil:
		return nil, false, e.doInProgress(ctx, c, storage.ErrInProgress)
	}
	e.observe(ctx, c, OutcomeReplayed, 0, nil)
	return bytes.Clone(rec.Response.Body), true, nil
}

// doRun runs fn under lock and records its result; when a twin recorded the ID first,
// its result is returned instead, as a replay.
func (e *Engine) doRun(ctx context.Context, c *call, lock storage.Lock, fn func(context.Context) ([]byte, error)) ([]byte, bool, error) {
	e.observe(ctx, c, e.started(ctx, c, lock), 0, nil)

	rn := newRun(ctx, c.Scope, c.Key, lock, e.renewedLease(), nil)
	var (
		result []byte
		ferr   error
	)
	e.guard(ctx, c, lock, &rn.op, func() { result, ferr = fn(lock.Context(rn)) })

	rctx := context.WithoutCancel(ctx) // fn is done: recording must not be cut short
	if err := interrupted(ctx, &rn.op); err != nil {
		if errors.Is(err, storage.ErrLeaseLost) {
			return nil, false, e.doInProgress(ctx, c, withRelease(err, e.release(rctx, c, lock)))
		}
		e.observe(ctx, c, OutcomeRolledBack, 0, e.rolledBack(rctx, c, lock, err))
		return nil, false, fmt.Errorf("idem: Do %q: cancelled before it finished; nothing was recorded: %w", c.Key, err)
	}
	if ferr != nil {
		e.observe(ctx, c, OutcomeRolledBack, 0, e.rolledBack(rctx, c, lock, ferr))
		return nil, false, fmt.Errorf("idem: Do %q: %w", c.Key, ferr)
	}
	if err := rn.op.unreached(); err != nil {
		err = e.cannotResume(rctx, c, lock, rn.op.resume, err)
		e.observe(ctx, c, OutcomeRolledBack, 0, err)
		return nil, false, fmt.Errorf("idem: Do %q: nothing was recorded: %w", c.Key, err)
	}
	if int64(len(result)) > e.cfg.MaxResponseBody {
		err := fmt.Errorf("idem: Do %q: the result of %d bytes is over MaxResponseBody (%d); nothing was recorded", c.Key, len(result), e.cfg.MaxResponseBody)
		e.observe(ctx, c, OutcomeRolledBack, 0, e.rolledBack(rctx, c, lock, err))
		return nil, false, err
	}
	if err := e.complete(rctx, c, lock, &storage.Response{Status: http.StatusOK, Body: result}); err != nil {
		if errors.Is(err, storage.ErrLeaseLost) {
			return nil, false, e.doInProgress(ctx, c, err)
		}
		if rec := e.twinRecord(rctx, c, err); rec != nil {
			return e.doHeld(ctx, c, rec)
		}
		e.cfg.Logger.LogAttrs(rctx, slog.LevelError, "idem: recording the outcome of Do failed; the caller gets an error and may retry", e.attrs(c, err)...)
		e.observe(ctx, c, OutcomeStoreError, 0, err)
		return nil, false, fmt.Errorf("idem: Do %q: the outcome could not be recorded or confirmed; retry: %w", c.Key, err)
	}
	e.observe(ctx, c, OutcomeCompleted, 0, nil)
	return result, false, nil
}

// doInProgress reports an ID another worker holds. err wraps storage.ErrInProgress or
// storage.ErrLeaseLost; the error returned wraps storage.ErrInProgress either way.
func (e *Engine) doInProgress(ctx context.Context, c *call, err error) error {
	e.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "idem: message ID in progress; returning storage.ErrInProgress", e.attrs(c, err)...)
	e.observe(ctx, c, OutcomeConflict, 0, err)
	if errors.Is(err, storage.ErrInProgress) {
		return fmt.Errorf("idem: Do %q: %w", c.Key, err)
	}
	return fmt.Errorf("idem: Do %q: %w: %w", c.Key, storage.ErrInProgress, err)
}

// doStoreFailed reports a claim the store could not make.
func (e *Engine) doStoreFailed(ctx context.Context, c *call, err error) error {
	switch {
	case errors.Is(err, storage.ErrInProgress):
		return e.doInProgress(ctx, c, err)
	case errors.Is(err, storage.ErrTransient):
		e.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "idem: Do collided with a twin and rolled back; returning storage.ErrTransient", e.attrs(c, err)...)
		e.observe(ctx, c, OutcomeConflict, 0, err)
	default:
		e.cfg.Logger.LogAttrs(ctx, slog.LevelError, "idem: store failed; Do did not run the function unprotected", e.attrs(c, err)...)
		e.observe(ctx, c, OutcomeStoreError, 0, err)
	}
	return fmt.Errorf("idem: Do %q: %w", c.Key, err)
}
