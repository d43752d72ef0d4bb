package idemtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idemkit/idem/core"
)

// Defaults of the Target fields.
const (
	// DefaultParallel is how many same-key requests the parallel check sends at once.
	DefaultParallel = 20
	// DefaultTimeout bounds a whole run.
	DefaultTimeout = 60 * time.Second
	// DefaultRequestTimeout bounds each request.
	DefaultRequestTimeout = 10 * time.Second
)

// Target is the route under test and how to reach it: exactly one of Handler and URLs.
type Target struct {
	// Handler serves the route in-process. Run serves it on a loopback httptest.Server
	// for the length of the run, so requests cross real HTTP (two Idempotency-Key fields
	// stay two fields) and are bounded by RequestTimeout.
	Handler http.Handler

	// URLs are base URLs of a deployed API ("https://staging.example.com"), Path is
	// appended to each. With several (instances behind one database) the requests
	// alternate between them, so a replay lands on another instance than the first
	// request and a per-instance cache shows.
	URLs []string

	// Client sends the requests. Default: a client of its own, with RequestTimeout and
	// enough connections for Parallel requests at once.
	Client *http.Client

	// Method of the route. Default: POST.
	Method string

	// Path of the route, with its query if any ("/v1/orders"). Required.
	Path string

	// Body returns the request body of the i-th operation of the run (i from 0). The kit
	// calls it once per fresh key, and sends the same bytes again for that key's
	// retries. Return a new body for each i where the API refuses duplicates (a unique
	// email, an order number); returning the same bytes for every i is fine otherwise.
	// Default: an empty body.
	Body func(i int) []byte

	// Header is sent with every request: authentication, the caller's account (the key's
	// scope), Content-Type. Content-Type defaults to application/json when the body is
	// JSON and Header sets none.
	Header http.Header

	// KeyHeader is the header that carries the key. Default: core.DefaultHeaderName.
	KeyHeader string

	// SideEffects, when set, counts the route's side effect (rows in its table, calls
	// to a fake provider): checks then require exactly one per operation, and none for
	// a rejected request. It is called from the goroutine that called Run, never
	// concurrently with itself. Default: nil (responses only are checked).
	SideEffects func() int

	// InjectFailure, when set, is called on one request before it is sent and must make
	// the handler fail with a 5xx (set a header your test handler reacts to, or arm your
	// fake provider to fail its next call). The failure check then requires that the
	// retry with the same key runs the operation again. Default: nil (check skipped).
	InjectFailure func(r *http.Request)

	// GetPath, when set, is a GET route ("/v1/orders") that must ignore the key: a GET
	// with a key, even the key of an operation, is answered as one without. Default: ""
	// (check skipped).
	GetPath string

	// Parallel is how many same-key requests the parallel check sends at once.
	// Default: DefaultParallel (20).
	Parallel int

	// Timeout bounds the whole run, on top of the context's own deadline. Default:
	// DefaultTimeout (60s).
	Timeout time.Duration

	// RequestTimeout bounds each request. Default: DefaultRequestTimeout (10s).
	RequestTimeout time.Duration
}

// errTarget is wrapped by every error about an invalid Target.
var errTarget = errors.New("idemtest: invalid Target")

// withDefaults returns t with its zero fields set, or an error naming the wrong field.
func (t Target) withDefaults() (Target, error) {
	switch {
	case t.Handler == nil && len(t.URLs) == 0:
		return t, fmt.Errorf("%w: Handler or URLs: one is required", errTarget)
	case t.Handler != nil && len(t.URLs) > 0:
		return t, fmt.Errorf("%w: Handler and URLs: set one, not both", errTarget)
	case !strings.HasPrefix(t.Path, "/"):
		return t, fmt.Errorf("%w: Path %q: want a path starting with /", errTarget, t.Path)
	case t.GetPath != "" && !strings.HasPrefix(t.GetPath, "/"):
		return t, fmt.Errorf("%w: GetPath %q: want a path starting with /", errTarget, t.GetPath)
	case t.Parallel < 0 || t.Parallel == 1:
		return t, fmt.Errorf("%w: Parallel %d: want at least 2 (or 0 for %d)", errTarget, t.Parallel, DefaultParallel)
	}
	for _, u := range t.URLs {
		p, err := url.Parse(u)
		if err != nil {
			return t, fmt.Errorf("%w: URLs: %w", errTarget, err)
		}
		if p.Scheme != "http" && p.Scheme != "https" || p.Host == "" {
			return t, fmt.Errorf("%w: URLs: %q: want http:// or https:// and a host", errTarget, u)
		}
	}
	if t.Method == "" {
		t.Method = http.MethodPost
	}
	t.Method = strings.ToUpper(t.Method)
	if t.Body == nil {
		t.Body = func(int) []byte { return nil }
	}
	if t.KeyHeader == "" {
		t.KeyHeader = core.DefaultHeaderName
	}
	if t.Parallel == 0 {
		t.Parallel = DefaultParallel
	}
	if t.Timeout <= 0 {
		t.Timeout = DefaultTimeout
	}
	if t.RequestTimeout <= 0 {
		t.RequestTimeout = DefaultRequestTimeout
	}
	t.Header = t.Header.Clone()
	if t.Header == nil {
		t.Header = http.Header{}
	}
	if t.Header.Get("Content-Type") == "" && json.Valid(t.Body(0)) {
		t.Header.Set("Content-Type", "application/json")
	}
	return t, nil
}

// describe names the target in reports: "POST /v1/orders on http://a, http://b".
func (t Target) describe() string {
	where := "an in-process handler"
	if len(t.URLs) > 0 {
		where = strings.Join(t.URLs, ", ")
	}
	return t.Method + " " + t.Path + " on " + where
}
