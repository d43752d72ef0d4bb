package core

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem/core/storage"
)

// Engine runs the idempotency protocol for one configuration. It holds no scope: each
// request brings its own, through Middleware's scope function or an adapter's. Create
// it with New; it is safe for concurrent use.
type Engine struct {
	cfg     Config
	mode    Mode
	header  string // canonical HeaderName
	methods []string
	replay  []string // canonical ReplayHeaders
	// retention is the store's, read once: claims and the sweeper agree on it.
	retention time.Duration
}

// New returns an Engine for cfg, with defaults applied to its zero fields. It fails with
// an error wrapping ErrInvalidConfig that names the bad field.
func New(cfg Config) (*Engine, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, mode: cfg.Mode, header: http.CanonicalHeaderKey(cfg.HeaderName), methods: cfg.Methods, retention: cfg.Store.Retention()}
	if e.mode == ModeDefault {
		e.mode = ModePhased
		if cfg.Store.SupportsAtomic() {
			e.mode = ModeAtomic
		}
	}
	for _, h := range cfg.ReplayHeaders {
		e.replay = append(e.replay, http.CanonicalHeaderKey(h))
	}
	return e, nil
}

// Handle runs the engine for one request of a framework adapter (ginidem, echoidem, or
// one for another framework that can hand over an http.ResponseWriter and an
// *http.Request); applications mount Middleware or an adapter instead. It reports
// whether the engine handled the request:
//
//   - false: the request does not take part (its method is not in Config.Methods, or its
//     key is optional and absent). Nothing was written and next did not run: the adapter
//     runs the rest of its chain as usual, on w and r. (When Config.Key looks in the
//     body, the engine has read it: r.Body is then a copy of what it read.)
//   - true: the engine answered on w; the adapter stops its chain. Either the key was
//     claimed and next(held, r2) ran the rest of the chain, and w got the recorded
//     response (or a problem when it could not be recorded); or next did not run and w
//     got a replay or a problem.
//
// scope is called once, only for a keyed request, so it may read what authentication
// stored in the framework's context. next must write the handler's response into held,
// which keeps it until the engine has recorded it (held refuses to flush or hijack:
// wrap it in the framework's writer); r2's context carries the Operation and the store's
// transaction. next must not keep held or r2 after it returns. A panic in next releases
// the key and is re-raised, for the framework's recovery to answer. A request that
// already runs under an operation (a second idem middleware on the route) gets a 500
// problem of kind ProblemMisconfigured naming the route.
//
// Set r.Pattern to the framework's route pattern first (c.FullPath() in Gin, c.Path()
// in Echo), as http.ServeMux does, so that Event.Route and log lines name the route.
func (e *Engine) Handle(w http.ResponseWriter, r *http.Request, scope func() string, next func(held http.ResponseWriter, r *http.Request)) (handled bool) {
	if !e.applies(r) {
		return false
	}
	handled, body := e.handle(w, r, scope, next)
	if body != nil {
		// Not deferred (a deferred call in handle, with its many returns, costs every
		// request a defer record): after a panic the buffer is left to the collector.
		putBody(body)
	}
	return handled
}

