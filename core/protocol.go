package core

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem/core/storage"
)

// The protocol (claim, execute, record, answer) is written once, here, for every keyed
// operation: an HTTP request's (Handle, Middleware) and a function's (Do). It returns an
// outcome, which each front end renders in its own terms: HTTP as a response, Do as its
// return values. The log lines are written here and the events observed by the front end
// once it has answered, so both see every outcome the same way.

// call is one keyed operation as the engine runs it: the claim it makes and what its
// events report. The timings are read only when Hooks is set (start is zero otherwise):
// one wall-clock read at the entry, monotonic offsets from it after.
//
// It is the engine's own allocation for an operation that does not run (a replay, a
// conflict): the fingerprint and the context of the claim are in it. A claimed key's
// work gets a second (run), which its lease's renewals need no more of.
type call struct {
	storage.Claim
	route    string        // http.Request.Pattern
	start    time.Time     // the engine's entry
	claim    time.Duration // in Store.Claim
	complete time.Duration // in Lock.Complete
	release  time.Duration // in Lock.Release

	fp      [sha256.Size]byte // the default fingerprint's memory (Claim.Fingerprint)
	ctx     storeCtx          // the claim's context
	ctxUsed bool
	run     *run // the work's state, once the key is claimed
	// completing: core.Completer runs the operation (no client waits for it)
	completing bool
}

// outcome is what the protocol did with one operation.
type outcome struct {
	event Outcome // the final event
	// problem, when set, is the answer: a problem of that kind with detail (HTTP), or
	// err (Do). Otherwise the answer is replay, or the work's own (ran).
	problem ProblemKind
	detail  string
	err     error             // the cause: what the event and Do report, wrapping its sentinel
	replay  *storage.Response // VerdictReplay: the recorded response
	ran     bool              // the work ran and its own answer stands (recorded, or not to be)
}

// work is an operation's work under its lock: it runs the handler (HTTP) or the
// function (Do) with rn, whose context carries the Operation, and ctx, which carries the
// store's transaction too. It returns the response to record, or no response and the
// reason not to record one (an unstorable status, the function's error), after which the
// key is released and the work's own answer stands.
type work func(rn *run, ctx context.Context) (*storage.Response, error)

// protocol claims c's key, runs w under it when the key is free, records what w returns
// and says what to answer. body is the request body the work's Operation replays (nil
// for Do).
func (e *Engine) protocol(ctx context.Context, c *call, body []byte, w work) outcome {
	claimed, err := e.claim(ctx, c)
	switch {
	case err != nil:
		return e.storeFailed(ctx, c, err)
	case claimed.Lock == nil:
		return e.answer(ctx, c, claimed.Verdict, claimed.Record)
	case c.completing && claimed.Verdict == storage.VerdictAbsent:
		// The Completer resumes a key it listed started; a fresh claim means the key
		// expired (or was swept) meanwhile: running it would repeat every phase.
		err := withRelease(errors.New("idem: the completer's key expired before it was resumed; not running it again from its first phase"), e.release(ctx, c, claimed.Lock))
		e.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "idem: the completer's key is gone; nothing run", e.attrs(c, err)...)
		return outcome{event: OutcomeRejected, problem: ProblemCannotResume, err: err,
			detail: "The operation expired before it could be completed; nothing was run."}
	}
	return e.execute(ctx, c, claimed.Lock, body, w)
}

