package idemclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/internal/backoff"
)

// ReplayedHeader is the header an idem server adds, with the value "true", to a response
// it replays from a finished earlier attempt instead of running the request again.
const ReplayedHeader = "Idempotent-Replayed"

// The defaults of Transport's zero fields.
const (
	defaultMaxAttempts = 5
	defaultMaxElapsed  = 30 * time.Second
)

// drainLimit bounds what is read of a retried response's body before it is closed: a
// short body read to its end lets the connection be reused, a longer one is cut.
const drainLimit = 64 << 10

// Transport is an http.RoundTripper that sends each unsafe request (Methods) with one
// idempotency key for its logical operation and retries it, with that same key and the
// same body, while the failure is one a retry can cure. Its zero value is ready to use:
//
//	client := &http.Client{Transport: &idemclient.Transport{}}
//
// The key is chosen once, before the first attempt: the request's own header when it has
// one (kept as it is), else the key set with WithKey on the request's context (the way to
// keep one key across a double click or a process restart), else a fresh random UUID.
// Every attempt sends it. Requests of other methods pass to Base untouched: no key, one
// attempt.
//
// Retried: a transport error (connection refused or reset, an answer that never came or
// came too late), but not one a retry cannot cure: the request's context ending, a URL
// net/http cannot send (a scheme other than http and https, no host: one attempt), a
// server certificate the client rejects (unknown authority, another host's name,
// expired); then 408,
// 429, 502, 503, 504, and a 409 that says "in progress": idem's in-progress problem
// (application/problem+json whose type's last segment, after its last '/' or '#', is
// "in-progress", whatever the server's problem base), or any 409 carrying a valid
// Retry-After. Never retried: every other status, 400, 422, any
// other 4xx, and 500 and 501 (the server meant them). The wait before a retry is the
// response's Retry-After (seconds or an HTTP-date) when it has one, else a jittered
// exponential backoff (InitialBackoff, MaxBackoff). The retries stop at MaxAttempts, at
// MaxElapsed, and when the request's context ends; a wait that would end past MaxElapsed
// or the context's deadline is not started, and the last response is returned as it
// came. The body of a response that is retried is drained (up to 64 KiB) and closed.
//
// The body is replayed with Request.GetBody, which http.NewRequest sets for a
// *bytes.Buffer, *bytes.Reader or *strings.Reader. A request with a body and no GetBody
// gets exactly one attempt (with its key), since its body cannot be sent twice.
//
// Transport keeps no state between requests and is safe for concurrent use; it must not
// be changed while in use. It does not modify the caller's request: each attempt is a
// clone carrying the key, which is therefore on the response's Request
// (resp.Request.Header.Get(core.DefaultHeaderName)).
type Transport struct {
	// Base sends each attempt. Default: http.DefaultTransport.
	Base http.RoundTripper

	// Methods are the request methods that get a key and retries, as written in
	// Request.Method. Default (nil): POST and PATCH, the methods an idem server keys by
	// default.
	Methods []string

	// Header is the name of the key's header. Default: core.DefaultHeaderName ("Idempotency-Key").
	Header string

	// MaxAttempts caps the attempts of one logical request, the first included; 1 turns
	// retries off. Default (any value below 1): 5.
	MaxAttempts int

	// MaxElapsed bounds the retrying of one logical request: no retry starts later than
	// MaxElapsed after the first attempt started (an attempt in flight is bounded by the
	// request's context alone). Default (any value not above 0): 30s.
	MaxElapsed time.Duration

	// InitialBackoff is the longest wait before the first retry of an answer without
	// Retry-After: the wait is drawn uniformly between half of it and all of it, and each
	// later wait's range doubles, up to MaxBackoff ("equal jitter"). Default: 500ms.
	InitialBackoff time.Duration

	// MaxBackoff caps a backoff wait (a Retry-After is honoured as sent, within
	// MaxElapsed and the context's deadline). Default: 8s.
	MaxBackoff time.Duration

	// OnRetry, when set, is called before each wait for a retry, on the goroutine that
	// called RoundTrip. It must not modify info.Request.
	OnRetry func(info RetryInfo)

	// Logger, when set, gets one line per retry (level Info) and one when the transport
	// gives up on an answer it would have retried (level Warn). Default: nil, quiet.
	Logger *slog.Logger

	// sleep waits d, or until ctx ends (then it returns the context's cause); now reads
	// the clock. Nil means the real ones; tests replace them (export_test.go).
	sleep func(ctx context.Context, d time.Duration) error
	now   func() time.Time
}