// handle is Handle for a request whose method takes part. It returns the body buffer it
// read, if any, for Handle to put back.
func (e *Engine) handle(w http.ResponseWriter, r *http.Request, scope func() string, next func(held http.ResponseWriter, r *http.Request)) (handled bool, body *bytes.Buffer) {
	c := &call{start: e.now(), route: r.Pattern, Claim: storage.Claim{Method: r.Method, Path: storedPath(r)}}
	if outer, ok := r.Context().Value(operationKey{}).(*Operation); ok {
		e.nested(w, r, c, outer)
		return true, nil
	}
	if e.cfg.Key.readsBody() {
		// The key is in the body: read it first, once and bounded, as the fingerprint would.
		var err error
		body, err = e.readBody(r)
		if err != nil {
			e.reject(w, r, c, e.bodyProblem(err))
			return true, body
		}
	}
	key, present, err := e.findKey(r, body)
	if err != nil {
		e.reject(w, r, c, e.newProblem(ProblemKeyInvalid, fmt.Sprintf("The %s is malformed: %v.", e.cfg.Key.what(e.cfg.HeaderName), unwrapDetail(err)), err))
		return true, body
	}
	if !present {
		if e.cfg.KeyOptional {
			if body != nil { // the handler reads the body the engine read, in a copy of its own
				r.Body = io.NopCloser(bytes.NewReader(bytes.Clone(body.Bytes())))
			}
			return false, body
		}
		e.reject(w, r, c, e.newProblem(ProblemKeyMissing, fmt.Sprintf("%s %s requires %s.", clip(r.Method), clip(c.Path), e.cfg.Key.where(e.cfg.HeaderName)), ErrKeyMissing))
		return true, body
	}
	c.Key = key
	sc := scope()
	if err := checkScope(sc); err != nil {
		e.badScope(w, r, c, sc, err)
		return true, body
	}

	if body == nil {
		body, err = e.readBody(r)
		if err != nil {
			e.reject(w, r, c, e.bodyProblem(err))
			return true, body
		}
	}
	fp, err := e.cfg.Fingerprint(r, body.Bytes())
	if err != nil {
		e.reject(w, r, c, e.newProblem(ProblemBodyUnreadable, "The request could not be fingerprinted.", err))
		return true, body
	}

	c.Claim = storage.Claim{Scope: sc, Key: key, Fingerprint: fp, Method: r.Method, Path: c.Path,
		Mode: e.mode, Lease: e.cfg.Lease, LockWait: e.cfg.LockWait, Retention: e.retention, Timeout: e.cfg.LockWait + e.cfg.StoreTimeout}
	lock, rec, err := e.claim(r.Context(), c)
	switch {
	case err != nil:
		e.storeFailed(w, r, c, err)
		return true, body
	case rec != nil:
		e.answer(w, r, c, rec)
		return true, body
	default:
		e.execute(w, r, c, lock, body.Bytes(), next)
		return true, body
	}
}

// badScope refuses a request whose scope function returned a scope that checkScope
// refused (err): the application's bug, so a 500 problem and an error log line.
func (e *Engine) badScope(w http.ResponseWriter, r *http.Request, c *call, scope string, err error) {
	if errors.Is(err, ErrEmptyScope) {
		e.cfg.Logger.LogAttrs(r.Context(), slog.LevelError, "idem: the scope function returned an empty scope; refusing the request (is the idempotency middleware mounted before authentication?)",
			e.attrs(c, err)...)
		e.reject(w, r, c, e.newProblem(ProblemMisconfigured, "The server could not tell which caller this request belongs to, so it did not run it. This is a server misconfiguration, not a client error.", err))
		return
	}
	c.Scope = clip(scope)
	e.cfg.Logger.LogAttrs(r.Context(), slog.LevelError, "idem: the scope function returned a scope no store can hold; refusing the request (a scope is 1-255 bytes of valid UTF-8 without NUL)",
		e.attrs(c, err)...)
	e.reject(w, r, c, e.newProblem(ProblemMisconfigured, "The server named the caller of this request in a form it cannot store, so it did not run it. This is a server misconfiguration, not a client error.", err))
}

// nested refuses a request that already runs under an operation: a second idem
// middleware on one route (a group's and the route's own), which would claim the key the
// first one holds and answer 409 for ever. The problem lands in the outer middleware's
// buffer; a 500 is not storable, so the outer one releases the key and sends it.
func (e *Engine) nested(w http.ResponseWriter, r *http.Request, c *call, outer *Operation) {
	route := r.Pattern
	if route == "" {
		route = r.Method + " " + r.URL.Path
	}
	err := fmt.Errorf("%w: the idempotency middleware runs twice on %s", ErrInvalidConfig, clip(route))
	c.Scope, c.Key = outer.scope, outer.key
	e.cfg.Logger.LogAttrs(r.Context(), slog.LevelError, "idem: a second idempotency middleware on the route; refusing the request (mount it once: on the group or on the route)",
		e.attrs(c, err)...)
	e.reject(w, r, c, e.newProblem(ProblemMisconfigured, fmt.Sprintf("The server runs its idempotency check twice on %s, so it did not run the request. This is a server misconfiguration, not a client error.", clip(route)), err))
}

