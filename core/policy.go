package core

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Policy is a keyed route's idempotency contract as data: what a client sends, whose keys
// share a key space and for how long, what makes two requests the same, what is stored
// and replayed, and every answer. The IETF Idempotency-Key draft (§2.5.2) asks a
// resource to publish this specification, its expiration policy included; teams also
// keep it as a written record per endpoint. Engine.Policy and Config.Policy read it from
// the configuration and the store, so the published text cannot drift from what the
// server does.
//
// It renders as JSON (encoding/json; durations in seconds) and, with Markdown, as the
// record of one endpoint; idemopenapi adds it to an OpenAPI 3 document. Four fields are
// the application's to fill in, since the engine cannot know them: Scope (a function of
// the adapter's), Downstream, Tests, and Fingerprint when Config.Fingerprint is a
// function other than Fingerprint.
type Policy struct {
	// Key says where the key is and what it may be.
	Key KeyPolicy `json:"key"`
	// Methods lists the methods that take part (Config.Methods); other methods ignore a key.
	Methods []string `json:"methods"`
	// Scope says whose keys share one key space: keys never collide across scopes. The
	// engine holds no scope (each adapter takes a function), so set it to describe yours:
	// "the account named by the X-Account-ID header". Default: "the caller (as the
	// server's scope function names it: account, API key or tenant)".
	Scope string `json:"scope"`
	// Retention is how long a key counts (the store's Retention): a retry within it gets
	// the first outcome; a key older than it counts as absent, so the request runs again.
	Retention time.Duration `json:"-"`
	// Mode is ModeAtomic or ModePhased, as the engine resolved it.
	Mode Mode `json:"-"`
	// Fingerprint says what makes two requests with one key the same request.
	Fingerprint FingerprintPolicy `json:"fingerprint"`
	// Stored is the set of response statuses recorded and replayed (Config.Storable);
	// any other is sent once and releases the key, so a retry runs again.
	Stored Statuses `json:"stored_statuses"`
	// ReplayHeaders lists the response headers recorded and replayed with the status and
	// the body (Config.ReplayHeaders).
	ReplayHeaders []string `json:"replay_headers"`
	// MaxRequestBody is the largest request body accepted, in bytes (larger: 413).
	MaxRequestBody int64 `json:"max_request_body"`
	// MaxResponseBody is the largest response body recorded, in bytes.
	MaxResponseBody int64 `json:"max_response_body"`
	// Lease is how long a phased claim holds the key before a retry may take it over
	// (Config.Lease); 0 in atomic mode, where a crash rolls the claim back.
	Lease time.Duration `json:"-"`
	// Wait is how long a duplicate of a request in flight waits for its outcome before
	// answering 409: Config.LockWait in atomic mode, Config.LeaseWait in phased mode.
	Wait time.Duration `json:"-"`
	// RetryAfter is the Retry-After sent with 409 and 503 problems, rounded up to whole
	// seconds as it is sent.
	RetryAfter time.Duration `json:"-"`
	// DerivedKey is the format of the keys Operation.DerivedKey makes for calls to other
	// services: "<key>:<suffix>".
	DerivedKey string `json:"derived_key"`
	// ScopedDerivedKey is the format of Operation.ScopedDerivedKey's keys, for a provider
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

// KeyPolicy says where a route's idempotency key is and what it may be.
type KeyPolicy struct {
	// In is where the key is: "header", "body" (a member of the JSON body) or "custom"
	// (a KeyFromFunc function).
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

// FingerprintPolicy says which parts of a request its fingerprint covers. Two requests
// with one key and different fingerprints are two requests: the second is a 422 problem.
type FingerprintPolicy struct {
	// Covers lists the parts covered: "method", "path", "query", "body", "headers"; empty
	// when Custom and not described.
	Covers []string `json:"covers,omitempty"`
	// Body says how bodies are compared.
	Body string `json:"body,omitempty"`
	// Headers lists the request headers covered (FingerprintWithHeaders).
	Headers []string `json:"headers,omitempty"`
	// Custom reports a Config.Fingerprint other than Fingerprint, whose coverage the
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
	Problem ProblemKind `json:"problem,omitempty"`
	// Type is the problem's type URI (Config.ProblemBase and the kind): its documentation.
	Type string `json:"type,omitempty"`
	// Title is the problem's fixed title.
	Title string `json:"title,omitempty"`
	// Headers lists the headers idem adds: Idempotent-Replayed, Retry-After.
	Headers []string `json:"headers,omitempty"`
}

// Policy returns the policy of the routes the engine guards (see Policy).
func (e *Engine) Policy() Policy {
	c := e.cfg
	p := Policy{
		Key:              e.keyPolicy(),
		Methods:          slices.Clone(e.methods),
		Scope:            "the caller (as the server's scope function names it: account, API key or tenant)",
		Retention:        e.retention,
		Mode:             e.mode,
		Fingerprint:      fingerprintPolicy(c.Fingerprint),
		Stored:           StatusesOf(c.Storable),
		ReplayHeaders:    slices.Clone(c.ReplayHeaders),
		MaxRequestBody:   c.MaxRequestBody,
		MaxResponseBody:  c.MaxResponseBody,
		Wait:             c.LockWait,
		RetryAfter:       sentRetryAfter(c.RetryAfter),
		DerivedKey:       "<key>:<suffix>",
		ScopedDerivedKey: "<scope id>:<key>:<suffix>",
	}
	if e.mode == ModePhased {
		p.Lease, p.Wait = c.Lease, c.LeaseWait
	}
	p.Answers = e.answers(p)
	return p
}

// Policy returns the policy of the routes an engine for c guards: New(c) and its Policy.
// Gin and Echo users, whose adapters build the engine, call it on the core.Config they
// give the adapter. The error is New's.
func (c Config) Policy() (Policy, error) {
	e, err := New(c)
	if err != nil {
		return Policy{}, err
	}
	return e.Policy(), nil
}

func (e *Engine) keyPolicy() KeyPolicy {
	k := KeyPolicy{Required: !e.cfg.KeyOptional, MinLength: e.cfg.MinKeyLength, MaxLength: MaxKeyLength}
	switch ks := e.cfg.Key; ks.kind {
	case keyIdempotencyHeader:
		k.In, k.Name = "header", e.cfg.HeaderName
		k.Format = "an RFC 8941 string (\"...\", escapes \\\" and \\\\) whose content is the key, or the key itself without spaces or commas; surrounding spaces are trimmed; one field only"
	case keyHeader:
		k.In, k.Name = "header", ks.name
		k.Format = "the header's value, surrounding spaces trimmed; one field only"
	case keyJSON:
		k.In, k.Name = "body", strings.Join(ks.path, ".")
		k.Format = "a JSON string, whose content is the key, or a number, whose literal text is"
	default:
		k.In = "custom"
		k.Format = "found by the application's key function"
	}
	return k
}

// fingerprintPolicy describes f: Fingerprint's coverage, or custom.
func fingerprintPolicy(f FingerprintFunc) FingerprintPolicy {
	// A top-level function has one code pointer; any other function (a closure, a
	// wrapper of Fingerprint) is the application's to describe.
	if reflect.ValueOf(f).Pointer() == reflect.ValueOf(Fingerprint).Pointer() {
		return FingerprintPolicy{Covers: []string{"method", "path", "query", "body"}, Body: canonicalBody}
	}
	return FingerprintPolicy{Custom: true}
}

const canonicalBody = "a JSON body compared canonically (RFC 8785: member order and white space do not matter, values do); any other body byte for byte"

// answers lists every answer of a keyed request under e's configuration.
func (e *Engine) answers(p Policy) []Answer {
	c := e.cfg
	as := []Answer{
		{Name: "first", Case: fmt.Sprintf("A new %s: the handler runs once; a response whose status is stored is recorded before it is sent.", c.Key.noun(c.HeaderName))},
		{Name: "replay", Case: "The same key and request after the first completed: the recorded status, headers and body, byte for byte.", Headers: []string{replayedHeader}},
		{Name: "not-stored", Case: fmt.Sprintf("The handler answered a status that is not stored (%s): the response is sent once and the key released, so a retry with it runs again.", StatusesOf(func(s int) bool { return !c.Storable(s) }))},
	}
	for _, k := range problemKinds() {
		if k == ProblemKeyMissing && c.KeyOptional {
			continue // a request without a key runs unprotected instead
		}
		pr := e.newProblem(k, "", nil)
		a := Answer{Name: string(k), Case: e.problemCase(k, p), Status: pr.Status, Problem: k, Type: pr.Type, Title: pr.Title}
		if pr.RetryAfter > 0 {
			a.Headers = []string{"Retry-After"}
		}
		as = append(as, a)
	}
	return as
}

// problemOrder is the order answers list the problems in, with the kind's case; a kind
// not listed here follows them, in the order of its status, with its title as its case.
var problemOrder = []ProblemKind{ProblemInProgress, ProblemKeyReused, ProblemKeyMissing, ProblemKeyInvalid,
	ProblemBodyTooLarge, ProblemBodyUnreadable, ProblemStoreUnavailable, ProblemCollision, ProblemNotRecorded, ProblemResponseTooLarge, ProblemMisconfigured}

// problemKinds returns every kind (the kinds table is their one definition), in
// problemOrder and then by status and name.
func problemKinds() []ProblemKind {
	rank := func(k ProblemKind) int {
		if i := slices.Index(problemOrder, k); i >= 0 {
			return i
		}
		return len(problemOrder)
	}
	ks := make([]ProblemKind, 0, len(kinds))
	for k := range kinds {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b ProblemKind) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		if d := a.Status() - b.Status(); d != 0 {
			return d
		}
		return strings.Compare(string(a), string(b))
	})
	return ks
}