// badScope refuses an operation whose scope checkScope refused with err: the
// application's bug, so an error log line and a 500 problem.
func (e *Engine) badScope(ctx context.Context, c *call, scope string, err error) outcome {
	if errors.Is(err, ErrEmptyScope) {
		e.cfg.Logger.LogAttrs(ctx, slog.LevelError, "idem: the scope function returned an empty scope; refusing the request (is the idempotency middleware mounted before authentication?)",
			e.attrs(c, err)...)
		return outcome{event: OutcomeRejected, problem: ProblemMisconfigured, err: err,
			detail: "The server could not tell which caller this request belongs to, so it did not run it. This is a server misconfiguration, not a client error."}
	}
	c.Scope = clip(scope)
	e.cfg.Logger.LogAttrs(ctx, slog.LevelError, "idem: the scope function returned a scope no store can hold; refusing the request (a scope is 1-255 bytes of valid UTF-8 without NUL)",
		e.attrs(c, err)...)
	return outcome{event: OutcomeRejected, problem: ProblemMisconfigured, err: err,
		detail: "The server named the caller of this request in a form it cannot store, so it did not run it. This is a server misconfiguration, not a client error."}
}

// claim asks the store, with the claim's deadline (LockWait and StoreTimeout), waiting up
// to LeaseWait for a live phased lease of the same request to finish.
func (e *Engine) claim(ctx context.Context, c *call) (storage.Claimed, error) {
	var deadline time.Time
	for {
		began := c.since()
		cctx := c.storeCtx(ctx, e.cfg.LockWait+e.cfg.StoreTimeout, false)
		claimed, err := e.cfg.Store.Claim(cctx, c.Claim)
		cctx.end(context.Canceled)
		c.claim += c.since() - began
		if err != nil || e.cfg.LeaseWait <= 0 || claimed.Verdict != storage.VerdictInProgress {
			return claimed, err
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(e.cfg.LeaseWait)
		}
		wait := min(50*time.Millisecond, time.Until(deadline))
		if wait <= 0 {
			return claimed, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return claimed, nil
		case <-t.C:
		}
	}
}

// answer says what to answer for a key rec holds, as the store's verdict v says.
func (e *Engine) answer(ctx context.Context, c *call, v storage.Verdict, rec *storage.Record) outcome {
	switch {
	case v == storage.VerdictMismatch:
		e.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "idem: key reused with a different request", e.attrs(c, ErrKeyReused)...)
		return outcome{event: OutcomeMismatch, problem: ProblemKeyReused, err: ErrKeyReused,
			detail: fmt.Sprintf("This %s was first used with a different request (method, path or body); use a new key for a new request.", e.cfg.Key.noun(e.cfg.HeaderName))}
	case v == storage.VerdictReplay && rec.Response != nil:
		return outcome{event: OutcomeReplayed, replay: rec.Response}
	}
	return e.inProgress(ctx, c, storage.ErrInProgress)
}

// inProgress answers an operation whose key another worker holds; err wraps
// ErrInProgress or ErrLeaseLost, and the outcome's error wraps ErrInProgress either way.
func (e *Engine) inProgress(ctx context.Context, c *call, err error) outcome {
	e.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "idem: key in progress", e.attrs(c, err)...)
	if !errors.Is(err, storage.ErrInProgress) {
		err = fmt.Errorf("%w: %w", storage.ErrInProgress, err)
	}
	return outcome{event: OutcomeConflict, problem: ProblemInProgress, err: err,
		detail: fmt.Sprintf("A request with this %s is still being processed. Retry later with the same key to get its response.", e.cfg.Key.noun(e.cfg.HeaderName))}
}

// storeFailed answers a claim the store could not make.
func (e *Engine) storeFailed(ctx context.Context, c *call, err error) outcome {
	switch {
	case errors.Is(err, storage.ErrInProgress):
		return e.inProgress(ctx, c, err)
	case errors.Is(ctx.Err(), context.Canceled): // the client hung up; a deadline that passed is the store's failure
		return e.cancelled(ctx, c, fmt.Errorf("%w (claiming the key: %w)", context.Cause(ctx), err))
	case errors.Is(err, storage.ErrTransient):
		e.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "idem: collided with a twin and rolled back", e.attrs(c, err)...)
		return outcome{event: OutcomeConflict, problem: ProblemCollision, err: err,
			detail: "The request collided with another one and was rolled back; retry with the same key."}
	}
	e.cfg.Logger.LogAttrs(ctx, slog.LevelError, "idem: store failed; refusing to run the request unprotected", e.attrs(c, err)...)
	return outcome{event: OutcomeStoreError, problem: ProblemStoreUnavailable, err: err,
		detail: "The request was not run because its idempotency key could not be checked. Retry with the same key."}
}