// RetryInfo describes one retry, for Transport.OnRetry.
type RetryInfo struct {
	// Request is the caller's request (its body already consumed).
	Request *http.Request
	// Key is the idempotency key every attempt sends.
	Key string
	// Attempt is the number of the attempt that failed, from 1.
	Attempt int
	// Status is that attempt's response status, 0 when it got no response.
	Status int
	// Err is that attempt's transport error, nil when it got a response.
	Err error
	// Wait is how long the transport waits before the next attempt.
	Wait time.Duration
	// RetryAfter reports whether Wait is the response's Retry-After (otherwise it is the
	// backoff's).
	RetryAfter bool
}

// RoundTrip sends req, with its key and retries when req.Method is one of Methods, and
// returns the last attempt's response or error. Errors are wrapped with %w.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	res := resultFrom(ctx)
	if !t.keyed(req.Method) {
		resp, err := t.base().RoundTrip(req)
		if res != nil {
			*res = Result{Attempts: 1, Replayed: resp != nil && isReplay(resp)}
		}
		return resp, err
	}
	name := t.header()

	// The logical request: the caller's, with the key set once for every attempt.
	logical := req.Clone(ctx)
	key := req.Header.Get(name)
	if key == "" {
		var err error
		if key, err = keyFor(ctx); err != nil {
			closeBody(req)
			return nil, err
		}
		logical.Header.Set(name, key)
	}
	if res != nil {
		*res = Result{Key: key}
	}
	// A body without GetBody cannot be sent twice.
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil

	maxAttempts := t.maxAttempts()
	if !replayable {
		maxAttempts = 1
	}
	began := t.clock()
	for attempt := 1; ; attempt++ {
		a := logical
		if attempt > 1 {
			a = logical.Clone(ctx) // with no GetBody, the body is nil or http.NoBody: nothing to replay
			if logical.GetBody != nil {
				body, err := logical.GetBody()
				if err != nil {
					return nil, fmt.Errorf("idemclient: attempt %d: replaying the body: %w", attempt, err)
				}
				a.Body = body
			}
		}
		resp, err := t.base().RoundTrip(a)
		if res != nil {
			res.Attempts = attempt
			res.Replayed = resp != nil && isReplay(resp)
		}

		var again bool
		var wait time.Duration
		var fromServer bool
		if err != nil {
			again = ctx.Err() == nil && sendable(a.URL) && retryableError(err)
		} else if again = retryableStatus(resp.StatusCode); again {
			wait, fromServer = retryAfter(resp, t.clock())
			if resp.StatusCode == http.StatusConflict && !fromServer {
				// A 409 is retried for its Retry-After, or for saying "in progress".
				again = inProgress(resp)
			}
		}
		if !again {
			if err != nil {
				return nil, fmt.Errorf("idemclient: attempt %d: %w", attempt, err)
			}
			return resp, nil
		}
		if !fromServer {
			wait = backoff.Delay(t.InitialBackoff, t.MaxBackoff, attempt)
		}
		now := t.clock()
		var stop string
		deadline, hasDeadline := ctx.Deadline()
		switch {
		case attempt >= maxAttempts && !replayable:
			stop = "the body cannot be replayed (no GetBody)"
		case attempt >= maxAttempts:
			stop = "MaxAttempts reached"
		case now.Add(wait).Sub(began) > t.maxElapsed():
			stop = "the wait would pass MaxElapsed"
		case hasDeadline && now.Add(wait).After(deadline):
			stop = "the wait would pass the context's deadline"
		}
		info := RetryInfo{Request: req, Key: key, Attempt: attempt, Err: err, Wait: wait, RetryAfter: fromServer}
		if resp != nil {
			info.Status = resp.StatusCode
		}
		if stop != "" {
			t.log(ctx, slog.LevelWarn, "idemclient: giving up: "+stop, info)
			if err != nil {
				return nil, fmt.Errorf("idemclient: attempt %d, giving up (%s): %w", attempt, stop, err)
			}
			return resp, nil
		}
		t.log(ctx, slog.LevelInfo, "idemclient: retrying", info)
		if t.OnRetry != nil {
			t.OnRetry(info)
		}
		if resp != nil {
			drain(resp.Body)
		}
		if err := t.wait(ctx, wait); err != nil {
			return nil, fmt.Errorf("idemclient: waiting to retry after attempt %d: %w", attempt, err)
		}
	}
}

