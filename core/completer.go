package core

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/backoff"
)

// Completer finishes phased operations whose clients never came back: a request that
// crashed (or failed) and was not retried stays half done until it expires, perhaps
// after a phase reached the outside world (a provider charged); the Completer runs it
// again, as the client's retry would, so the phases it has not committed run, its
// response is recorded, and a later retry of the client gets the replay. A key that
// committed no phase is run from its start, as a retry would run it. It is the sibling of Sweeper: one per deployment is enough, several are
// safe.
//
// It needs an engine that keeps requests (Config.KeepRequest, phased mode) on a store
// that lists abandoned operations (storage.Completable: every store of this module). Each
// Pass asks the store for the started keys whose lease ended at least Grace ago, created
// less than Horizon ago, with fewer than MaxAttempts attempts and whose next attempt is
// due; counts an attempt on each (storage.Completable.BeginAttempt: of two completers only
// one wins it); and sends the kept request (method, host, path and query, body, kept headers)
// through Handler, the application's own router, so its middleware chain runs. The
// request's context carries a Completion (CompletionFromContext; Operation.Completing):
// the engine takes the key and the scope from it, without calling the scope function,
// and an authentication middleware in front of the engine must let it through (there is
// no caller to authenticate: it was authenticated when the key was claimed). The engine
// then takes the key over as it would for a client's retry, with a fresh fencing token,
// and resumes after the last committed phase; a client retry racing it gets 409 or the
// replay, never a second run of a phase.
//
// An attempt that does not leave the key completed (the handler answered 5xx or
// panicked) is logged, and the key is tried again after Backoff, doubled each attempt,
// at most MaxAttempts times; then it is left for the client's retry or expiry, visible
// in the idem command's show. Two failures no later attempt can fix use up the key's
// attempts at once, with an Error log saying which: the request never reached the
// engine (the route is gone or no longer behind the middleware, or a middleware in
// front of it refused the completer's request), or the engine found that it no longer
// matches the key's fingerprint (a header Fingerprint reads is not in KeepHeaders).
type Completer struct {
	// Engine is the application's engine, built with KeepRequest. Required.
	Engine *Engine
	// Handler serves the kept requests: the application's router, with the engine's
	// middleware on the routes as for its clients. Required.
	Handler http.Handler
	// Grace is how long after a lease ended the Completer leaves the key to its client's
	// own retry. Default: 1m.
	Grace time.Duration
	// Horizon: keys created longer ago are left alone. Default: the store's retention.
	Horizon time.Duration
	// Interval between passes of Run. Default: 30s.
	Interval time.Duration
	// MaxAttempts bounds the attempts on one key. Default: 5.
	MaxAttempts int
	// Backoff bounds the wait after a key's first attempt before its second; the bound
	// doubles with each attempt, up to an hour (or Backoff if longer), and each wait is
	// drawn from the upper half of its bound. Default: 30s.
	Backoff time.Duration
	// BatchSize is the most keys one Pass lists. Default: 100.
	BatchSize int
	// Logger receives a line per attempt that fails, per key given up, and per pass that
	// fails. Default: the engine's Logger.
	Logger *slog.Logger
}

// Completion is what a request run by the Completer carries in its context.
type Completion struct {
	// Scope and Key are the operation's.
	Scope, Key string
	// Attempt counts the Completer's attempts on the key, 1 for the first.
	Attempt int

	// What the engine did with the request, for the Completer: whether it saw it at all
	// (seen), and the protocol's final event when it ran it.
	seen    bool
	outcome Outcome
}

type completionKey struct{}

// CompletionFromContext returns the Completion of a request the Completer runs, and
// whether ctx carries one: a middleware that needs a live caller (authentication, rate
// limits) lets such a request through, and a handler can skip what only a live caller
// needs.
func CompletionFromContext(ctx context.Context) (Completion, bool) {
	c, ok := ctx.Value(completionKey{}).(*Completion)
	if !ok {
		return Completion{}, false
	}
	return *c, true
}

// Completing reports whether the Completer runs the operation: its client abandoned it,
// and nobody reads the response but a later retry's replay.
func (o *Operation) Completing() bool { return o.completing }

// completionOf returns the Completion r's context carries, nil for a client's request.
// The engine calls it, so it marks the Completion seen: the request reached the
// idempotency middleware.
func completionOf(r *http.Request) *Completion {
	c, _ := r.Context().Value(completionKey{}).(*Completion)
	if c != nil {
		c.seen = true
	}
	return c
}

// scopeOr returns the completion's scope, or scope() for a client's request (c nil).
func (c *Completion) scopeOr(scope func() string) string {
	if c == nil {
		return scope()
	}
	return c.Scope
}

