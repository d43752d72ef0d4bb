package core

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem/core/policy"
	"github.com/idemkit/idem/internal/humantime"
)

// Policy returns the contract of the routes the engine guards, as data (see
// core/policy), read from the configuration and the store, so the published text cannot
// drift from what the server does. Scope, Downstream and Tests are the application's to
// fill in, and Fingerprint when Config.Fingerprint is a function of its own.
func (e *Engine) Policy() policy.Policy {
	c := e.cfg
	p := policy.Policy{
		Key:              e.keyPolicy(),
		Methods:          slices.Clone(e.methods),
		Scope:            "the caller (as the server's scope function names it: account, API key or tenant)",
		Retention:        e.retention,
		Mode:             e.mode,
		Fingerprint:      fingerprintPolicy(c.Fingerprint),
		Stored:           policy.StatusesOf(c.Storable),
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

func (e *Engine) keyPolicy() policy.Key {
	k := policy.Key{Required: !e.cfg.KeyOptional, MinLength: e.cfg.MinKeyLength, MaxLength: MaxKeyLength}
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
func fingerprintPolicy(f FingerprintFunc) policy.Fingerprint {
	// A top-level function has one code pointer; any other function (a closure, a
	// wrapper of Fingerprint) is the application's to describe.
	if isFingerprint(f) {
		return policy.Fingerprint{Covers: []string{"method", "path", "query", "body"}, Body: canonicalBody}
	}
	return policy.Fingerprint{Custom: true}
}

const canonicalBody = "a JSON body compared canonically (RFC 8785: member order and white space do not matter, values do); any other body byte for byte"

// answers lists every answer of a keyed request under e's configuration.
func (e *Engine) answers(p policy.Policy) []policy.Answer {
	c := e.cfg
	as := []policy.Answer{
		{Name: "first", Case: fmt.Sprintf("A new %s: the handler runs once; a response whose status is stored is recorded before it is sent.", c.Key.noun(c.HeaderName))},
		{Name: "replay", Case: "The same key and request after the first completed: the recorded status, headers and body, byte for byte.", Headers: []string{replayedHeader}},
		{Name: "not-stored", Case: fmt.Sprintf("The handler answered a status that is not stored (%s): the response is sent once and the key released, so a retry with it runs again.", policy.StatusesOf(func(s int) bool { return !c.Storable(s) }))},
	}
	for _, k := range problemKinds() {
		if k == ProblemKeyMissing && c.KeyOptional {
			continue // a request without a key runs unprotected instead
		}
		if k == ProblemCannotResume && e.mode != ModePhased {
			continue // only a takeover resumes, and only phased mode takes over
		}
		pr := e.newProblem(k, "", nil)
		a := policy.Answer{Name: string(k), Case: e.problemCase(k, p), Status: pr.Status, Problem: string(k), Type: pr.Type, Title: pr.Title}
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
	ProblemBodyTooLarge, ProblemBodyUnreadable, ProblemBodyTimeout, ProblemStoreUnavailable, ProblemCollision, ProblemNotRecorded, ProblemResponseTooLarge, ProblemMisconfigured}

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
func (e *Engine) problemCase(k ProblemKind, p policy.Policy) string {
	c := e.cfg
	switch k {
	case ProblemInProgress:
		if e.mode == ModeAtomic {
			return fmt.Sprintf("The same key and request while the first is still running: it waits up to %s for the first to commit and then gets its outcome; when the wait runs out, this problem. A retry with the same key gets the outcome once there is one.", humantime.Duration(p.Wait))
		}
		wait := "at once"
		if p.Wait > 0 {
			wait = fmt.Sprintf("if the first has not finished within %s (otherwise its outcome)", humantime.Duration(p.Wait))
		}
		return fmt.Sprintf("The same key and request while the first is still running: this problem, %s. A retry with the same key gets the outcome once there is one; if the first attempt died, a retry after its lease (%s) takes over and resumes after its last committed phase.", wait, humantime.Duration(p.Lease))
	case ProblemKeyReused:
		when := "whether that one finished or is still running"
		if e.mode == ModeAtomic {
			when = "once that one has committed (while it runs, this request waits for it, as for in-progress)"
		}
		return fmt.Sprintf("The %s was first used with a different request (its fingerprint differs): nothing runs. The answer comes %s.", c.Key.noun(c.HeaderName), when)
	case ProblemKeyMissing:
		_, _, where := c.Key.names(c.HeaderName)
		return fmt.Sprintf("A %s request without %s: nothing runs.", strings.Join(p.Methods, " or "), where)
	case ProblemKeyInvalid:
		return fmt.Sprintf("A malformed key (not %d–%d characters of printable ASCII, or not in the format the key's source takes): nothing runs.", p.Key.MinLength, p.Key.MaxLength)
	case ProblemBodyTooLarge:
		return fmt.Sprintf("A request body over %d bytes: nothing runs.", c.MaxRequestBody)
	case ProblemBodyUnreadable:
		return "A request body that could not be read or fingerprinted: nothing runs."
	case ProblemBodyTimeout:
		return "A request body that did not arrive before the server's read deadline: nothing runs."
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

// sentRetryAfter is d as the Retry-After header sends it (retryAfterSeconds rounds it).
func sentRetryAfter(d time.Duration) time.Duration {
	n, _ := strconv.ParseInt(retryAfterSeconds(d), 10, 64) // digits: cannot fail
	return time.Duration(n) * time.Second
}