// cancelled answers an operation whose caller went away (its context was cancelled)
// before its outcome was known: nothing was recorded, and the key, if claimed, was released. It is
// logged at Info: a client hanging up is not the store's failure.
func (e *Engine) cancelled(ctx context.Context, c *call, cause error) outcome {
	e.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "idem: the request was cancelled before its outcome was recorded; nothing was kept", e.attrs(c, cause)...)
	return outcome{event: OutcomeCancelled, problem: ProblemNotRecorded, err: cause,
		detail: "The request was cancelled before it finished; nothing was recorded, so it may be retried with the same key."}
}

// execute runs w under lock and records its outcome before anything is answered.
func (e *Engine) execute(ctx context.Context, c *call, lock storage.Lock, body []byte, w work) outcome {
	e.observe(ctx, c, e.started(ctx, c, lock), 0, nil)
	rn := new(run)
	c.run = rn
	rn.start(ctx, e, c, lock, e.renewedLease(), body)
	op := &rn.op
	var (
		resp  *storage.Response
		cause error
	)
	e.guard(ctx, c, lock, op, func() { resp, cause = w(rn, lock.Context(rn)) })

	// The work is done: a client that hangs up now must not cut recording short, so the
	// store calls from here (complete, release, twin) get contexts detached from ctx,
	// bounded by StoreTimeout.
	switch err := op.lease.lost(); {
	case err != nil:
		return e.inProgress(ctx, c, withRelease(err, e.release(ctx, c, lock)))
	case errors.Is(ctx.Err(), context.Canceled): // the client hung up
		return e.cancelled(ctx, c, withRelease(context.Cause(ctx), e.release(ctx, c, lock)))
	case ctx.Err() != nil: // the request's deadline passed while the work ran
		return outcome{event: OutcomeRolledBack, problem: ProblemNotRecorded, err: e.rolledBack(ctx, c, lock, context.Cause(ctx)),
			detail: "The request ran out of time before it finished; nothing was recorded, so it may be retried with the same key."}
	case cause != nil:
		return outcome{event: OutcomeRolledBack, ran: true, err: e.rolledBack(ctx, c, lock, cause)}
	}
	if err := op.unreached(); err != nil {
		err = e.cannotResume(ctx, c, lock, op.resume, err)
		return outcome{event: OutcomeRolledBack, problem: ProblemCannotResume, err: err,
			detail: fmt.Sprintf("An earlier attempt of this request completed the step %q, which the server no longer runs, so the request was not completed and nothing of this attempt was recorded. This is a server error: retry with the same key once it is fixed, and the request resumes after that step.", op.resume)}
	}
	err := e.complete(ctx, c, lock, resp)
	switch {
	case err == nil:
		return outcome{event: OutcomeCompleted, ran: true}
	case errors.Is(err, storage.ErrLeaseLost):
		return e.inProgress(ctx, c, err)
	case errors.Is(err, storage.ErrRecordedFirst):
		if v, rec := e.twin(ctx, c, err); rec != nil {
			return e.answer(ctx, c, v, rec)
		}
	}
	e.cfg.Logger.LogAttrs(ctx, slog.LevelError, "idem: recording the outcome failed; the caller may retry", e.attrs(c, err)...)
	return outcome{event: OutcomeStoreError, problem: ProblemNotRecorded, err: err,
		detail: "The request's outcome could not be recorded or confirmed. Retry with the same key: you will get its result, and it runs at most once."}
}

