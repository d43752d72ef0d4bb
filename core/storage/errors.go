package storage

import "errors"

// Errors a store returns, wrapped with %w; the engine passes them on (Engine.Do's error,
// Operation.Phase's). They are defined here only: store code returns these, and
// application code tests them with errors.Is (errors.Is(err, storage.ErrInProgress)).
var (
	// ErrInProgress reports that another request holds the key right now: an atomic
	// claim's lock wait ran out. The client gets 409 with Retry-After.
	ErrInProgress = errors.New("idem: a request with this idempotency key is in progress")

	// ErrLeaseLost reports that a worker's lease was taken over by another worker: its
	// phase commit, completion or release changed nothing and its transaction rolled back.
	ErrLeaseLost = errors.New("idem: lease lost to another worker")

	// ErrTransient reports a store failure that is safe to retry at once, such as a
	// serialization failure or a deadlock. Everything was rolled back; the client gets 503
	// with Retry-After.
	ErrTransient = errors.New("idem: transient store failure, retry")

	// ErrRecordedFirst reports that a twin request recorded the key before this one
	// could: an atomic completion's insert of the key row failed on the key's unique
	// index (the twin was not held off by a lock, as on an engine whose advisory locks do
	// not lock), and this request's transaction rolled back with its business writes.
	// Stores wrap it together with ErrTransient. The engine then reads the key again and
	// answers with the twin's outcome: its replay, or 422 for a different request.
	ErrRecordedFirst = errors.New("idem: a twin request recorded this key first")

	// ErrUnsupportedMode is returned by a store asked for a mode it cannot run, such as
	// atomic mode on a store that has no transaction to share.
	ErrUnsupportedMode = errors.New("idem: store does not support this mode")

	// ErrTxOwned is wrapped by the error of Commit and Rollback called, through a store's
	// getter (pgxstore.MustTx, gormstore.MustDB), on the transaction the store hands the
	// handler: the store commits it with the recorded response, or rolls it back when the
	// request fails, so the handler cannot end it behind the engine's back. Nothing is
	// committed or rolled back by the refused call.
	ErrTxOwned = errors.New("idem: the request's transaction is committed or rolled back by the store, not the handler")

	// ErrFinalTxOpen is wrapped by the error of Lock.Phase in ModePhased when the
	// handler has already opened the request's final transaction (through the store's
	// getter, outside any phase): the phase does not run. Writes made outside the phases
	// would otherwise commit with the phase, and run again when a retry resumes after it.
	// Run the phases first, then the final writes.
	ErrFinalTxOpen = errors.New("idem: a phase cannot start once the handler has opened the request's final transaction; run the phases first")
)