// storedPath is the request's path as stores keep it, for diagnostics: the decoded path,
// or the path as sent (escaped, so ASCII) when the decoded one is not valid UTF-8 or holds
// a NUL (a client sent %FF or %00), which PostgreSQL's text and MariaDB's utf8mb4 refuse.
func storedPath(r *http.Request) string {
	if p := r.URL.Path; utf8.ValidString(p) && strings.IndexByte(p, 0) < 0 {
		return p
	}
	return r.URL.EscapedPath()
}

// findKey returns the request's key from Config.Key; body is nil unless the key is in it.
func (e *Engine) findKey(r *http.Request, body *bytes.Buffer) (string, bool, error) {
	var b []byte
	if body != nil {
		b = body.Bytes()
	}
	return e.cfg.Key.find(r, b, e.header, e.cfg.MinKeyLength)
}

// applies reports whether r's method is one of Config.Methods.
func (e *Engine) applies(r *http.Request) bool {
	for _, m := range e.methods {
		if r.Method == m {
			return true
		}
	}
	return false
}

// call is one keyed request or Do as the engine handles it: the claim it makes and what
// its events report. The timings are read only when Hooks is set (start is zero
// otherwise): one wall-clock read at the entry, monotonic offsets from it after.
type call struct {
	storage.Claim
	route    string        // http.Request.Pattern
	start    time.Time     // the engine's entry
	claim    time.Duration // in Store.Claim
	complete time.Duration // in Lock.Complete
	release  time.Duration // in Lock.Release
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

// claim asks the store, waiting up to LeaseWait for a live phased lease with the same
// fingerprint to finish.
func (e *Engine) claim(ctx context.Context, c *call) (storage.Lock, *storage.Record, error) {
	var deadline time.Time
	for {
		began := c.since()
		lock, rec, err := e.cfg.Store.Claim(ctx, c.Claim)
		c.claim += c.since() - began
		if err != nil || rec == nil || e.cfg.LeaseWait <= 0 || storage.Decide(rec, c.Claim, time.Time{}) != storage.VerdictInProgress {
			return lock, rec, err
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(e.cfg.LeaseWait)
		}
		wait := min(50*time.Millisecond, time.Until(deadline))
		if wait <= 0 {
			return nil, rec, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, rec, nil
		case <-t.C:
		}
	}
}

// answer responds to a request whose key is held by rec, as storage.Decide says (a
// record the store reported: the time rules are behind it).
func (e *Engine) answer(w http.ResponseWriter, r *http.Request, c *call, rec *storage.Record) {
	switch v := storage.Decide(rec, c.Claim, time.Time{}); {
	case v == storage.VerdictMismatch:
		e.cfg.Logger.LogAttrs(r.Context(), slog.LevelWarn, "idem: key reused with a different request; answering 422", e.attrs(c, ErrKeyReused)...)
		e.problem(w, r, c, OutcomeMismatch, e.newProblem(ProblemKeyReused,
			fmt.Sprintf("This %s was first used with a different request (method, path or body); use a new key for a new request.", e.cfg.Key.noun(e.cfg.HeaderName)), ErrKeyReused))
	case v == storage.VerdictReplay && rec.Response != nil:
		e.replayResponse(w, r, c, rec.Response)
	default:
		e.inProgress(w, r, c, storage.ErrInProgress)
	}
}

const (
	replayedHeader = "Idempotent-Replayed"
	// omittedHeader marks a stored response whose body was over MaxResponseBody. It is
	// stored only, never sent.
	omittedHeader = "Idempotent-Body-Omitted"
)

var replayedValue = []string{"true"}

func (e *Engine) replayResponse(w http.ResponseWriter, r *http.Request, c *call, resp *storage.Response) {
	if n, omitted := resp.Header[omittedHeader]; omitted {
		h := w.Header()
		for k, v := range resp.Header {
			if k != omittedHeader && k != "Content-Type" {
				h[k] = v
			}
		}
		e.problem(w, r, c, OutcomeReplayed, e.newProblem(ProblemResponseTooLarge,
			fmt.Sprintf("This request already completed with status %d, but its response body (%s bytes) was too large to keep, so it cannot be replayed. It will not run again: do not retry it; read its result another way, such as a GET of its Location.", resp.Status, n[0]), nil))
		return
	}
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = v
	}
	h[replayedHeader] = replayedValue
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
	e.observe(r.Context(), c, OutcomeReplayed, resp.Status, nil)
}

