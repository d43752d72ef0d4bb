// Package policy is a keyed route's idempotency contract as data: what a client sends,
// whose keys share a key space and for how long, what makes two requests the same, what
// is stored and replayed, and every answer. core.Engine.Policy fills it in from the
// engine's configuration and store; it renders as JSON and as Markdown, and idemopenapi
// puts it in an OpenAPI 3 document.
package policy

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/humantime"
)

// Policy is a keyed route's idempotency contract as data: what a client sends, whose keys
// share a key space and for how long, what makes two requests the same, what is stored
// and replayed, and every answer. The IETF Idempotency-Key draft (§2.5.2) asks a
// resource to publish this specification, its expiration policy included; teams also
// keep it as a written record per endpoint. core.Engine.Policy reads it from the
// configuration and the store, so the published text cannot drift from what the server
// does.
//
// It renders as JSON (encoding/json; durations in seconds) and, with Markdown, as the
// record of one endpoint; idemopenapi adds it to an OpenAPI 3 document. Four fields are
// the application's to fill in, since the engine cannot know them: Scope (a function of
// the adapter's), Downstream, Tests, and Fingerprint when core.Config.Fingerprint is a
// function other than core.Fingerprint.
type Policy struct {
	// Key says where the key is and what it may be.
	Key Key `json:"key"`
	// Methods lists the methods that take part (core.Config.Methods); other methods ignore a key.
	Methods []string `json:"methods"`
	// Scope says whose keys share one key space: keys never collide across scopes. The
	// engine holds no scope (each adapter takes a function), so set it to describe yours:
	// "the account named by the X-Account-ID header". Default: "the caller (as the
	// server's scope function names it: account, API key or tenant)".
	Scope string `json:"scope"`
	// Retention is how long a key counts (the store's Retention): a retry within it gets
	// the first outcome; a key older than it counts as absent, so the request runs again.
	Retention time.Duration `json:"-"`
	// Mode is core.ModeAtomic or core.ModePhased, as the engine resolved it.
	Mode storage.Mode `json:"-"`
	// Fingerprint says what makes two requests with one key the same request.
	Fingerprint Fingerprint `json:"fingerprint"`
	// Stored is the set of response statuses recorded and replayed (core.Config.Storable);
	// any other is sent once and releases the key, so a retry runs again.
	Stored Statuses `json:"stored_statuses"`
	// ReplayHeaders lists the response headers recorded and replayed with the status and
	// the body (core.Config.ReplayHeaders).
	ReplayHeaders []string `json:"replay_headers"`
	// MaxRequestBody is the largest request body accepted, in bytes (larger: 413).
	MaxRequestBody int64 `json:"max_request_body"`
	// MaxResponseBody is the largest response body recorded, in bytes.
	MaxResponseBody int64 `json:"max_response_body"`
	// Lease is how long a phased claim holds the key before a retry may take it over
	// (core.Config.Lease); 0 in atomic mode, where a crash rolls the claim back.
	Lease time.Duration `json:"-"`
	// Wait is how long a duplicate of a request in flight waits for its outcome before
	// answering 409: core.Config.LockWait in atomic mode, core.Config.LeaseWait in phased mode.
	Wait time.Duration `json:"-"`
	// RetryAfter is the Retry-After sent with 409 and 503 problems, rounded up to whole
	// seconds as it is sent.
	RetryAfter time.Duration `json:"-"`
	// DerivedKey is the format of the keys core.Operation.DerivedKey makes for calls to other
	// services: "<key>:<suffix>".
	DerivedKey string `json:"derived_key"`
	// ScopedDerivedKey is the format of core.Operation.ScopedDerivedKey's keys, for a provider
	// account that several scopes share: "<scope id>:<key>:<suffix>", the scope id being
	// the first 16 hex digits of the scope's SHA-256.
	ScopedDerivedKey string `json:"scoped_derived_key"`
	// Downstream lists the calls to other services and the keys they get, in the
	// application's words ("the payment provider: <key>:charge"). Default: none.
	Downstream []string `json:"downstream,omitempty"`
	// Tests lists what proves the policy ("idemtest.Check in orders_test.go"). Default: none.
	Tests []string `json:"tests,omitempty"`
	// Answers lists every answer the route gives to a keyed request, the handler's own
	// first and then idem's problems.
	Answers []Answer `json:"answers"`
}

