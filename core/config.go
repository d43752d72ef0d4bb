package core

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idemkit/idem/core/storage"
	"golang.org/x/net/http/httpguts"
)

// Config configures an Engine: the options every adapter shares (net/http through
// Engine.Middleware, ginidem, echoidem). Zero fields take the default their comment states;
// Store is required. New refuses an invalid field, naming it. The caller's scope is not part of
// it: each adapter takes it in its framework's own terms (Engine.Middleware's argument,
// ginidem.Config.Scope, echoidem.Config.Scope), once.
type Config struct {
	// Store keeps the keys: pgxstore, gormstore, redisstore, or memstore for tests and
	// a single process. It also owns the keys' retention. Required.
	Store storage.Store

	// Mode picks atomic or phased. Default: ModeDefault (atomic when the store supports
	// it, phased otherwise).
	Mode Mode

	// HeaderName is the request header carrying the key. Default: "Idempotency-Key".
	HeaderName string

	// Key says where the key is when it is not in the HeaderName header: a webhook
	// provider's delivery header (KeyFromHeader("X-GitHub-Delivery")) or an event ID in
	// the JSON body (KeyFromJSON("id")). Setting Key together with a HeaderName other
	// than the default is an error (New): HeaderName would go unused.
	// Default: the zero KeySource, the HeaderName header.
	Key KeySource

	// Methods lists the methods that take part; others pass through untouched, even
	// with a key. A request's method is matched exactly, as HTTP methods are
	// case-sensitive, so each must be written as requests send it: New refuses one
	// that is not upper case ("post" would never match a POST). Default: POST and PATCH.
	Methods []string

	// KeyOptional lets a request without a key through untouched. Default: false (a
	// missing key is a 400 problem).
	KeyOptional bool

	// MinKeyLength rejects shorter keys, to refuse low-entropy keys. Default: 1.
	MinKeyLength int

	// Lease is how long a phased claim holds the key before another request may take
	// it over. While the handler runs, its phases included, the engine renews it every
	// Lease/3 (fenced by the lease token), and each phase commit renews it too, so a
	// slow handler keeps its key: the lease runs out only when its worker stops (a crash,
	// a database it cannot reach). A handler that never returns keeps its key; bound
	// outbound calls with a deadline. Until it runs out, a duplicate is answered 409 in
	// progress (Retry-After: 1): a client that must wait out a crashed attempt retries
	// for longer than Lease (idemclient's defaults, 5 attempts and 30s, give up after
	// about 4s; its package doc gives the settings that fit). Default: 60s.
	Lease time.Duration

	// LeaseWait is how long a duplicate waits for a live phased lease to finish (and
	// then replays) before answering 409. Default: 0 (answer at once).
	LeaseWait time.Duration

	// LockWait bounds how long an atomic claim waits for a twin transaction in flight
	// before answering 409. On PostgreSQL (pgxstore, gormstore) it is the atomic
	// transaction's lock_timeout, so the handler's own statements run under it too: one
	// that waits longer for a row lock fails (55P03) and the request rolls back; a
	// handler that needs longer runs SET LOCAL lock_timeout itself. Default: 2s.
	LockWait time.Duration

	// StoreTimeout bounds the store's own work for a request, so an unresponsive
	// database gets a 503 instead of a request that hangs. The engine puts the deadline
	// in the context of every store call: the claim may take LockWait plus StoreTimeout;
	// recording the outcome, releasing the key (both run even after the client hung up,
	// commit and rollback included), reading a twin's outcome and each lease renewal
	// take at most StoreTimeout each. The handler's own statements are not bounded by
	// it. Default: 5s.
	StoreTimeout time.Duration

	// MaxRequestBody is the largest request body read; a larger one is a 413 problem
	// and the handler does not run. Default: 1 MiB.
	MaxRequestBody int64

	// MaxResponseBody is the largest response body stored. A larger storable response
	// is sent to the first client and recorded without its body: retries get a 410
	// problem (ProblemResponseTooLarge, with the stored headers, such as Location) and the
	// handler never runs again. Default: 1 MiB.
	MaxResponseBody int64

	// ReplayHeaders lists the response headers stored and replayed. Set-Cookie,
	// Authorization, WWW-Authenticate and Proxy-Authenticate are refused by New.
	// Default: Location, Content-Type, Content-Location, ETag, Last-Modified, Link.
	ReplayHeaders []string

	// Storable decides whether a response status is recorded. Default: StorableStatus
	// (2xx, 3xx and 4xx except 408, 409, 425 and 429). An unstorable response goes to the
	// client and releases the key, so a retry runs again.
	Storable func(status int) bool

	// Fingerprint computes the request fingerprint. Default: Fingerprint (method, path,
	// query and RFC 8785-canonical JSON body). FingerprintWithHeaders adds headers.
	Fingerprint FingerprintFunc

	// Problem writes RFC 9457 problems. Default: WriteProblem.
	Problem ProblemRenderer

	// ProblemBase prefixes every problem type URI (followed by the ProblemKind), so the
	// type links to documentation of what happened and what the client should do. Set it
	// to your API's own docs (e.g. "https://api.example.com/docs/errors#"). Default:
	// DefaultProblemBase, this repository's docs/problems.md.
	ProblemBase string

	// RetryAfter is sent with 409 and 503 problems. Default: 1s.
	RetryAfter time.Duration

	// KeepRequest makes the store keep what core.Completer needs to run a request again
	// when its client never comes back (method, path and query, the body, the headers
	// KeepHeaders names), beside the key, in the same write as the claim. It is data at
	// rest for as long as the key is kept (the store's retention): see
	// docs/phased-operations.md for what to leave out. Phased mode only (an atomic
	// request that crashes rolls back: there is nothing to complete): New refuses it
	// with a Mode that is, or resolves to, atomic. Default: false.
	KeepRequest bool

	// KeepHeaders lists the request headers kept with KeepRequest, typically
	// Content-Type and the headers the Fingerprint reads. Nothing else is kept:
	// Authorization or a cookie only when listed. Default: none.
	KeepHeaders []string

	// Logger gets one structured line (scope, key, method, path, the route when the
	// router names one, each cut to its first 64 bytes, and the error) per non-happy
	// outcome, for a request and for Do alike: Error for a store failure, a failed
	// recording, a misconfiguration (a refused scope, the middleware twice
	// on a route) or a resumed operation that never reached its
	// recorded recovery point (with the point); Warn for a key reused with another
	// request (422) and a key that could not be released; Info for an answer of 409 in
	// progress (a lost lease included) or 503 collision, a request cancelled before its
	// outcome was recorded (the client hung up), a lease renewal that found the key taken
	// over, and a takeover of an expired lease (with the recovery point it resumes from);
	// Debug for a released key (after a 5xx, a panic or an error from Do's function, with
	// the reason). The happy path (a first request recorded, a replay) logs nothing, and
	// neither does a request refused for a bad key or body: that is the client's error,
	// for an access log. Default: a logger that discards everything.
	Logger *slog.Logger

	// Hooks observes every outcome. Default: nil (none).
	Hooks Hooks
}