// execute runs the handler under lock and records its outcome before anything reaches
// the client.
func (e *Engine) execute(w http.ResponseWriter, r *http.Request, c *call, lock storage.Lock, body []byte, next func(http.ResponseWriter, *http.Request)) {
	e.observe(r.Context(), c, e.started(r.Context(), c, lock), 0, nil)

	rr := new(requestRun)
	rn := &rr.run
	rn.start(r.Context(), c.Scope, c.Key, lock, e.renewedLease(), body)
	op := &rn.op
	rr.req = *r.WithContext(lock.Context(rn)) // the copy WithContext makes stays on the stack
	r2 := &rr.req
	if r.Body != nil && r.Body != http.NoBody {
		r2.Body = rn
	}
	buf := getBuffer()
	e.guard(r.Context(), c, lock, op, func() { next(buf, r2) })
	defer putBuffer(buf)

	// The context the outcome is recorded with: the handler's work is done, so a client
	// that hangs up now must not abort the commit half-way. The store bounds Complete and
	// Release itself (Claim.Timeout), so no timer is paid here on stores that never block.
	rctx := context.WithoutCancel(r.Context())
	if err := interrupted(r.Context(), op); err != nil {
		if errors.Is(err, storage.ErrLeaseLost) {
			e.inProgress(w, r, c, withRelease(err, e.release(rctx, c, lock)))
			return
		}
		e.problem(w, r, c, OutcomeRolledBack, e.newProblem(ProblemNotRecorded,
			"The request was cancelled before it finished; nothing was recorded, so it may be retried with the same key.", e.rolledBack(rctx, c, lock, err)))
		return
	}
	status := buf.Status()
	if !e.cfg.Storable(status) {
		err := e.rolledBack(rctx, c, lock, fmt.Errorf("idem: status %d is not storable", status))
		writeBuffer(w, buf)
		e.observe(r.Context(), c, OutcomeRolledBack, status, err)
		return
	}
	if err := op.unreached(); err != nil {
		err = e.cannotResume(rctx, c, lock, op.resume, err)
		e.problem(w, r, c, OutcomeRolledBack, e.newProblem(ProblemCannotResume,
			fmt.Sprintf("An earlier attempt of this request completed the step %q, which the server no longer runs, so the request was not completed and nothing of this attempt was recorded. This is a server error: retry with the same key once it is fixed, and the request resumes after that step.", op.resume), err))
		return
	}
	resp := e.recordable(buf)
	err := e.complete(rctx, c, lock, resp)
	putResponse(resp)
	if err != nil {
		if errors.Is(err, storage.ErrLeaseLost) {
			e.inProgress(w, r, c, err)
			return
		}
		if rec := e.twinRecord(rctx, c, err); rec != nil {
			e.answer(w, r, c, rec)
			return
		}
		e.cfg.Logger.LogAttrs(rctx, slog.LevelError, "idem: recording the response failed; the client gets 503 and may retry", e.attrs(c, err)...)
		e.problem(w, r, c, OutcomeStoreError, e.newProblem(ProblemNotRecorded,
			"The request's outcome could not be recorded or confirmed. Retry with the same key: you will get its result, and it runs at most once.", err))
		return
	}
	writeBuffer(w, buf)
	e.observe(r.Context(), c, OutcomeCompleted, status, nil)
}

// The steps below run every claimed operation, an HTTP request's (execute) or a
// function's (Do).

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
		op.endWork()
		if p := recover(); p != nil {
			err := e.rolledBack(context.WithoutCancel(ctx), c, lock, fmt.Errorf("idem: panicked: %v", p))
			e.observe(ctx, c, OutcomeRolledBack, 0, err)
			panic(p)
		}
	}()
	f()
}

// interrupted reports why an operation whose work has returned must not be recorded: a
// phase found its lease taken over (an error wrapping storage.ErrLeaseLost), or ctx was cancelled
// (its cause). nil means record it.
func interrupted(ctx context.Context, op *Operation) error {
	switch {
	case op.leaseErr != nil:
		return op.leaseErr
	case ctx.Err() != nil:
		return context.Cause(ctx)
	}
	return nil
}