// problemCase says when kind k is the answer under e's configuration.
func (e *Engine) problemCase(k ProblemKind, p Policy) string {
	c := e.cfg
	switch k {
	case ProblemInProgress:
		if e.mode == ModeAtomic {
			return fmt.Sprintf("The same key and request while the first is still running: it waits up to %s for the first to commit and then gets its outcome; when the wait runs out, this problem. A retry with the same key gets the outcome once there is one.", durationText(p.Wait))
		}
		wait := "at once"
		if p.Wait > 0 {
			wait = fmt.Sprintf("if the first has not finished within %s (otherwise its outcome)", durationText(p.Wait))
		}
		return fmt.Sprintf("The same key and request while the first is still running: this problem, %s. A retry with the same key gets the outcome once there is one; if the first attempt died, a retry after its lease (%s) takes over and resumes after its last committed phase.", wait, durationText(p.Lease))
	case ProblemKeyReused:
		when := "whether that one finished or is still running"
		if e.mode == ModeAtomic {
			when = "once that one has committed (while it runs, this request waits for it, as for in-progress)"
		}
		return fmt.Sprintf("The %s was first used with a different request (its fingerprint differs): nothing runs. The answer comes %s.", c.Key.noun(c.HeaderName), when)
	case ProblemKeyMissing:
		return fmt.Sprintf("A %s request without %s: nothing runs.", strings.Join(p.Methods, " or "), c.Key.where(c.HeaderName))
	case ProblemKeyInvalid:
		return fmt.Sprintf("A malformed key (not %d–%d characters of printable ASCII, or not in the format the key's source takes): nothing runs.", p.Key.MinLength, p.Key.MaxLength)
	case ProblemBodyTooLarge:
		return fmt.Sprintf("A request body over %d bytes: nothing runs.", c.MaxRequestBody)
	case ProblemBodyUnreadable:
		return "A request body that could not be read or fingerprinted: nothing runs."
	case ProblemStoreUnavailable:
		return "The key store failed or did not answer in time: the request did not run (fail closed). Retry with the same key."
	case ProblemCollision:
		return "The request collided with a concurrent twin and was rolled back. Retry with the same key."
	case ProblemNotRecorded:
		return "The outcome could not be recorded or confirmed, or the request was cancelled: nothing was kept. Retry with the same key."
	case ProblemResponseTooLarge:
		return fmt.Sprintf("A retry of a request that completed with a response over %d bytes, too large to keep: the operation happened once and is not run again, and there is nothing to replay. Do not retry.", c.MaxResponseBody)
	case ProblemMisconfigured:
		return fmt.Sprintf("A server misconfiguration: a scope that is empty (the middleware ran before authentication) or that no store can hold (over %d bytes, not UTF-8, or with a NUL), or two idem middlewares on one route: nothing runs.", MaxScopeLength)
	}
	return k.Title() + "."
}

