package core

import (
	"context"
	"time"
)

// Outcome names what the engine did with one keyed request.
//
// A keyed request yields one event with a final outcome (every outcome but Claimed and
// Resumed). When its handler runs, Claimed or Resumed comes first, as the handler
// starts. A request the engine does not handle (its method is not in Config.Methods, or
// an optional key is absent) yields no event.
type Outcome string

// The outcomes reported to Hooks.
const (
	OutcomeClaimed    Outcome = "claimed"     // the key was free: the handler runs
	OutcomeResumed    Outcome = "resumed"     // an expired lease was taken over: the handler resumes
	OutcomeReplayed   Outcome = "replayed"    // a recorded outcome was answered again: the stored response, or the 410 response-too-large when its body was not kept
	OutcomeConflict   Outcome = "conflict"    // the key is in progress or its lease was lost (409), or a twin collided and rolled back (503)
	OutcomeMismatch   Outcome = "mismatch"    // the key was reused with another request: 422
	OutcomeCompleted  Outcome = "completed"   // the response was recorded (and committed)
	OutcomeRolledBack Outcome = "rolled_back" // the handler's answer was not recorded and the key released: an unstorable status (5xx), a panic, a deadline that passed, or a recovery point never reached (500)
	OutcomeCancelled  Outcome = "cancelled"   // the caller went away (its context was cancelled) before the outcome was recorded: nothing kept, the key released
	OutcomeRejected   Outcome = "rejected"    // refused before any claim: bad key or body (400, 413), a misconfiguration (500: an empty or invalid scope, the middleware twice on a route)
	OutcomeStoreError Outcome = "store_error" // the store failed (503): before the handler, or recording its outcome (the key is then released)
)

// Final reports whether o ends the engine's work on a request: every outcome but Claimed
// and Resumed, which mark the handler's start. A final event carries the request's
// store times and its whole Elapsed; count requests, and time them, by final events.
func (o Outcome) Final() bool { return o != OutcomeClaimed && o != OutcomeResumed }

// Event describes one outcome. Its durations are measured only when Hooks is set, with
// one wall-clock read per request and monotonic readings after it.
type Event struct {
	Outcome Outcome
	Scope   string
	Key     string
	Method  string
	// Path is the request's URL path, as the store keeps it: decoded, or as sent when
	// the decoded path is not valid UTF-8 or holds a NUL. It holds identifiers
	// (/v1/orders/42): label metrics by Route instead.
	Path string
	// Route is the pattern of the route that matched, as the router names it: the
	// request's http.Request.Pattern, which ServeMux sets ("POST /v1/orders/{id}") and
	// ginidem and echoidem set from c.FullPath() and c.Path() ("/v1/orders/:id"). It is
	// "" when the router sets none, or when the middleware wraps a ServeMux instead of
	// its routes (the pattern is not matched yet).
	Route string
	// Status is the HTTP status sent to the client: 0 for Claimed and Resumed, and for
	// a panic, which the engine re-raises for the framework's recovery to answer.
	Status int
	// Err is the error behind a failure outcome, if any.
	Err error

	// Elapsed is the time from the engine's entry (before it reads the key and the
	// body) to this event: for a final outcome, the request's time in the middleware,
	// the handler's included.
	Elapsed time.Duration
	// StoreClaim is the time the store took to claim the key (each call while LeaseWait
	// polls, not the pauses between them); zero for Rejected.
	StoreClaim time.Duration
	// StoreComplete is the time the store took to record the response (in atomic mode,
	// the commit); zero unless the handler's answer was storable.
	StoreComplete time.Duration
	// StoreRelease is the time the store took to release the key (in atomic mode, the
	// rollback); zero unless the key was released.
	StoreRelease time.Duration

	// Completing reports that core.Completer ran the request, not a client: an
	// operation its client abandoned, finished (OutcomeCompleted) or not.
	Completing bool
}

// Hooks observes outcomes, for metrics or tracing. Observe runs on the request's
// goroutine, with the request's context (which carries its active span): keep it fast
// and never block. promidem and otelidem implement it.
type Hooks interface {
	Observe(ctx context.Context, ev Event)
}

// HookFunc adapts a function to Hooks.
type HookFunc func(ctx context.Context, ev Event)

// Observe calls f.
func (f HookFunc) Observe(ctx context.Context, ev Event) { f(ctx, ev) }

// JoinHooks returns Hooks that passes each event to every one of hs in turn, nil ones
// skipped: Prometheus metrics and OpenTelemetry spans side by side.
func JoinHooks(hs ...Hooks) Hooks {
	var joined multiHooks
	for _, h := range hs {
		if h != nil {
			joined = append(joined, h)
		}
	}
	if len(joined) == 0 {
		return nil // no Hooks: the engine reads no clock
	}
	return joined
}

type multiHooks []Hooks

func (m multiHooks) Observe(ctx context.Context, ev Event) {
	for _, h := range m {
		h.Observe(ctx, ev)
	}
}