// started reports the claim of c's key, which a takeover also logs, at Info: an
// earlier attempt crashed or outlived its lease.
func (e *Engine) started(ctx context.Context, c *call, lock storage.Lock) Outcome {
	if !lock.Resumed() {
		return OutcomeClaimed
	}
	e.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "idem: took over a key whose lease expired; its operation runs again from its recovery point",
		append(e.attrs(c, nil), slog.String("recovery_point", lock.RecoveryPoint()))...)
	return OutcomeResumed
}

// renewedLease is the lease the engine renews while an operation's work runs: the
// configured Lease in phased mode; 0 (no lease, nothing to renew) in atomic mode.
func (e *Engine) renewedLease() time.Duration {
	if e.mode == ModePhased {
		return e.cfg.Lease
	}
	return 0
}

// guard runs f, the operation's work under lock, then stops renewing the lease. On a panic
// it releases the key, then re-raises the panic (so a framework's recovery still answers).
func (e *Engine) guard(ctx context.Context, c *call, lock storage.Lock, op *Operation, f func()) {
	defer func() {
		op.lease.stop()
		if p := recover(); p != nil {
			err := e.rolledBack(ctx, c, lock, fmt.Errorf("idem: panicked: %v", p))
			e.observe(ctx, c, OutcomeRolledBack, 0, err)
			panic(p)
		}
	}()
	f()
}

// complete records resp as c's outcome, bounded by StoreTimeout, whether or not ctx is
// cancelled (as are twin and release). When that fails it
// releases the key, so a retry runs again (in atomic mode nothing committed), and
// returns the store's error, which wraps ErrLeaseLost when another worker took the key
// over (and a failed release's).
func (e *Engine) complete(ctx context.Context, c *call, lock storage.Lock, resp *storage.Response) error {
	began := c.since()
	sctx := c.storeCtx(ctx, e.cfg.StoreTimeout, true)
	err := lock.Complete(sctx, resp)
	sctx.end(context.Canceled)
	c.complete = c.since() - began
	if err != nil {
		rerr := e.release(ctx, c, lock)
		if errors.Is(rerr, storage.ErrLeaseLost) && !errors.Is(err, storage.ErrLeaseLost) {
			// The key is no longer this worker's to release after a completion that
			// failed: that completion may have committed before its answer was lost (a
			// connection cut at COMMIT, a failover), or another worker finished the key.
			// The outcome is unknown, not in progress: not-recorded, and a retry gets
			// the recorded response.
			return errors.Join(err, fmt.Errorf("idem: releasing the key: %v", rerr))
		}
		return withRelease(err, rerr)
	}
	return nil
}

// twin reads back the key's record after a completion failed with err because a twin
// recorded the key first (ErrRecordedFirst): everything of this operation rolled back,
// so the twin's outcome is the answer, as Decide says at the store's clock. No record
// when it cannot be read.
func (e *Engine) twin(ctx context.Context, c *call, err error) (storage.Verdict, *storage.Record) {
	e.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "idem: a twin recorded the key first; this operation rolled back and answers with the twin's outcome", e.attrs(c, err)...)
	began := c.since()
	sctx := c.storeCtx(ctx, e.cfg.StoreTimeout, true)
	rec, now, err := e.cfg.Store.Lookup(sctx, c.Scope, c.Key)
	sctx.end(context.Canceled)
	c.claim += c.since() - began
	if err != nil {
		return 0, nil
	}
	v := storage.Decide(rec, c.Claim, now)
	if v.Claims() {
		return v, nil // the twin's record is gone, or not the twin's: nothing to answer with
	}
	return v, rec
}

// release gives the key up, bounded by StoreTimeout, so that a retry runs again, and
// returns the store's error. The caller reports it, in the one log line and the one final
// event of the operation.
func (e *Engine) release(ctx context.Context, c *call, lock storage.Lock) error {
	began := c.since()
	sctx := c.storeCtx(ctx, e.cfg.StoreTimeout, true)
	err := lock.Release(sctx)
	sctx.end(context.Canceled)
	c.release = c.since() - began
	return err
}