// Key says where a route's idempotency key is and what it may be.
type Key struct {
	// In is where the key is: "header", "body" (a member of the JSON body) or "custom"
	// (a core.KeyFromFunc function).
	In string `json:"in"`
	// Name is the header's name, or the path of the JSON member ("data.id"); "" for custom.
	Name string `json:"name,omitempty"`
	// Required: a request without a key is a 400 problem. When false, it runs unprotected.
	Required bool `json:"required"`
	// MinLength and MaxLength bound the key, in characters of printable ASCII.
	MinLength int `json:"min_length"`
	MaxLength int `json:"max_length"`
	// Format says how the value is read.
	Format string `json:"format"`
}

// Fingerprint says which parts of a request its fingerprint covers. Two requests
// with one key and different fingerprints are two requests: the second is a 422 problem.
type Fingerprint struct {
	// Covers lists the parts covered: "method", "path", "query", "body", "headers"; empty
	// when Custom and not described.
	Covers []string `json:"covers,omitempty"`
	// Body says how bodies are compared.
	Body string `json:"body,omitempty"`
	// Headers lists the request headers covered (core.FingerprintWithHeaders).
	Headers []string `json:"headers,omitempty"`
	// Custom reports a core.Config.Fingerprint other than core.Fingerprint, whose coverage the
	// engine cannot read: describe it in Covers, Body and Headers.
	Custom bool `json:"custom,omitempty"`
}

// Answer is one response a keyed route may give.
type Answer struct {
	// Name identifies the answer: the problem kind for a problem; "first", "replay" or
	// "not-stored" for the handler's own response.
	Name string `json:"name"`
	// Case says when it is given.
	Case string `json:"case"`
	// Status is the HTTP status; 0 when it is the handler's.
	Status int `json:"status,omitempty"`
	// Problem is the problem's kind, "" for the handler's own response.
	Problem string `json:"problem,omitempty"`
	// Type is the problem's type URI (core.Config.ProblemBase and the kind): its documentation.
	Type string `json:"type,omitempty"`
	// Title is the problem's fixed title.
	Title string `json:"title,omitempty"`
	// Headers lists the headers idem adds: Idempotent-Replayed, Retry-After.
	Headers []string `json:"headers,omitempty"`
}

// policyJSON is Policy's JSON form: durations in seconds, the mode by name.
type policyJSON struct {
	Key              Key         `json:"key"`
	Methods          []string    `json:"methods"`
	Scope            string      `json:"scope"`
	Retention        float64     `json:"retention_seconds"`
	Mode             string      `json:"mode"`
	Fingerprint      Fingerprint `json:"fingerprint"`
	Stored           Statuses    `json:"stored_statuses"`
	ReplayHeaders    []string    `json:"replay_headers"`
	MaxRequestBody   int64       `json:"max_request_body"`
	MaxResponseBody  int64       `json:"max_response_body"`
	Lease            float64     `json:"lease_seconds,omitempty"`
	Wait             float64     `json:"wait_seconds"`
	RetryAfter       float64     `json:"retry_after_seconds"`
	DerivedKey       string      `json:"derived_key"`
	ScopedDerivedKey string      `json:"scoped_derived_key"`
	Downstream       []string    `json:"downstream,omitempty"`
	Tests            []string    `json:"tests,omitempty"`
	Answers          []Answer    `json:"answers"`
}

