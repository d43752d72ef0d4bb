package storage

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Mode is how an operation runs: ModeAtomic or ModePhased. It is the one mode type:
// core.Mode is this type, so an application's core.Config.Mode and a store's Claim.Mode
// need no conversion. Its zero value, ModeDefault, lets the engine choose; the engine
// resolves it before claiming, so a Claim always carries ModeAtomic or ModePhased.
type Mode int

const (
	// ModeDefault picks ModeAtomic when the store supports it (SupportsAtomic) and
	// ModePhased otherwise. It is a setting (core.Config.Mode), never a Claim's mode.
	ModeDefault Mode = 0

	// ModeAtomic: the claim, the handler's business writes and the completion run in one
	// database transaction that rides in the request context. A failure rolls everything
	// back: no key, no business row. Only stores whose SupportsAtomic reports true run it.
	ModeAtomic Mode = 1

	// ModePhased: the claim commits on its own with a lease and a fencing token. The
	// handler commits named phases, each with its recovery point; a retry after the lease
	// expires takes over and resumes after the last committed phase.
	ModePhased Mode = 2
)

// String returns "default", "atomic" or "phased".
func (m Mode) String() string {
	switch m {
	case ModeDefault:
		return "default"
	case ModeAtomic:
		return "atomic"
	case ModePhased:
		return "phased"
	default:
		return fmt.Sprintf("Mode(%d)", int(m))
	}
}

// State is the lifecycle state of a stored key.
type State string

const (
	// StateStarted: a request holds or held the key and has not recorded a response.
	StateStarted State = "started"
	// StateCompleted: the response is recorded; every later request with the same key
	// and fingerprint gets it replayed.
	StateCompleted State = "completed"
)

// DefaultRetention is how long a store keeps a key unless its constructor's retention
// option (pgxstore.WithRetention, gormstore.WithRetention, redisstore.WithRetention,
// memstore.WithRetention) says otherwise; every store uses this one default.
const DefaultRetention = 24 * time.Hour

// RecoveryStarted is the recovery point of a freshly claimed key, before any phase has
// committed.
const RecoveryStarted = "started"

// Claim is what the engine asks a store for: the key of one request in one scope.
type Claim struct {
	// Scope isolates keys: the same key in two scopes names two operations. It is 1–255
	// bytes of valid UTF-8 without NUL (core.MaxScopeLength; the engine refuses any other
	// before calling the store), and a store keeps and returns it byte for byte.
	Scope string
	// Key is the parsed Idempotency-Key (1–255 printable ASCII characters), kept and
	// returned byte for byte.
	Key string
	// Fingerprint is the SHA-256 of the canonical request (32 bytes).
	Fingerprint []byte
	// Method and Path are stored for diagnostics; the fingerprint already covers them.
	// Path is valid UTF-8 without NUL: a decoded path that would not be is given as
	// sent, escaped.
	Method string
	Path   string
	// Mode is ModeAtomic or ModePhased.
	Mode Mode
	// Lease is how long a phased claim blocks duplicates and takeover. Phase commits
	// and Lock.Renew renew it, each for Lease from then. The engine always sets it
	// (core.Config.Lease, positive); stores have no lease of their own.
	Lease time.Duration
	// LockWait bounds how long an atomic claim waits for a twin transaction in flight
	// before returning ErrInProgress. The engine always sets it (core.Config.LockWait,
	// positive); stores have no lock-wait setting of their own.
	LockWait time.Duration
	// Retention: a key created longer ago than this counts as absent (unless its lease
	// is live), even before the sweeper deletes it. The engine sets it to the store's
	// own Retention(), so claims and the sweeper always agree.
	Retention time.Duration
	// Request, when set (core.Config.KeepRequest, ModePhased only), is kept beside the
	// key in the same write as the claim, for core.Completer (see Completable). A
	// takeover keeps the request the key was claimed with.
	Request *Request
}

// Response is a recorded HTTP response: what a replay sends byte for byte.
type Response struct {
	// Status is the HTTP status code.
	Status int
	// Header holds the headers the engine records: those core.Config.ReplayHeaders
	// allows (never Set-Cookie, Authorization, WWW-Authenticate or Proxy-Authenticate),
	// and, when the body was over core.Config.MaxResponseBody and not kept, the engine's
	// own Idempotent-Body-Omitted marker, which is never sent.
	Header http.Header
	// Body is the response body as bytes, never re-encoded.
	Body []byte
}

