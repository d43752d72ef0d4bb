package core

import "github.com/idemkit/idem/core/storage"

// Mode selects how a route claims, executes and records an operation.
type Mode int

const (
	// ModeDefault picks ModeAtomic when the store supports it, ModePhased otherwise.
	ModeDefault Mode = iota

	// ModeAtomic runs the claim, the handler's business writes and the completion in one
	// database transaction that rides in the request context. A failure rolls everything
	// back: no key, no business row. Only stores with a transaction to share run it
	// (pgxstore, gormstore).
	ModeAtomic

	// ModePhased commits the claim on its own with a lease and a fencing token. The handler
	// commits named phases (Operation.Phase), each with its recovery point; a retry after
	// the lease expires takes over and resumes after the last committed phase. For work
	// that calls the outside world (payment providers, email, other services).
	ModePhased
)

// String returns "default", "atomic" or "phased".
func (m Mode) String() string {
	switch m {
	case ModeAtomic:
		return "atomic"
	case ModePhased:
		return "phased"
	default:
		return "default"
	}
}

// storage is the store seam's mode for an engine mode resolved to atomic or phased.
func (m Mode) storage() storage.Mode {
	if m == ModeAtomic {
		return storage.ModeAtomic
	}
	return storage.ModePhased
}