// complete records resp as c's outcome. When that fails it releases the key, so a retry
// runs again (in atomic mode nothing committed), and returns the store's error, which
// wraps storage.ErrLeaseLost when another worker took the key over (and a failed release's).
func (e *Engine) complete(ctx context.Context, c *call, lock storage.Lock, resp *storage.Response) error {
	began := c.since()
	err := lock.Complete(ctx, resp)
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

// twinRecord reads back the key's record after a completion failed with err because a
// twin recorded the key first (storage.ErrRecordedFirst): everything of this request rolled back,
// so the twin's outcome is the answer. Claiming again finds the record; nil when err is
// another failure, or when the record cannot be read (then a claim that got the key
// instead, the twin's record being gone, gives it up at once).
func (e *Engine) twinRecord(ctx context.Context, c *call, err error) *storage.Record {
	if !errors.Is(err, storage.ErrRecordedFirst) {
		return nil
	}
	e.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "idem: a twin recorded the key first; this request rolled back and answers with the twin's outcome", e.attrs(c, err)...)
	began := c.since()
	lock, rec, err := e.cfg.Store.Claim(ctx, c.Claim)
	c.claim += c.since() - began
	if err != nil {
		return nil
	}
	if lock != nil {
		_ = lock.Release(ctx)
		return nil
	}
	return rec
}

