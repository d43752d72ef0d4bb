package core

import "context"

// Outcome names what the engine did with one keyed request.
type Outcome string

// The outcomes reported to Hooks.
const (
	OutcomeClaimed    Outcome = "claimed"     // the key was free: the handler runs
	OutcomeTookOver   Outcome = "took_over"   // an expired lease was taken over: the handler resumes
	OutcomeReplayed   Outcome = "replayed"    // a stored response was sent again
	OutcomeConflict   Outcome = "conflict"    // the key is in progress (409), or a twin collided and rolled back (503)
	OutcomeMismatch   Outcome = "mismatch"    // the key was reused with another request: 422
	OutcomeCompleted  Outcome = "completed"   // the response was recorded (and committed)
	OutcomeRolledBack Outcome = "rolled_back" // the key was released: 5xx, panic, cancel or failed commit
	OutcomeRejected   Outcome = "rejected"    // refused before any claim: bad key or body (400, 413), empty scope (500)
	OutcomeStoreError Outcome = "store_error" // the store failed (503): before the handler, or recording its outcome
)

// Event describes one outcome.
type Event struct {
	Outcome Outcome
	Scope   string
	Key     string
	Method  string
	Path    string
	// Status is the HTTP status sent to the client.
	Status int
	// Err is the error behind a failure outcome, if any.
	Err error
}

// Hooks observes outcomes, for metrics or tracing. Observe runs on the request's
// goroutine: keep it fast and never block.
type Hooks interface {
	Observe(ctx context.Context, ev Event)
}

// HookFunc adapts a function to Hooks.
type HookFunc func(ctx context.Context, ev Event)

// Observe calls f.
func (f HookFunc) Observe(ctx context.Context, ev Event) { f(ctx, ev) }