// keptRequest is what the store keeps of r, whose body the engine read, for the
// Completer (Config.KeepRequest).
func (e *Engine) keptRequest(r *http.Request, body []byte) *storage.Request {
	// The URI the server received, as the application's router (Completer.Handler) sees
	// it: r.URL may have been rewritten on the way (http.StripPrefix), r.RequestURI not.
	uri := r.RequestURI
	if !strings.HasPrefix(uri, "/") {
		uri = r.URL.RequestURI()
	}
	kept := &storage.Request{Method: r.Method, Host: r.Host, URI: uri, Body: bytes.Clone(body)}
	for _, name := range e.keep {
		if v := r.Header.Values(name); len(v) > 0 {
			if kept.Header == nil {
				kept.Header = make(http.Header, len(e.keep))
			}
			kept.Header[name] = append([]string(nil), v...)
		}
	}
	return kept
}

// The defaults of Completer's fields.
const (
	defaultCompleterGrace    = time.Minute
	defaultCompleterInterval = 30 * time.Second
	defaultCompleterAttempts = 5
	defaultCompleterBackoff  = 30 * time.Second
	defaultCompleterBatch    = 100
	maxCompleterBackoff      = time.Hour
)

// store returns the engine's store as a storage.Completable, or an error wrapping
// ErrInvalidConfig naming what is missing.
func (c *Completer) store() (storage.Completable, error) {
	switch {
	case c.Engine == nil:
		return nil, fmt.Errorf("%w: Completer.Engine: required", ErrInvalidConfig)
	case c.Handler == nil:
		return nil, fmt.Errorf("%w: Completer.Handler: required", ErrInvalidConfig)
	case !c.Engine.cfg.KeepRequest:
		return nil, fmt.Errorf("%w: Completer.Engine: its Config.KeepRequest is off, so no request is kept to run again", ErrInvalidConfig)
	}
	s, ok := c.Engine.cfg.Store.(storage.Completable)
	if !ok {
		return nil, fmt.Errorf("%w: Completer.Engine: its store %T cannot list abandoned operations (storage.Completable)", ErrInvalidConfig, c.Engine.cfg.Store)
	}
	return s, nil
}

func (c *Completer) query() storage.AbandonedQuery {
	q := storage.AbandonedQuery{Grace: c.Grace, Horizon: c.Horizon, MaxAttempts: c.MaxAttempts, Limit: c.BatchSize}
	if q.Grace <= 0 {
		q.Grace = defaultCompleterGrace
	}
	if q.Horizon <= 0 {
		q.Horizon = c.Engine.retention
	}
	if q.MaxAttempts <= 0 {
		q.MaxAttempts = defaultCompleterAttempts
	}
	if q.Limit <= 0 {
		q.Limit = defaultCompleterBatch
	}
	return q
}

// backoff is the wait after attempt n (1 for the first) before the next: Backoff doubled
// per attempt up to an hour, drawn from the upper half of that bound (internal/backoff,
// the clients' own), so keys that failed together are not retried together.
func (c *Completer) backoff(n int) time.Duration {
	d := c.Backoff
	if d <= 0 {
		d = defaultCompleterBackoff
	}
	return backoff.Delay(d, max(d, maxCompleterBackoff), n)
}

func (c *Completer) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return c.Engine.cfg.Logger
}

// Pass runs one round: it lists the abandoned operations due for an attempt and runs
// each, one after the other, and reports how many it completed. An attempt that fails is
// logged and counted against its key, not returned; the error is the store's, listing
// or counting (the keys after it wait for the next pass), or one wrapping
// ErrInvalidConfig when the Completer cannot run at all.
func (c *Completer) Pass(ctx context.Context) (int, error) {
	store, err := c.store()
	if err != nil {
		return 0, err
	}
	q := c.query()
	sctx, cancel := context.WithTimeout(ctx, c.Engine.cfg.StoreTimeout)
	recs, err := store.Abandoned(sctx, q)
	cancel()
	if err != nil {
		return 0, fmt.Errorf("idem: listing abandoned operations: %w", err)
	}
	completed := 0
	for _, rec := range recs {
		if ctx.Err() != nil {
			return completed, context.Cause(ctx)
		}
		wait := c.backoff(rec.Attempts + 1)
		sctx, cancel := context.WithTimeout(ctx, c.Engine.cfg.StoreTimeout)
		won, err := store.BeginAttempt(sctx, rec.Scope, rec.Key, rec.Attempts, wait)
		cancel()
		if err != nil {
			return completed, fmt.Errorf("idem: counting a completer attempt: %w", err)
		}
		if !won { // another completer, or the client's retry, has it
			continue
		}
		if c.attempt(ctx, store, rec, rec.Attempts+1, q.MaxAttempts, wait) {
			completed++
		}
	}
	return completed, nil
}