// release gives the key up, so that a retry runs again, and returns the store's error.
// The caller reports it, in the one log line and the one final event of the operation.
func (e *Engine) release(ctx context.Context, c *call, lock storage.Lock) error {
	began := c.since()
	err := lock.Release(ctx)
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

var responsePool = sync.Pool{New: func() any { return &storage.Response{Header: make(http.Header, 4)} }}

// recordable builds the Response to store from the handler's buffer: allow-listed
// headers only, and the body unless it is over MaxResponseBody. Stores keep none of it
// (Lock.Complete's contract), so it comes from a pool; return it with putResponse.
func (e *Engine) recordable(buf *buffer) *storage.Response {
	resp := responsePool.Get().(*storage.Response)
	resp.Status = buf.Status()
	for _, f := range buf.snapshot() {
		if e.replays(f.name) {
			resp.Header[f.name] = f.values
		}
	}
	if int64(buf.Size()) > e.cfg.MaxResponseBody {
		resp.Header[omittedHeader] = []string{strconv.Itoa(buf.Size())}
	} else {
		resp.Body = buf.Bytes()
	}
	return resp
}

// replays reports whether the header name (canonical) is in ReplayHeaders.
func (e *Engine) replays(name string) bool {
	for _, k := range e.replay {
		if k == name {
			return true
		}
	}
	return false
}

func putResponse(resp *storage.Response) {
	clear(resp.Header)
	resp.Body = nil
	responsePool.Put(resp)
}

func writeBuffer(w http.ResponseWriter, buf *buffer) {
	h := w.Header()
	for _, f := range buf.snapshot() {
		h[f.name] = f.values
	}
	w.WriteHeader(buf.Status())
	_, _ = w.Write(buf.Bytes())
}

func (e *Engine) storeFailed(w http.ResponseWriter, r *http.Request, c *call, err error) {
	switch {
	case errors.Is(err, storage.ErrInProgress):
		e.inProgress(w, r, c, err)
	case errors.Is(err, storage.ErrTransient):
		e.cfg.Logger.LogAttrs(r.Context(), slog.LevelInfo, "idem: collided with a twin and rolled back; answering 503", e.attrs(c, err)...)
		e.problem(w, r, c, OutcomeConflict, e.newProblem(ProblemCollision,
			"The request collided with another one and was rolled back; retry with the same key.", err))
	default:
		e.cfg.Logger.LogAttrs(r.Context(), slog.LevelError, "idem: store failed; refusing to run the request unprotected", e.attrs(c, err)...)
		e.problem(w, r, c, OutcomeStoreError, e.newProblem(ProblemStoreUnavailable,
			"The request was not run because its idempotency key could not be checked. Retry with the same key.", err))
	}
}

func (e *Engine) inProgress(w http.ResponseWriter, r *http.Request, c *call, err error) {
	e.cfg.Logger.LogAttrs(r.Context(), slog.LevelInfo, "idem: key in progress; answering 409", e.attrs(c, err)...)
	e.problem(w, r, c, OutcomeConflict, e.newProblem(ProblemInProgress,
		fmt.Sprintf("A request with this %s is still being processed. Retry later with the same key to get its response.", e.cfg.Key.noun(e.cfg.HeaderName)), err))
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

func (e *Engine) reject(w http.ResponseWriter, r *http.Request, c *call, p *Problem) {
	e.problem(w, r, c, OutcomeRejected, p)
}

func (e *Engine) problem(w http.ResponseWriter, r *http.Request, c *call, outcome Outcome, p *Problem) {
	e.cfg.Problem(w, r, p)
	e.observe(r.Context(), c, outcome, p.Status, p.Err)
}

func (e *Engine) observe(ctx context.Context, c *call, outcome Outcome, status int, err error) {
	if e.cfg.Hooks == nil {
		return
	}
	e.cfg.Hooks.Observe(ctx, Event{Outcome: outcome, Scope: c.Scope, Key: c.Key, Method: c.Method, Path: c.Path, Route: c.route, Status: status, Err: err,
		Elapsed: c.since(), StoreClaim: c.claim, StoreComplete: c.complete, StoreRelease: c.release})
}

func (e *Engine) bodyProblem(err error) *Problem {
	if errors.Is(err, ErrBodyTooLarge) {
		return e.newProblem(ProblemBodyTooLarge, fmt.Sprintf("The request body is over %d bytes.", e.cfg.MaxRequestBody), err)
	}
	return e.newProblem(ProblemBodyUnreadable, "The request body could not be read.", err)
}

var bodyPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// firstBodyRead is the most readBody allocates before any byte has arrived, whatever
// Content-Length declares: a client that declares 1 MiB and trickles one byte holds
// 64 KiB, not 1 MiB.
const firstBodyRead = 64 << 10

// readBody reads the whole body, at most MaxRequestBody bytes. It allocates as the bytes
// arrive: at most firstBodyRead (or the declared length and one byte, if less) at first,
// then at most double what has arrived, never more than the declared length (or the
// limit) and one byte. The returned buffer is never nil and goes back to the pool with
// putBody.
func (e *Engine) readBody(r *http.Request) (*bytes.Buffer, error) {
	b := bodyPool.Get().(*bytes.Buffer)
	b.Reset()
	if r.Body == nil || r.Body == http.NoBody {
		return b, nil
	}
	limit := e.cfg.MaxRequestBody
	if r.ContentLength > limit {
		return b, fmt.Errorf("%w: Content-Length %d over %d", ErrBodyTooLarge, r.ContentLength, limit)
	}
	// The most the buffer ever needs: the declared length or the limit, and one byte
	// more, to see EOF (or a body over the limit) without growing.
	most := limit + 1
	if r.ContentLength > 0 { // 0 on a request with a body means unknown, as -1 does
		most = r.ContentLength + 1
	}
	buf := b.AvailableBuffer() // the pooled buffer's memory, empty
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) >= most { // longer than it declared: only the limit holds
				most = limit + 1
			}
			buf = growBody(buf, most)
		}
		n, err := r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case int64(len(buf)) > limit:
			err = fmt.Errorf("%w: over %d bytes", ErrBodyTooLarge, limit)
		case err == io.EOF:
			err = nil
		case err != nil:
			err = readError(err)
		default:
			continue
		}
		*b = *bytes.NewBuffer(buf) // b holds what was read, in buf's memory: no copy
		return b, err
	}
}

// growBody returns a copy of buf, which is full, with room to read more: firstBodyRead
// for an empty buf, else double its capacity, and never over most (more than len(buf)).
func growBody(buf []byte, most int64) []byte {
	c := int64(2 * cap(buf))
	if cap(buf) == 0 {
		c = firstBodyRead
	}
	c = min(max(c, bytes.MinRead), most)
	return append(make([]byte, 0, c), buf...)
}

// readError classifies a failed body read; out of the read loop, so that the target
// of errors.As escapes only when there is an error.
func readError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return fmt.Errorf("%w: %w", ErrBodyTooLarge, err)
	}
	return fmt.Errorf("idem: reading the request body: %w", err)
}

func putBody(b *bytes.Buffer) {
	if b.Cap() <= maxPooledBody {
		bodyPool.Put(b)
	}
}

// unwrapDetail strips the sentinel's own text from err for a client-facing detail.
func unwrapDetail(err error) string {
	s := err.Error()
	if p := ErrInvalidKey.Error() + ": "; len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}