// CloseIdleConnections closes Base's idle connections, if Base has such a method (as
// *http.Transport does), so that http.Client.CloseIdleConnections reaches them.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base().(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

func (t *Transport) keyed(method string) bool {
	if t.Methods == nil {
		return method == http.MethodPost || method == http.MethodPatch
	}
	return slices.Contains(t.Methods, method)
}

func (t *Transport) header() string {
	if t.Header != "" {
		return t.Header
	}
	return core.DefaultHeaderName
}

func (t *Transport) maxAttempts() int {
	if t.MaxAttempts < 1 {
		return defaultMaxAttempts
	}
	return t.MaxAttempts
}

func (t *Transport) maxElapsed() time.Duration {
	if t.MaxElapsed <= 0 {
		return defaultMaxElapsed
	}
	return t.MaxElapsed
}

func (t *Transport) clock() time.Time {
	if t.now != nil {
		return t.now()
	}
	return time.Now()
}

func (t *Transport) wait(ctx context.Context, d time.Duration) error {
	if t.sleep != nil {
		return t.sleep(ctx, d)
	}
	return backoff.Sleep(ctx, d)
}

func (t *Transport) log(ctx context.Context, level slog.Level, msg string, info RetryInfo) {
	if t.Logger == nil || !t.Logger.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("method", info.Request.Method),
		slog.String("url", info.Request.URL.Redacted()),
		slog.String("key", info.Key),
		slog.Int("attempt", info.Attempt),
	}
	if info.Err != nil {
		attrs = append(attrs, slog.Any("error", info.Err))
	} else {
		attrs = append(attrs, slog.Int("status", info.Status))
	}
	attrs = append(attrs, slog.Duration("wait", info.Wait), slog.Bool("retry_after", info.RetryAfter))
	t.Logger.LogAttrs(ctx, level, msg, attrs...)
}

// keyFor is the key a request without the header gets: WithKey's, or a fresh UUID.
func keyFor(ctx context.Context) (string, error) {
	if k, ok := ctx.Value(keyKey{}).(string); ok {
		if k == "" {
			return "", errors.New("idemclient: WithKey was given an empty key")
		}
		return k, nil
	}
	id, err := uuid.NewRandom()
	if err != nil {
		return "", fmt.Errorf("idemclient: generating a key: %w", err)
	}
	return id.String(), nil
}

// sendable reports whether u is a URL net/http can send: http or https, with a host. An
// error for another (an unsupported scheme, no host) is about the request, not the
// network, and sending again gets the same error.
func sendable(u *url.URL) bool {
	return u != nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// retryableError reports whether a transport error may be cured by sending again: any
// error but a server certificate the client rejected, whatever the reason (an unknown
// authority, another host's name, expired or not yet valid): sending again gets the same
// certificate. The caller has checked that the request's context is still live.
func retryableError(err error) bool {
	var (
		verification *tls.CertificateVerificationError
		authority    x509.UnknownAuthorityError
		hostname     x509.HostnameError
		invalid      x509.CertificateInvalidError
	)
	return !errors.As(err, &verification) && !errors.As(err, &authority) &&
		!errors.As(err, &hostname) && !errors.As(err, &invalid)
}

// drain reads what is left of a body, up to drainLimit, and closes it.
func drain(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, drainLimit)
	_ = body.Close()
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