// DefaultHeaderName is the request header that carries the key unless Config.HeaderName
// names another: the one definition of the name, which idemclient and idemtest use too.
const DefaultHeaderName = "Idempotency-Key"

// DefaultReplayHeaders returns the response headers stored and replayed by default:
// Location, Content-Type, Content-Location, ETag, Last-Modified and Link, in a new slice
// each call (append to it to replay one more).
func DefaultReplayHeaders() []string {
	return []string{"Location", "Content-Type", "Content-Location", "ETag", "Last-Modified", "Link"}
}

// neverReplayed headers carry credentials or per-client state; they are never stored.
var neverReplayed = []string{"Set-Cookie", "Authorization", "WWW-Authenticate", "Proxy-Authenticate"}

// StorableStatus is the default Config.Storable: 2xx, 3xx and deterministic 4xx are
// recorded; 408, 409, 425, 429 (the client should simply retry) and every 5xx are not.
func StorableStatus(status int) bool {
	switch {
	case status >= 200 && status < 400:
		return true
	case status >= 400 && status < 500:
		switch status {
		case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests:
			return false
		}
		return true
	}
	return false
}

// withDefaults returns c with every zero field set to its default, as the field's
// comment states it.
func (c Config) withDefaults() Config {
	c.HeaderName = cmp.Or(c.HeaderName, DefaultHeaderName)
	c.MinKeyLength = cmp.Or(c.MinKeyLength, 1)
	c.Lease = cmp.Or(c.Lease, 60*time.Second)
	c.LockWait = cmp.Or(c.LockWait, 2*time.Second)
	c.StoreTimeout = cmp.Or(c.StoreTimeout, 5*time.Second)
	c.MaxRequestBody = cmp.Or(c.MaxRequestBody, 1<<20)
	c.MaxResponseBody = cmp.Or(c.MaxResponseBody, 1<<20)
	c.ProblemBase = cmp.Or(c.ProblemBase, DefaultProblemBase)
	c.RetryAfter = cmp.Or(c.RetryAfter, time.Second)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Methods == nil {
		c.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	if c.ReplayHeaders == nil {
		c.ReplayHeaders = DefaultReplayHeaders()
	}
	if c.Storable == nil {
		c.Storable = StorableStatus
	}
	if c.Fingerprint == nil {
		c.Fingerprint = Fingerprint
	}
	if c.Problem == nil {
		c.Problem = WriteProblem
	}
	return c
}

// validate reports the first invalid field of c, by name, wrapping ErrInvalidConfig.
// It runs on a config with defaults applied (New does both).
func (c Config) validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Store == nil:
		return bad("Store", "required")
	case c.Store.Retention() <= 0:
		return bad("Store", "%T reports a retention of %v", c.Store, c.Store.Retention())
	case c.Mode < ModeDefault || c.Mode > ModePhased:
		return bad("Mode", "unknown mode %d", c.Mode)
	case c.Mode == ModeAtomic && !c.Store.SupportsAtomic():
		return fmt.Errorf("%w: Mode: atomic mode needs a store with a transaction to share (%T has none): %w", ErrInvalidConfig, c.Store, storage.ErrUnsupportedMode)
	case !httpguts.ValidHeaderFieldName(c.HeaderName):
		return bad("HeaderName", "%q is not a valid header name", c.HeaderName)
	case c.Key.err != nil:
		return bad("Key", "%v", c.Key.err)
	case c.Key.kind != keyIdempotencyHeader && c.HeaderName != DefaultHeaderName:
		return bad("HeaderName", "%q is unused: Key names where the key is", c.HeaderName)
	case len(c.Methods) == 0:
		return bad("Methods", "empty")
	case c.MinKeyLength < 1 || c.MinKeyLength > MaxKeyLength:
		return bad("MinKeyLength", "%d is outside 1..%d", c.MinKeyLength, MaxKeyLength)
	case c.Lease <= 0:
		return bad("Lease", "must be positive")
	case c.LeaseWait < 0:
		return bad("LeaseWait", "negative")
	case c.LockWait <= 0:
		return bad("LockWait", "must be positive")
	case c.StoreTimeout <= 0:
		return bad("StoreTimeout", "must be positive")
	case c.Store.Retention() < c.Lease:
		return bad("Lease", "%s is longer than the store's retention (%s)", c.Lease, c.Store.Retention())
	case c.MaxRequestBody < 0:
		return bad("MaxRequestBody", "negative")
	case c.MaxResponseBody < 0:
		return bad("MaxResponseBody", "negative")
	case c.RetryAfter < 0:
		return bad("RetryAfter", "negative")
	case c.KeepRequest && (c.Mode == ModeAtomic || c.Mode == ModeDefault && c.Store.SupportsAtomic()):
		return bad("KeepRequest", "needs phased mode (an atomic request that fails rolls back: there is nothing to complete); set Mode: ModePhased")
	case len(c.KeepHeaders) > 0 && !c.KeepRequest:
		return bad("KeepHeaders", "set without KeepRequest")
	}
	for _, h := range c.KeepHeaders {
		if !httpguts.ValidHeaderFieldName(h) {
			return bad("KeepHeaders", "%q is not a valid header name", h)
		}
	}
	if u, err := url.Parse(c.ProblemBase); err != nil || u.Scheme == "" {
		return bad("ProblemBase", "%q is not an absolute URI", c.ProblemBase)
	}
	for _, m := range c.Methods {
		if !httpguts.ValidHeaderFieldName(m) { // a method is a token, as a header name is
			return bad("Methods", "%q is not a valid method", m)
		}
		if up := strings.ToUpper(m); m != up {
			return bad("Methods", "%q would never match a request (methods are case-sensitive): write %q", m, up)
		}
	}
	for _, h := range c.ReplayHeaders {
		if !httpguts.ValidHeaderFieldName(h) {
			return bad("ReplayHeaders", "%q is not a valid header name", h)
		}
		for _, n := range neverReplayed {
			if http.CanonicalHeaderKey(h) == http.CanonicalHeaderKey(n) {
				return bad("ReplayHeaders", "%s is never stored or replayed", n)
			}
		}
	}
	return nil
}
