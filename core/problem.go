package core

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// ProblemTypeBase prefixes every problem type URI idem emits. The URIs are stable: clients
// may switch on them.
const ProblemTypeBase = "https://idemkit.dev/problems/"

// Problem type URIs, one per case.
const (
	ProblemKeyMissing       = ProblemTypeBase + "key-missing"        // 400
	ProblemKeyInvalid       = ProblemTypeBase + "key-invalid"        // 400
	ProblemKeyReused        = ProblemTypeBase + "key-reused"         // 422
	ProblemInProgress       = ProblemTypeBase + "in-progress"        // 409 + Retry-After
	ProblemBodyTooLarge     = ProblemTypeBase + "body-too-large"     // 413
	ProblemBodyUnreadable   = ProblemTypeBase + "body-unreadable"    // 400
	ProblemStoreUnavailable = ProblemTypeBase + "store-unavailable"  // 503 + Retry-After
	ProblemNotRecorded      = ProblemTypeBase + "not-recorded"       // 503 + Retry-After: the outcome could not be committed
	ProblemNotReplayable    = ProblemTypeBase + "response-too-large" // 409: completed, response too large to keep
)

// Problem is an RFC 9457 problem detail that idem answers with.
type Problem struct {
	// Type is one of the Problem* URIs.
	Type string `json:"type"`
	// Title is a short, fixed summary of the type.
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence.
	Detail string `json:"detail"`
	// RetryAfter, when positive, is sent as the Retry-After header in whole seconds (≥ 1).
	RetryAfter time.Duration `json:"-"`
	// Err is the error behind the problem, for logs and custom renderers; never sent.
	Err error `json:"-"`
}

// ProblemRenderer writes a problem to the client. Replace Config.Problem to change the
// body's shape; the status and Retry-After are the renderer's to send too.
type ProblemRenderer func(w http.ResponseWriter, r *http.Request, p *Problem)

// WriteProblem is the default ProblemRenderer: application/problem+json with type, title,
// status and detail, and Retry-After when set.
func WriteProblem(w http.ResponseWriter, _ *http.Request, p *Problem) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	if p.RetryAfter > 0 {
		h.Set("Retry-After", retryAfterSeconds(p.RetryAfter))
	}
	w.WriteHeader(p.Status)
	body, _ := json.Marshal(p) // strings and an int: cannot fail
	_, _ = w.Write(append(body, '\n'))
}

func retryAfterSeconds(d time.Duration) string {
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return strconv.FormatInt(s, 10)
}
