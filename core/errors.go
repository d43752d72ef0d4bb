package core

import (
	"errors"

	"github.com/idemkit/idem/core/storage"
)

// Sentinel errors. Stores and adapters wrap them with %w, so callers test with errors.Is.
var (
	// ErrInvalidKey reports a malformed Idempotency-Key header (empty, too long, not
	// printable ASCII, ambiguous, or sent more than once). The client gets 400.
	ErrInvalidKey = errors.New("idem: invalid idempotency key")

	// ErrKeyMissing reports a request that needs an Idempotency-Key and has none.
	// The client gets 400.
	ErrKeyMissing = errors.New("idem: idempotency key missing")

	// ErrKeyReused reports a key sent again with a different request (method, path or
	// body). The client gets 422.
	ErrKeyReused = errors.New("idem: idempotency key reused with a different request")

	// ErrBodyTooLarge reports a request body over Config.MaxRequestBody. The client gets 413.
	ErrBodyTooLarge = errors.New("idem: request body too large")

	// ErrNoOperation is what OperationFrom panics with, wrapped, when the context carries
	// no idempotent operation (the route is not keyed, or the key was optional and absent).
	ErrNoOperation = errors.New("idem: no idempotent operation in context")

	// ErrEmptyScope reports a scope function that returned "" for a keyed request: the
	// middleware probably runs before authentication. The request is refused with a 500
	// problem (ProblemMisconfigured), never run in a key space shared by every caller.
	ErrEmptyScope = errors.New("idem: empty scope")

	// ErrInvalidScope reports a scope function that returned a scope no store can hold:
	// over MaxScopeLength bytes, not valid UTF-8, or holding a NUL byte. Like an empty
	// scope it is the application's bug: the request is refused with a 500 problem
	// (ProblemMisconfigured), and Do returns it without claiming anything.
	ErrInvalidScope = errors.New("idem: invalid scope")

	// ErrInvalidConfig is wrapped by Config.Validate; the message names the field.
	ErrInvalidConfig = errors.New("idem: invalid config")

	// ErrRecoveryPointUnreached reports a resumed operation whose handler returned
	// without calling the phase its earlier attempt recorded as done (a phase renamed or
	// removed between deploys): the phases after it were skipped, so recording the
	// outcome would record the operation as done with its work skipped. Nothing is
	// recorded; the key is released with its recovery point kept, so a deploy that runs
	// the phase again resumes after it. The client gets a 500 problem of kind
	// ProblemCannotResume; Do returns it wrapped.
	ErrRecoveryPointUnreached = errors.New("idem: the recorded recovery point was never reached")

	// ErrInProgress reports that another request holds the key right now. The client
	// gets 409 with Retry-After.
	ErrInProgress = storage.ErrInProgress

	// ErrLeaseLost reports that a worker's lease was taken over by another worker: its
	// phase commit, completion or release changed nothing and its transaction rolled
	// back. Operation.Phase returns it; the handler should stop.
	ErrLeaseLost = storage.ErrLeaseLost

	// ErrTransient reports a store failure that is safe to retry at once, such as a
	// serialization failure or a deadlock. Everything was rolled back; the client gets
	// 503 with Retry-After.
	ErrTransient = storage.ErrTransient

	// ErrRecordedFirst reports that a twin request recorded the key first, so this
	// request's transaction rolled back; it wraps with ErrTransient. The engine answers
	// such a request with the twin's outcome; Do returns it only when the twin's record
	// could not be read back.
	ErrRecordedFirst = storage.ErrRecordedFirst

	// ErrUnsupportedMode reports a mode the store cannot run, such as atomic mode on a
	// store with no transaction to share; New wraps it in its ErrInvalidConfig.
	ErrUnsupportedMode = storage.ErrUnsupportedMode

	// ErrTxOwned is returned, wrapped, by Commit and Rollback of the transaction a store
	// hands the handler (pgxstore.Tx, gormstore.DB): the store ends it, with the recorded
	// response or after a failure.
	ErrTxOwned = storage.ErrTxOwned

	// ErrFinalTxOpen is returned, wrapped, by Operation.Phase in phased mode once the
	// handler has opened the request's final transaction outside a phase: the phase does
	// not run. Call the phases first, then write the rest.
	ErrFinalTxOpen = storage.ErrFinalTxOpen
)