// MarshalJSON writes p with its durations in seconds (retention_seconds, lease_seconds,
// wait_seconds, retry_after_seconds) and its mode by name ("atomic", "phased").
func (p Policy) MarshalJSON() ([]byte, error) {
	return json.Marshal(policyJSON{Key: p.Key, Methods: p.Methods, Scope: p.Scope, Retention: p.Retention.Seconds(),
		Mode: p.Mode.String(), Fingerprint: p.Fingerprint, Stored: p.Stored, ReplayHeaders: p.ReplayHeaders,
		MaxRequestBody: p.MaxRequestBody, MaxResponseBody: p.MaxResponseBody, Lease: p.Lease.Seconds(), Wait: p.Wait.Seconds(),
		RetryAfter: p.RetryAfter.Seconds(), DerivedKey: p.DerivedKey, ScopedDerivedKey: p.ScopedDerivedKey,
		Downstream: p.Downstream, Tests: p.Tests, Answers: p.Answers})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (p *Policy) UnmarshalJSON(b []byte) error {
	var w policyJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	secs := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	mode := storage.ModeDefault
	switch w.Mode {
	case "atomic":
		mode = storage.ModeAtomic
	case "phased":
		mode = storage.ModePhased
	}
	*p = Policy{Key: w.Key, Methods: w.Methods, Scope: w.Scope, Retention: secs(w.Retention), Mode: mode,
		Fingerprint: w.Fingerprint, Stored: w.Stored, ReplayHeaders: w.ReplayHeaders, MaxRequestBody: w.MaxRequestBody,
		MaxResponseBody: w.MaxResponseBody, Lease: secs(w.Lease), Wait: secs(w.Wait), RetryAfter: secs(w.RetryAfter),
		DerivedKey: w.DerivedKey, ScopedDerivedKey: w.ScopedDerivedKey, Downstream: w.Downstream, Tests: w.Tests, Answers: w.Answers}
	return nil
}

// Markdown returns the policy as the written record of one endpoint ("POST /v1/orders"):
// mechanism; key, scope and retention; fingerprint; what is stored; the responses;
// downstream keys; tests.
func (p Policy) Markdown(endpoint string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### Idempotency for %s\n\n", endpoint)
	fmt.Fprintf(&b, "- **Mechanism:** idem, %s.\n", mechanismText(p))
	fmt.Fprintf(&b, "- **Key:** %s.\n", p.Key.describe(p.Methods))
	fmt.Fprintf(&b, "- **Scope and retention:** keys belong to %s and never collide across scopes; a key is kept %s (%s), then counts as absent and a retry runs again.\n",
		p.Scope, humantime.Duration(p.Retention), countText(int64(p.Retention/time.Second), "second"))
	fmt.Fprintf(&b, "- **Fingerprint:** %s. The same key with another fingerprint is refused.\n", p.Fingerprint.describe())
	fmt.Fprintf(&b, "- **Stored:** statuses %s; headers %s; request bodies up to %s, recorded response bodies up to %s.\n",
		p.Stored, codeList(p.ReplayHeaders), countText(p.MaxRequestBody, "byte"), countText(p.MaxResponseBody, "byte"))
	b.WriteString("- **Responses:**\n\n  | case | status | problem | headers |\n  | --- | --- | --- | --- |\n")
	for _, a := range p.Answers {
		status, problem, headers := "the handler's", "", make([]string, 0, len(a.Headers))
		if a.Status != 0 {
			status = strconv.Itoa(a.Status)
		}
		if a.Problem != "" {
			problem = fmt.Sprintf("[%s](%s)", a.Problem, a.Type)
		}
		for _, h := range a.Headers {
			switch h {
			case "Retry-After":
				h += ": " + strconv.FormatInt(int64(p.RetryAfter/time.Second), 10)
			case "Idempotent-Replayed":
				h += ": true"
			}
			headers = append(headers, "`"+h+"`")
		}
		fmt.Fprintf(&b, "  | %s | %s | %s | %s |\n", strings.ReplaceAll(a.Case, "|", `\|`), status, problem, strings.Join(headers, ", "))
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "- **Downstream keys:** `%s` (`Operation.DerivedKey`), or `%s` for a provider account several scopes share (`Operation.ScopedDerivedKey`)", p.DerivedKey, p.ScopedDerivedKey)
	if len(p.Downstream) > 0 {
		fmt.Fprintf(&b, ". This endpoint: %s.\n", strings.Join(p.Downstream, "; "))
	} else {
		b.WriteString("; this endpoint lists none.\n")
	}
	if len(p.Tests) > 0 {
		fmt.Fprintf(&b, "- **Tests:** %s.\n", strings.Join(p.Tests, "; "))
	} else {
		b.WriteString("- **Tests:** none listed.\n")
	}
	return b.String()
}

func mechanismText(p Policy) string {
	switch p.Mode {
	case storage.ModeAtomic:
		return "atomic mode: the claim, the handler's database writes and the recorded response commit in one transaction; a failure rolls all of them back"
	case storage.ModePhased:
		return fmt.Sprintf("phased mode: the claim commits with a %s lease, each named phase commits with its recovery point, and a retry after a crash takes over once the lease has passed and resumes after the last committed phase", humantime.Duration(p.Lease))
	}
	return "mode " + p.Mode.String()
}

func (k Key) describe(methods []string) string {
	var where string
	switch k.In {
	case "header":
		where = "the `" + k.Name + "` header"
	case "body":
		where = "the JSON body's member `" + k.Name + "`"
	default:
		where = "the application's key function"
	}
	need := "required"
	if !k.Required {
		need = "optional (a request without one runs unprotected)"
	}
	return fmt.Sprintf("%s, %s on %s; %d–%d characters of printable ASCII: %s", where, need, strings.Join(methods, ", "), k.MinLength, k.MaxLength, k.Format)
}

func (f Fingerprint) describe() string {
	if len(f.Covers) == 0 {
		return "custom (the application's Config.Fingerprint)"
	}
	s := strings.Join(f.Covers, ", ")
	if len(f.Headers) > 0 {
		s += " (headers " + codeList(f.Headers) + ")"
	}
	if f.Body != "" {
		s += "; " + f.Body
	}
	return s
}

// codeList writes names as inline code, comma separated; "none" when there are none.
func codeList(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return "`" + strings.Join(names, "`, `") + "`"
}

func countText(n int64, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return strconv.FormatInt(n, 10) + " " + unit + "s"
}

// Statuses is a set of HTTP statuses (100–599) as a policy states it: whole classes,
// classes with exceptions, and single statuses, separated by commas, such as
// "2xx, 3xx, 4xx (except 408, 409, 425, 429)", or "none".
type Statuses string

// StatusesOf returns the statuses from 100 to 599 for which in reports true.
func StatusesOf(in func(status int) bool) Statuses {
	var parts []string
	for class := 1; class <= 5; class++ {
		var yes, no []string
		for s := class * 100; s < class*100+100; s++ {
			if in(s) {
				yes = append(yes, strconv.Itoa(s))
			} else {
				no = append(no, strconv.Itoa(s))
			}
		}
		switch {
		case len(no) == 0:
			parts = append(parts, fmt.Sprintf("%dxx", class))
		case len(yes) > len(no):
			parts = append(parts, fmt.Sprintf("%dxx (except %s)", class, strings.Join(no, ", ")))
		default:
			parts = append(parts, yes...)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return Statuses(strings.Join(parts, ", "))
}

// Has reports whether status is in s. A malformed s has none.
func (s Statuses) Has(status int) bool {
	depth, from := 0, 0
	for i := 0; i <= len(s); i++ {
		switch {
		case i < len(s) && s[i] == '(':
			depth++
		case i < len(s) && s[i] == ')':
			depth--
		case i == len(s) && depth != 0:
			return false // an unclosed "(except"
		case i == len(s) || s[i] == ',' && depth == 0:
			if matchStatuses(strings.TrimSpace(string(s[from:i])), status) {
				return true
			}
			from = i + 1
		}
	}
	return false
}

// matchStatuses reports whether item ("404", "4xx", "4xx (except 408, 409)") holds status.
func matchStatuses(item string, status int) bool {
	class, except, _ := strings.Cut(item, "(except ")
	class = strings.TrimSpace(class)
	if len(class) == 3 && strings.HasSuffix(class, "xx") {
		if strconv.Itoa(status/100) != class[:1] {
			return false
		}
		for n := range strings.SplitSeq(strings.TrimSuffix(except, ")"), ",") {
			if strings.TrimSpace(n) == strconv.Itoa(status) {
				return false
			}
		}
		return true
	}
	return class == strconv.Itoa(status)
}
