package core

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// DefaultProblemBase prefixes every problem type URI unless Config.ProblemBase names
// another: the problem's documentation in this repository, one section per kind (what
// happened and what the client should do), as the Idempotency-Key draft asks of error
// responses. An API that documents the problems itself sets its own base.
const DefaultProblemBase = "https://github.com/idemkit/idem/blob/main/docs/problems.md#"

// ProblemKind names one kind of problem idem answers with. Its type URI is
// Config.ProblemBase followed by the kind, and each kind has one status and one title.
// The kinds are stable: clients may switch on the type URI, and custom renderers and
// tests on Problem.Kind.
type ProblemKind string

// The problem kinds, with the status each is sent with.
const (
	ProblemKeyMissing       ProblemKind = "key-missing"        // 400
	ProblemKeyInvalid       ProblemKind = "key-invalid"        // 400
	ProblemKeyReused        ProblemKind = "key-reused"         // 422
	ProblemInProgress       ProblemKind = "in-progress"        // 409 + Retry-After
	ProblemBodyTooLarge     ProblemKind = "body-too-large"     // 413
	ProblemBodyUnreadable   ProblemKind = "body-unreadable"    // 400
	ProblemBodyTimeout      ProblemKind = "body-timeout"       // 408: the body did not arrive in time
	ProblemStoreUnavailable ProblemKind = "store-unavailable"  // 503 + Retry-After: the handler did not run
	ProblemCollision        ProblemKind = "collision"          // 503 + Retry-After: rolled back after colliding with a twin
	ProblemNotRecorded      ProblemKind = "not-recorded"       // 503 + Retry-After: the outcome was not recorded
	ProblemResponseTooLarge ProblemKind = "response-too-large" // 410: completed once, its response too large to keep; never retry
	ProblemMisconfigured    ProblemKind = "misconfigured"      // 500: the server's idempotency setup is wrong
	ProblemCannotResume     ProblemKind = "cannot-resume"      // 500: the recorded recovery point is one the handler no longer reaches
)

// kinds holds each kind's status and title, the one place they are defined.
//
// ProblemResponseTooLarge is 410 Gone, not 409: the draft's 409 means "in progress, retry
// later", and a client following it would retry a completed operation forever. 410 says
// the stored answer is gone for good. Retry policies (go-retryablehttp, Stainless SDKs,
// idemclient) retry 408, 409, 429 and 5xx, never 410; a 5xx would also read as a failed
// operation, and a 400 or 422 as the client's mistake, either of which invites sending the
// operation again under a new key.
var kinds = map[ProblemKind]struct {
	status int
	title  string
}{
	ProblemKeyMissing:       {http.StatusBadRequest, "Idempotency key missing"},
	ProblemKeyInvalid:       {http.StatusBadRequest, "Invalid idempotency key"},
	ProblemKeyReused:        {http.StatusUnprocessableEntity, "Idempotency key reused"},
	ProblemInProgress:       {http.StatusConflict, "Request in progress"},
	ProblemBodyTooLarge:     {http.StatusRequestEntityTooLarge, "Request body too large"},
	ProblemBodyUnreadable:   {http.StatusBadRequest, "Request body unreadable"},
	ProblemBodyTimeout:      {http.StatusRequestTimeout, "Request body timed out"},
	ProblemStoreUnavailable: {http.StatusServiceUnavailable, "Idempotency store unavailable"},
	ProblemCollision:        {http.StatusServiceUnavailable, "Try again"},
	ProblemNotRecorded:      {http.StatusServiceUnavailable, "Outcome not recorded"},
	ProblemResponseTooLarge: {http.StatusGone, "Response not replayable"},
	ProblemMisconfigured:    {http.StatusInternalServerError, "Server misconfigured"},
	ProblemCannotResume:     {http.StatusInternalServerError, "Operation cannot resume"},
}

// Status is the HTTP status the kind is sent with.
func (k ProblemKind) Status() int { return kinds[k].status }

// Title is the kind's fixed, short summary.
func (k ProblemKind) Title() string { return kinds[k].title }

// Problem is an RFC 9457 problem detail that idem answers with.
type Problem struct {
	// Type is the problem's type URI: Config.ProblemBase followed by Kind.
	Type string `json:"type"`
	// Title is the kind's fixed summary.
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence.
	Detail string `json:"detail"`
	// Kind names the problem; Type, Title and Status follow from it.
	Kind ProblemKind `json:"-"`
	// RetryAfter, when positive, is sent as the Retry-After header in whole seconds (≥ 1).
	RetryAfter time.Duration `json:"-"`
	// Err is the error behind the problem, for logs and custom renderers; never sent.
	Err error `json:"-"`
}

// newProblem builds the problem of kind k with the engine's base.
func (e *Engine) newProblem(k ProblemKind, detail string, err error) *Problem {
	p := &Problem{Type: e.cfg.ProblemBase + string(k), Title: k.Title(), Status: k.Status(), Detail: detail, Kind: k, Err: err}
	switch k {
	case ProblemInProgress, ProblemStoreUnavailable, ProblemCollision, ProblemNotRecorded:
		p.RetryAfter = e.cfg.RetryAfter
	}
	return p
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