// Record is a stored key as a store reports it to the engine.
type Record struct {
	Scope         string
	Key           string
	Fingerprint   []byte
	Method        string
	Path          string
	State         State
	RecoveryPoint string
	// LockedUntil is the end of the lease of a StateStarted record (zero when none).
	LockedUntil time.Time
	// Response is set when State is StateCompleted.
	Response    *Response
	CreatedAt   time.Time
	CompletedAt time.Time
	// Request is the request kept for core.Completer (Claim.Request), nil when none was.
	Request *Request
	// Attempts counts core.Completer's attempts on the key (Completable.BeginAttempt),
	// and NextAttempt is when it may try again (zero before its first).
	Attempts    int
	NextAttempt time.Time
}

// Claimed is what Store.Claim reports: the verdict, with the Lock when the key is the
// caller's (VerdictAbsent, VerdictTakeOver) or the Record that holds it (VerdictReplay,
// VerdictMismatch, VerdictInProgress). Exactly one of Lock and Record is set.
type Claimed struct {
	Verdict Verdict
	Lock    Lock
	Record  *Record
}

// Store keeps idempotency keys. Implementations must be safe for concurrent use and must
// make the claim exclusive in the database itself: two processes claiming one key at once
// must see exactly one winner. Every store runs the conformance suite in core/storetest.
//
// The engine owns time: it gives every call of a Store or a Lock its deadline in ctx
// (Claim: core.Config.LockWait and StoreTimeout; Lookup, Complete, Release and Renew:
// StoreTimeout), and calls Complete and Release with a context that is not cancelled when
// the client hangs up, only bounded. A store runs its statements, commit and rollback
// included, under the ctx it is given, and never bounds the transaction it hands the
// handler by it; it keeps no deadline arithmetic of its own (a driver-level deadline
// only where the driver ignores contexts, saying so).
type Store interface {
	// Claim either hands the caller the key, as a Lock, or reports the Record that holds
	// it, with the verdict that says which (Claimed): Decide's, at the store's clock, the
	// one place it is computed (the engine acts on it and never decides again).
	//
	//   - No record, or a record past c.Retention whose lease is not live
	//     (VerdictAbsent): the key is claimed and a Lock returned. In ModeAtomic the lock
	//     holds an open transaction that holds the key (its first write, or a lock that
	//     makes twins wait, with the row written by Complete); nothing is visible to
	//     others until Complete. In ModePhased the claim commits at once with state
	//     started, recovery point RecoveryStarted, a lease of c.Lease and a fresh fencing
	//     token.
	//   - A completed record (VerdictReplay, or VerdictMismatch for another fingerprint):
	//     returned as the Record.
	//   - A started record with a live lease (phased; VerdictInProgress, or
	//     VerdictMismatch): returned as the Record. A store never waits for a live lease.
	//   - A started record whose lease has expired and whose fingerprint equals
	//     c.Fingerprint (VerdictTakeOver): taken over atomically (only one of several
	//     racing claimers wins) with a fresh token; the Lock reports Resumed and the
	//     recorded recovery point. With a different fingerprint the record is returned
	//     instead (VerdictMismatch).
	//   - A twin transaction in flight (atomic): Claim waits for it up to c.LockWait and
	//     then returns an error wrapping ErrInProgress; if the twin rolled back, Claim
	//     claims the key; if it committed, Claim returns its record.
	//   - A serialization failure or deadlock: an error wrapping ErrTransient.
	//   - c.Mode not supported: an error wrapping ErrUnsupportedMode.
	//
	// The engine bounds the call with ctx's deadline (c.LockWait and its store timeout).
	Claim(ctx context.Context, c Claim) (Claimed, error)

	// Lookup returns the record of key in scope as the store holds it, expired or not
	// (a record past retention that the sweeper or the store's own expiry has not
	// removed yet is returned), and the store's clock at the read: the now that Decide
	// measures the record's lease and age against (the database's or the Redis
	// server's clock where the store's leases run on it). A completed record carries its
	// Response. No record: an error wrapping ErrNotFound. It changes nothing, takes no
	// lock and does not wait for a transaction in flight (an atomic request's key is
	// not visible before it commits). The engine reads a twin's outcome with it; the
	// idem command's show reads a key with it.
	Lookup(ctx context.Context, scope, key string) (rec *Record, now time.Time, err error)

	// DeleteExpired deletes at most limit records created before before, oldest first,
	// and reports how many it deleted. It never deletes a record whose lease is live.
	// Each call is short: it holds no lock beyond its own batch.
	DeleteExpired(ctx context.Context, before time.Time, limit int) (int, error)

	// SupportsAtomic reports whether the store can run ModeAtomic, that is, whether it
	// has a transaction to share with the handler.
	SupportsAtomic() bool

	// Retention reports how long the store keeps a key: the one source of truth for
	// both the engine (Claim.Retention) and the sweeper (core.Sweeper deletes what is
	// older). Stores take it as a constructor option, 24h by default, and it is positive.
	Retention() time.Duration
}