// rolledBack releases the key of an outcome that is not recorded, for cause, and logs it
// in one line: Debug, as a retry simply runs again, or Warn when the key could not be
// released. It returns the error for the OutcomeRolledBack event.
func (e *Engine) rolledBack(ctx context.Context, c *call, lock storage.Lock, cause error) error {
	if err := e.release(ctx, c, lock); err != nil {
		e.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "idem: releasing the key failed", append(e.attrs(c, err), slog.Any("cause", cause))...)
		return withRelease(cause, err)
	}
	e.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "idem: released the key; a retry runs again", e.attrs(c, cause)...)
	return cause
}

// cannotResume releases the key of an operation whose work never reached its recorded
// recovery point (cause wraps ErrRecoveryPointUnreached): nothing is recorded, and the
// release keeps the point, so a deploy that runs the phase again resumes after it. It
// logs the error and returns it (with a failed release's) for the caller's answer.
func (e *Engine) cannotResume(ctx context.Context, c *call, lock storage.Lock, point string, cause error) error {
	err := withRelease(cause, e.release(ctx, c, lock))
	e.cfg.Logger.LogAttrs(ctx, slog.LevelError, "idem: the handler never reached the recovery point an earlier attempt recorded "+
		"(a phase renamed or removed?); nothing was recorded and the key keeps its point for a deploy that runs that phase",
		append(e.attrs(c, err), slog.String("recovery_point", point))...)
	return err
}

// withRelease adds a failed release to err.
func withRelease(err, releaseErr error) error {
	if releaseErr == nil {
		return err
	}
	return errors.Join(err, fmt.Errorf("idem: releasing the key: %w", releaseErr))
}

// now is the start of a call: the zero time, and no clock read, when nothing observes.
func (e *Engine) now() time.Time {
	if e.cfg.Hooks == nil {
		return time.Time{}
	}
	return time.Now()
}

// since is the time since c's start, 0 when its start was not read. time.Since reads
// only the monotonic clock.
func (c *call) since() time.Duration {
	if c.start.IsZero() {
		return 0
	}
	return time.Since(c.start)
}

// observe reports an event of c to Hooks.
func (e *Engine) observe(ctx context.Context, c *call, outcome Outcome, status int, err error) {
	if e.cfg.Hooks == nil {
		return
	}
	e.cfg.Hooks.Observe(ctx, Event{Outcome: outcome, Scope: c.Scope, Key: c.Key, Method: c.Method, Path: c.Path, Route: c.route, Status: status, Err: err,
		Elapsed: c.since(), StoreClaim: c.claim, StoreComplete: c.complete, StoreRelease: c.release, Completing: c.completing})
}

// attrs are the fields of every log line about c: scope, key, method, path, the route
// when the router names one, and err unless nil. Each value a client can influence is
// clipped to maxLogged bytes.
func (e *Engine) attrs(c *call, err error) []slog.Attr {
	a := append(make([]slog.Attr, 0, 7), slog.String("scope", clip(c.Scope)), slog.String("key", clip(c.Key)),
		slog.String("method", clip(c.Method)), slog.String("path", clip(c.Path)))
	if c.route != "" {
		a = append(a, slog.String("route", clip(c.route)))
	}
	if err != nil {
		a = append(a, slog.Any("error", err))
	}
	return a
}

// maxLogged is the most bytes of a value a client can influence (scope, key, method,
// path, route) that a log line or a problem's detail carries, so a client cannot make
// one request write a megabyte of log.
const maxLogged = 64

// clip returns s, or its first maxLogged bytes (cut before a UTF-8 sequence that would
// not fit) followed by "…".
func clip(s string) string {
	if len(s) <= maxLogged {
		return s
	}
	i := maxLogged
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
