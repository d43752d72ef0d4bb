package core

import "github.com/idemkit/idem/core/storage"

// Mode selects how a route claims, executes and records an operation. It is
// storage.Mode: the engine and the stores share one mode type.
type Mode = storage.Mode

const (
	// ModeDefault picks ModeAtomic when the store supports it, ModePhased otherwise.
	ModeDefault = storage.ModeDefault

	// ModeAtomic runs the claim, the handler's business writes and the completion in one
	// database transaction that rides in the request context. A failure rolls everything
	// back: no key, no business row. Only stores with a transaction to share run it
	// (pgxstore, gormstore).
	ModeAtomic = storage.ModeAtomic

	// ModePhased commits the claim on its own with a lease and a fencing token. The handler
	// commits named phases (Operation.Phase), each with its recovery point; a retry after
	// the lease expires takes over and resumes after the last committed phase. For work
	// that calls the outside world (payment providers, email, other services).
	ModePhased = storage.ModePhased
)