// Lock is a claimed key, held by one request until Complete or Release. A Lock is used by
// one goroutine at a time, except Renew, which may run on another goroutine at any time
// until Complete or Release has returned.
type Lock interface {
	// Context returns ctx carrying the store's transaction for the handler, reached
	// through the store's own getter (pgxstore.MustTx, gormstore.MustDB). In ModeAtomic that is
	// the claim's transaction. In ModePhased it is the request's final transaction, which
	// the store opens lazily on first use and commits in Complete together with the
	// response, so the handler's last writes and the recorded response commit together.
	// Commit and Rollback through the getter fail with an error wrapping ErrTxOwned and
	// end nothing: the store ends the transaction.
	Context(ctx context.Context) context.Context

	// RecoveryPoint is the last committed phase when the lock was obtained:
	// RecoveryStarted for a fresh claim.
	RecoveryPoint() string

	// Resumed reports whether this lock took over an expired lease.
	Resumed() bool

	// Phase runs fn and records point as the new recovery point. If fn returns an error,
	// Phase returns it and keeps none of fn's writes, in either mode.
	//
	// In ModePhased fn runs in a transaction of its own (carried by the ctx fn receives,
	// opened when fn first asks for it) that commits together with the new point and a
	// renewed lease, fenced by the lock's token: if the lease was taken over, nothing
	// commits and Phase returns an error wrapping ErrLeaseLost. If fn fails, its
	// transaction rolls back and the point is not recorded. A phase cannot start once the
	// handler has opened the request's final transaction (see Context): Phase then
	// returns an error wrapping ErrFinalTxOpen without running fn.
	//
	// In ModeAtomic fn runs in the claim's transaction, under a savepoint: if fn fails,
	// the transaction rolls back to it (fn's writes go, the request's earlier writes
	// stay); otherwise fn's writes commit with everything else in Complete.
	//
	// A store without a transaction to share (memstore, redisstore) runs fn with ctx as
	// it is: fn's own side effects are fn's to undo.
	Phase(ctx context.Context, point string, fn func(ctx context.Context) error) error

	// Complete records r as the key's response and ends the lock. In ModeAtomic it
	// records the key and commits the transaction, handler writes included. A failed
	// commit returns an error and leaves neither key nor business rows; when the key's
	// row could not be written because a twin recorded the key first, that error wraps
	// ErrRecordedFirst (and ErrTransient), and the engine answers with the twin's record.
	// In ModePhased it commits the final transaction with the response, fenced by the
	// token (ErrLeaseLost when taken over). Complete must not keep r.Header or r.Body
	// after it returns.
	Complete(ctx context.Context, r *Response) error

	// Release gives the key up after a failure. In ModeAtomic it rolls back: no key, no
	// business rows. In ModePhased it rolls back the final transaction, if open, then
	// deletes the key if no phase has committed, or else ends the lease at once while
	// keeping the recovery point, so the next retry takes over and resumes. Fenced by the
	// token: when another lock holds the key (a takeover) it changes nothing and returns
	// an error wrapping ErrLeaseLost, and only then.
	//
	// A write can land although its caller was told of an error (the connection was cut
	// after the database ran it, and its reply was lost). Release keeps to what landed:
	// after a Complete that failed that way but recorded the response, it finds the key
	// completed by this lock, changes nothing and returns nil; a Release whose own reply
	// was lost, sent again by the driver or called again, finds its work done and returns
	// nil. Release called again, or after a successful Complete, changes nothing and
	// returns nil. (core/storetest: ReleaseTwice, ReleaseAfterLostCompleteReply,
	// LostReleaseReply.)
	Release(ctx context.Context) error

	// Renew extends a ModePhased lease to Claim.Lease from now, fenced by the token: after
	// a takeover it changes nothing and returns an error wrapping ErrLeaseLost. The engine
	// calls it every Lease/3 while the handler runs (its phases included), from another
	// goroutine, so a slow phase keeps its key. A Renew may still be in flight when the
	// engine calls Complete or Release (it stops renewing first, but does not wait for a
	// renewal stuck behind a lock the request itself holds): one that lands after either
	// changes nothing, since a completed or released key has no lease to extend. It
	// touches no transaction of the handler's and reads only what the lock was claimed
	// with. In ModeAtomic there is no lease: it does nothing and
	// returns nil.
	Renew(ctx context.Context) error
}

// SelfExpiring is implemented by a store whose keys expire on their own once past the
// retention (redisstore: each key's TTL). Such a store's DeleteExpired deletes nothing and
// returns 0, nil, so core.Sweeper has nothing to do on it; the conformance suite checks
// that instead of sweeping.
type SelfExpiring interface {
	// ExpiresKeys reports true when the store expires keys itself.
	ExpiresKeys() bool
}