// attempt runs rec's kept request through the handler as attempt n (the next one due
// after wait) and reports whether the key is completed afterwards.
func (c *Completer) attempt(ctx context.Context, store storage.Completable, rec *storage.Record, n, most int, wait time.Duration) (completed bool) {
	log := c.logger()
	attrs := []slog.Attr{slog.String("scope", clip(rec.Scope)), slog.String("key", clip(rec.Key)),
		slog.String("method", clip(rec.Request.Method)), slog.String("uri", clip(rec.Request.URI)),
		slog.String("recovery_point", rec.RecoveryPoint), slog.Int("attempt", n)}
	w := &discardWriter{}
	comp := &Completion{Scope: rec.Scope, Key: rec.Key, Attempt: n}
	panicked := c.serve(ctx, rec, comp, w)

	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.Engine.cfg.StoreTimeout)
	after, _, err := c.Engine.cfg.Store.Lookup(sctx, rec.Scope, rec.Key)
	cancel()
	switch {
	case err == nil && after.State == storage.StateCompleted:
		log.LogAttrs(ctx, slog.LevelInfo, "idem: completed an abandoned operation", append(attrs, slog.Int("status", w.status()))...)
		return true
	case errors.Is(err, storage.ErrNotFound): // released before any phase, or expired meanwhile
		return false
	}
	reason := fmt.Sprintf("the handler answered %d", w.status())
	if panicked != nil {
		reason = fmt.Sprintf("the handler panicked: %v", panicked)
	}
	// Two causes no later attempt can fix: give up at once.
	hopeless := ""
	switch {
	case !comp.seen:
		hopeless = "the request never reached the idempotency middleware: the route is gone, is no longer behind the middleware " +
			"(a handler that may have run unguarded), or a middleware before it refused the completer's request (let it through: core.CompletionFromContext)"
	case comp.outcome == OutcomeMismatch:
		hopeless = "the kept request no longer matches the key's fingerprint: keep the headers your Fingerprint reads (Config.KeepHeaders)"
	}
	attrs = append(attrs, slog.String("reason", reason))
	if err != nil {
		attrs = append(attrs, slog.Any("error", err))
	}
	if hopeless != "" {
		c.exhaust(ctx, store, rec, n, most, wait)
		log.LogAttrs(ctx, slog.LevelError, "idem: the completer gives up on an abandoned operation at once: "+hopeless+"; it is left for its client's retry", attrs...)
		return false
	}
	if n >= most {
		log.LogAttrs(ctx, slog.LevelError, "idem: the completer gives up on an abandoned operation; it is left for its client's retry", attrs...)
	} else {
		log.LogAttrs(ctx, slog.LevelWarn, "idem: a completer attempt did not complete the operation; it will try again", append(attrs, slog.Duration("retry_in", wait))...)
	}
	return false
}

// exhaust uses up the attempts left to rec's key after attempt n, so that no completer
// tries it again: each is BeginAttempt's compare-and-set, and one that loses (another
// completer, a client's retry holding the key) stops it.
func (c *Completer) exhaust(ctx context.Context, store storage.Completable, rec *storage.Record, n, most int, wait time.Duration) {
	for seen := n; seen < most; seen++ {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.Engine.cfg.StoreTimeout)
		won, err := store.BeginAttempt(sctx, rec.Scope, rec.Key, seen, wait)
		cancel()
		if err != nil || !won {
			return
		}
	}
}

// serve sends rec's kept request through the handler, with comp in its context, and
// returns what it panicked with, if it did.
func (c *Completer) serve(ctx context.Context, rec *storage.Record, comp *Completion, w http.ResponseWriter) (panicked any) {
	kept := rec.Request
	ctx = context.WithValue(ctx, completionKey{}, comp)
	r, err := http.NewRequestWithContext(ctx, kept.Method, kept.URI, bytes.NewReader(kept.Body))
	if err != nil {
		return err
	}
	r.RequestURI = kept.URI
	if kept.Host != "" {
		r.Host = kept.Host
	}
	r.RemoteAddr = "idem-completer"
	for k, v := range kept.Header {
		r.Header[k] = append([]string(nil), v...)
	}
	defer func() {
		if p := recover(); p != nil {
			panicked = p
		}
	}()
	c.Handler.ServeHTTP(w, r)
	return nil
}

// discardWriter is the ResponseWriter of a completer's request: nobody waits for the
// answer, which is recorded for the client's retry; it keeps the status for the log.
type discardWriter struct {
	h    http.Header
	code int
}

func (d *discardWriter) Header() http.Header {
	if d.h == nil {
		d.h = make(http.Header)
	}
	return d.h
}

func (d *discardWriter) WriteHeader(code int) {
	if d.code == 0 {
		d.code = code
	}
}

func (d *discardWriter) Write(p []byte) (int, error) {
	d.WriteHeader(http.StatusOK)
	return len(p), nil
}

func (d *discardWriter) status() int {
	if d.code == 0 {
		return http.StatusOK
	}
	return d.code
}

// Run makes a pass at once and then every Interval until ctx is done, and returns nil
// then: a shutdown is not an error. A pass that fails is logged and the next one tries
// again; the only error Run returns, at once, wraps ErrInvalidConfig: a Completer that
// cannot run at all (no Engine or Handler, an engine without KeepRequest, a store that
// cannot list abandoned operations).
func (c *Completer) Run(ctx context.Context) error {
	if _, err := c.store(); err != nil {
		return err
	}
	every(ctx, c.Interval, defaultCompleterInterval, c.logger(), "completer pass", "completed", c.Pass)
	return nil
}
