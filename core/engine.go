package core

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
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
	// fingerprint is Config.Fingerprint of a request sent with key in scope, appending
	// to dst: the default one writes into the call's own memory.
	fingerprint func(dst []byte, scope, key string, r *http.Request, body []byte) ([]byte, error)
	keep        []string // canonical KeepHeaders
	// retention is the store's, read once: claims and the sweeper agree on it.
	retention time.Duration
	renewals  renewals // the leases of its running operations (phased mode)
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
	fingerprint := cfg.Fingerprint
	e.fingerprint = func(_ []byte, _, _ string, r *http.Request, body []byte) ([]byte, error) { return fingerprint(r, body) }
	if isFingerprint(fingerprint) {
		recent := &recentFingerprints{seed: maphash.MakeSeed()}
		e.fingerprint = func(dst []byte, scope, key string, r *http.Request, body []byte) ([]byte, error) {
			return recent.fingerprint(dst, scope, key, r, body), nil
		}
	}
	for _, h := range cfg.ReplayHeaders {
		e.replay = append(e.replay, http.CanonicalHeaderKey(h))
	}
	for _, h := range cfg.KeepHeaders {
		e.keep = append(e.keep, http.CanonicalHeaderKey(h))
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
	comp := completionOf(r) // nil unless the Completer runs r: then the key and scope are its
	key, present, err := e.findKey(r, body, comp)
	if err != nil {
		_, what, _ := e.cfg.Key.names(e.cfg.HeaderName)
		e.reject(w, r, c, e.newProblem(ProblemKeyInvalid, fmt.Sprintf("The %s is malformed: %v.", what, unwrapDetail(err)), err))
		return true, body
	}
	if !present {
		if e.cfg.KeyOptional {
			if body != nil { // the handler reads the body the engine read, in a copy of its own
				r.Body = io.NopCloser(bytes.NewReader(bytes.Clone(body.Bytes())))
			}
			return false, body
		}
		_, _, where := e.cfg.Key.names(e.cfg.HeaderName)
		e.reject(w, r, c, e.newProblem(ProblemKeyMissing, fmt.Sprintf("%s %s requires %s.", clip(r.Method), clip(c.Path), where), ErrKeyMissing))
		return true, body
	}
	c.Key, c.completing = key, comp != nil
	sc := comp.scopeOr(scope)
	if err := checkScope(sc); err != nil {
		e.respond(w, r, c, nil, e.badScope(r.Context(), c, sc, err))
		return true, body
	}
	c.Scope = sc
	if body == nil {
		body, err = e.readBody(r)
		if err != nil {
			e.reject(w, r, c, e.bodyProblem(err))
			return true, body
		}
	}
	fp, err := e.fingerprint(c.fp[:0], c.Scope, key, r, body.Bytes())
	if err != nil {
		e.reject(w, r, c, e.newProblem(ProblemBodyUnreadable, "The request could not be fingerprinted.", err))
		return true, body
	}
	c.Claim = e.claimOf(c.Scope, key, fp, r.Method, c.Path)
	if e.cfg.KeepRequest {
		c.Request = e.keptRequest(r, body.Bytes())
	}

	buf := getBuffer()
	defer putBuffer(buf)
	out := e.protocol(r.Context(), c, body.Bytes(), func(rn *run, ctx context.Context) (*storage.Response, error) {
		rn.req = *r.WithContext(ctx) // the copy WithContext makes stays on the stack
		r2 := &rn.req
		if r.Body != nil && r.Body != http.NoBody {
			r2.Body = rn
		}
		next(buf, r2)
		if status := buf.Status(); !e.cfg.Storable(status) {
			return nil, fmt.Errorf("idem: status %d is not storable", status)
		}
		return e.recordable(buf), nil
	})
	if comp != nil {
		comp.outcome = out.event // what the Completer learns of its attempt
	}
	e.respond(w, r, c, buf, out)
	return true, body
}

// claimOf is the claim of key in scope for a request (or a Do) with fingerprint fp.
func (e *Engine) claimOf(scope, key string, fp []byte, method, path string) storage.Claim {
	return storage.Claim{Scope: scope, Key: key, Fingerprint: fp, Method: method, Path: path,
		Mode: e.mode, Lease: e.cfg.Lease, LockWait: e.cfg.LockWait, Retention: e.retention}
}

// respond writes out, the protocol's outcome for a request, on w: a problem, a replay, or
// the handler's own response held in buf; then it reports the final event.
func (e *Engine) respond(w http.ResponseWriter, r *http.Request, c *call, buf *buffer, out outcome) {
	switch {
	case out.problem != "":
		e.problem(w, r, c, out.event, e.newProblem(out.problem, out.detail, out.err))
	case out.replay != nil:
		e.replayResponse(w, r, c, out.replay)
	default: // the handler's response, recorded or not to be
		status := buf.Status()
		writeBuffer(w, buf)
		e.observe(r.Context(), c, out.event, status, out.err)
	}
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

// findKey returns the request's key from Config.Key, or comp's when the Completer runs
// r; body is nil unless the key is in it.
func (e *Engine) findKey(r *http.Request, body *bytes.Buffer, comp *Completion) (string, bool, error) {
	if comp != nil {
		return comp.Key, true, nil
	}
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

// recordable returns the Response to store from the handler's buffer: allow-listed
// headers only, and the body unless it is over MaxResponseBody. It is the buffer's own
// (buf.recorded), valid until the buffer goes back to its pool.
func (e *Engine) recordable(buf *buffer) *storage.Response {
	resp := &buf.recorded
	resp.Status = buf.Status()
	for name, values := range buf.header {
		if e.replays(name) {
			resp.Header[name] = values
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

func writeBuffer(w http.ResponseWriter, buf *buffer) {
	h := w.Header()
	for name, values := range buf.header {
		h[name] = values
	}
	w.WriteHeader(buf.Status())
	_, _ = w.Write(buf.Bytes())
}

func (e *Engine) reject(w http.ResponseWriter, r *http.Request, c *call, p *Problem) {
	e.problem(w, r, c, OutcomeRejected, p)
}

func (e *Engine) problem(w http.ResponseWriter, r *http.Request, c *call, outcome Outcome, p *Problem) {
	e.cfg.Problem(w, r, p)
	e.observe(r.Context(), c, outcome, p.Status, p.Err)
}

func (e *Engine) bodyProblem(err error) *Problem {
	switch {
	case errors.Is(err, ErrBodyTooLarge):
		return e.newProblem(ProblemBodyTooLarge, fmt.Sprintf("The request body is over %d bytes.", e.cfg.MaxRequestBody), err)
	case errors.Is(err, errBodyTimeout):
		return e.newProblem(ProblemBodyTimeout, "The request body did not arrive in time (the server's read deadline passed); nothing ran.", err)
	}
	return e.newProblem(ProblemBodyUnreadable, "The request body could not be read.", err)
}

// bodyPool keeps request bodies' buffers: a body of unknown length starts at
// firstBodyRead, so without it a Gin + memstore first request allocates 64 KiB and takes
// 4.6 times as long (the measurement of bufferPool's comment).
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

// errBodyTimeout marks a body read that ran out of time: the server's read deadline
// (http.Server.ReadTimeout) passed while the client trickled the body.
var errBodyTimeout = errors.New("idem: reading the request body timed out")

// readError classifies a failed body read; out of the read loop, so that the target
// of errors.As escapes only when there is an error.
func readError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return fmt.Errorf("%w: %w", ErrBodyTooLarge, err)
	}
	var ne net.Error
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w: %w", errBodyTimeout, err)
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
