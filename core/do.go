package core

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"

	"github.com/idemkit/idem/core/storage"
)

// Do runs fn at most once for the message or job id in scope, across redeliveries,
// retries and instances: the function-level entry point, for code that is not an HTTP
// handler (a queue consumer, a job, a webhook processed after it was acknowledged). It
// runs the very protocol a request runs (claim, execute, record, answer) on the same
// store and Config: Mode, Lease, LeaseWait, LockWait, StoreTimeout, MaxResponseBody,
// Logger and Hooks apply.
//
// fingerprint identifies what the message asks for (its payload, or a hash of it; any
// bytes, Do hashes them): a redelivery of id with another fingerprint is refused. nil
// means the ID is enough. The id is held to the key contract (1–255 characters of
// printable ASCII; Config.MinKeyLength does not apply, the ID is not a client's guess).
//
// fn runs with a ctx carrying the Operation (MustOperation: phases, derived keys) and the
// store's transaction. In atomic mode (pgxstore, gormstore) that is the claim's: write
// through pgxstore.MustTx(ctx) or gormstore.MustDB(ctx), and the business write and the
// ID's record commit together or not at all. In phased mode each Operation.Phase commits on
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
//     LockWait first, in phased mode up to LeaseWait), or whose lease fn's worker found
//     taken over: an error wrapping storage.ErrInProgress. Redeliver later (a NAK with a
//     delay).
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
//     (storage.ErrTransient for a serialization failure: retry at once). Nothing ran
//     unprotected; redeliver later.
//   - A malformed id: ErrInvalidKey; a scope the package documentation's Scope section
//     refuses: ErrEmptyScope or ErrInvalidScope. Nothing is claimed.
//
// Hooks and the Logger see Do's outcomes as they see a request's, with empty Method and
// Path and a Status of 0.
func (e *Engine) Do(ctx context.Context, scope, id string, fingerprint []byte, fn func(ctx context.Context) ([]byte, error)) (result []byte, replayed bool, err error) {
	c := &call{start: e.now(), Claim: storage.Claim{Key: id}}
	if err := checkScope(scope); err != nil {
		return e.doAnswer(ctx, c, nil, e.badScope(ctx, c, scope, err))
	}
	c.Scope = scope
	if err := checkKey(id, 1); err != nil {
		e.observe(ctx, c, OutcomeRejected, 0, err)
		return nil, false, fmt.Errorf("idem: Do: message ID %q: %w", id, err)
	}
	c.Claim = e.claimOf(scope, id, doFingerprint(c.fp[:0], fingerprint), "", "")
	out := e.protocol(ctx, c, nil, func(rn *run, ctx context.Context) (*storage.Response, error) {
		res, err := fn(ctx)
		switch {
		case err != nil:
			return nil, err
		case int64(len(res)) > e.cfg.MaxResponseBody:
			return nil, fmt.Errorf("idem: the result of %d bytes is over MaxResponseBody (%d); nothing was recorded", len(res), e.cfg.MaxResponseBody)
		}
		result = res
		return &storage.Response{Status: http.StatusOK, Body: res}, nil
	})
	return e.doAnswer(ctx, c, result, out)
}

// doAnswer renders out, the protocol's outcome for a Do, as Do's return values (result
// is fn's, when it ran), and reports the final event.
func (e *Engine) doAnswer(ctx context.Context, c *call, result []byte, out outcome) ([]byte, bool, error) {
	e.observe(ctx, c, out.event, 0, out.err)
	switch {
	case out.replay != nil:
		return bytes.Clone(out.replay.Body), true, nil
	case out.event == OutcomeCompleted:
		return result, false, nil
	case out.event == OutcomeCancelled:
		return nil, false, fmt.Errorf("idem: Do %q: cancelled before it finished; nothing was recorded: %w", c.Key, out.err)
	}
	return nil, false, fmt.Errorf("idem: Do %q: %w", c.Key, out.err)
}

// doDomain separates Do's fingerprints from requests': a message ID never matches a
// request's key recorded in the same scope.
const doDomain = "idem.Do\x00"

// doFingerprint appends the claim's fingerprint of a Do with fingerprint fp to dst.
func doFingerprint(dst, fp []byte) []byte {
	h := sha256.New()
	h.Write([]byte(doDomain))
	h.Write(fp)
	return h.Sum(dst)
}
