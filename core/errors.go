package core

import "errors"

// The engine's sentinel errors, wrapped with %w, so callers test with errors.Is. The
// errors a store reports (a key in progress, a lease lost, a transient failure…) are
// core/storage's: storage.ErrInProgress, storage.ErrLeaseLost, storage.ErrTransient and the rest are defined
// there once, and an application tests Do's or Phase's error against them.
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

	// ErrNoOperation is what MustOperation panics with, wrapped, when the context carries
	// no idempotent operation (the route is not keyed, or the key was optional and absent).
	ErrNoOperation = errors.New("idem: no idempotent operation in context")

	// ErrEmptyScope reports a scope function that returned "" for a keyed request (the
	// scope rule is in the package documentation, under Scope).
	ErrEmptyScope = errors.New("idem: empty scope")

	// ErrInvalidScope reports a scope function that returned a scope no store can hold
	// (the scope rule is in the package documentation, under Scope).
	ErrInvalidScope = errors.New("idem: invalid scope")

	// ErrInvalidConfig is wrapped by the error New returns for an invalid Config; the
	// message names the field.
	ErrInvalidConfig = errors.New("idem: invalid config")

	// ErrRecoveryPointUnreached reports a resumed operation whose handler returned
	// without calling the phase its earlier attempt recorded as done (a phase renamed or
	// removed between deploys): the phases after it were skipped, so recording the
	// outcome would record the operation as done with its work skipped. Nothing is
	// recorded; the key is released with its recovery point kept, so a deploy that runs
	// the phase again resumes after it. The client gets a 500 problem of kind
	// ProblemCannotResume; Do returns it wrapped.
	ErrRecoveryPointUnreached = errors.New("idem: the recorded recovery point was never reached")
)