// durationText writes d as people do: 24h, 30m, 90s, 2s, 500ms.
func durationText(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0 && d >= 10*time.Minute:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return d.String()
}

// sentRetryAfter is d as the Retry-After header sends it (retryAfterSeconds rounds it).
func sentRetryAfter(d time.Duration) time.Duration {
	n, _ := strconv.ParseInt(retryAfterSeconds(d), 10, 64) // digits: cannot fail
	return time.Duration(n) * time.Second
}

// policyJSON is Policy's JSON form: durations in seconds, the mode by name.
type policyJSON struct {
	Key              KeyPolicy         `json:"key"`
	Methods          []string          `json:"methods"`
	Scope            string            `json:"scope"`
	Retention        float64           `json:"retention_seconds"`
	Mode             string            `json:"mode"`
	Fingerprint      FingerprintPolicy `json:"fingerprint"`
	Stored           Statuses          `json:"stored_statuses"`
	ReplayHeaders    []string          `json:"replay_headers"`
	MaxRequestBody   int64             `json:"max_request_body"`
	MaxResponseBody  int64             `json:"max_response_body"`
	Lease            float64           `json:"lease_seconds,omitempty"`
	Wait             float64           `json:"wait_seconds"`
	RetryAfter       float64           `json:"retry_after_seconds"`
	DerivedKey       string            `json:"derived_key"`
	ScopedDerivedKey string            `json:"scoped_derived_key"`
	Downstream       []string          `json:"downstream,omitempty"`
	Tests            []string          `json:"tests,omitempty"`
	Answers          []Answer          `json:"answers"`
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
	mode := ModeDefault
	switch w.Mode {
	case "atomic":
		mode = ModeAtomic
	case "phased":
		mode = ModePhased
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
		p.Scope, durationText(p.Retention), countText(int64(p.Retention/time.Second), "second"))
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
			case replayedHeader:
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
	case ModeAtomic:
		return "atomic mode: the claim, the handler's database writes and the recorded response commit in one transaction; a failure rolls all of them back"
	case ModePhased:
		return fmt.Sprintf("phased mode: the claim commits with a %s lease, each named phase commits with its recovery point, and a retry after a crash takes over once the lease has passed and resumes after the last committed phase", durationText(p.Lease))
	}
	return "mode " + p.Mode.String()
}

func (k KeyPolicy) describe(methods []string) string {
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

func (f FingerprintPolicy) describe() string {
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
