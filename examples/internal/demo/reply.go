package demo

import (
	"encoding/json"
	"net/http"

	"github.com/idemkit/idem/core"
)

// Reply is a handler's answer in a framework-neutral form: both servers write it as is,
// so they answer byte for byte alike.
type Reply struct {
	Status int
	Header http.Header
	Body   []byte
}

// Write sends r on w (a gin.ResponseWriter, an *echo.Response, any http.ResponseWriter).
func (r Reply) Write(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range r.Header {
		h[k] = v
	}
	w.WriteHeader(r.Status)
	_, _ = w.Write(r.Body)
}

// Problem type URIs of the demo's own errors (the idempotency errors are core's, linking
// to docs/problems.md). Each is a section of examples/README.md, which says what happened
// and what the client should do; TestProblemTypesAreDocumented keeps them in step.
const (
	ProblemTypeBase        = "https://github.com/idemkit/idem/blob/main/examples/README.md#"
	ProblemUnauthenticated = ProblemTypeBase + "unauthenticated" // 401
	ProblemInvalidRequest  = ProblemTypeBase + "invalid-request" // 400, stored and replayed
	ProblemNotFound        = ProblemTypeBase + "not-found"       // 404
	ProblemInternal        = ProblemTypeBase + "internal"        // 500, the key is released
	ProblemUnavailable     = ProblemTypeBase + "unavailable"     // 503 + Retry-After, the key is released
	ProblemProvider        = ProblemTypeBase + "provider-failed" // 502, the key is released
)

// jsonReply marshals v with a trailing newline, as core's problems have.
func jsonReply(status int, v any, header ...string) Reply {
	body, err := json.Marshal(v)
	if err != nil { // the demo's types always marshal
		panic(err)
	}
	h := http.Header{"Content-Type": {"application/json"}}
	for i := 0; i+1 < len(header); i += 2 {
		h.Set(header[i], header[i+1])
	}
	return Reply{Status: status, Header: h, Body: append(body, '\n')}
}

// problem is an RFC 9457 problem with core's shape (type, title, status, detail).
func problem(status int, typ, title, detail string) Reply {
	body, _ := json.Marshal(&core.Problem{Type: typ, Title: title, Status: status, Detail: detail}) // strings and an int
	return Reply{Status: status, Header: http.Header{"Content-Type": {"application/problem+json"}}, Body: append(body, '\n')}
}

func invalid(detail string) Reply {
	return problem(http.StatusBadRequest, ProblemInvalidRequest, "Invalid request body", detail)
}

func notFoundReply(what, id string) Reply {
	return problem(http.StatusNotFound, ProblemNotFound, "Not found", "There is no "+what+" "+quoteID(id)+" in this account.")
}

func quoteID(id string) string {
	b, _ := json.Marshal(id)
	return string(b)
}

// Internal answers a failure of the server: a 500 problem, which the idempotency
// middleware never stores, so the key is released (in atomic mode everything rolls
// back) and a retry runs again.
func Internal() Reply {
	return problem(http.StatusInternalServerError, ProblemInternal, "Internal error",
		"The request failed and nothing was kept; retry it with the same Idempotency-Key.")
}

// Unavailable answers a database that was only busy, or Redis unavailable to a payment's
// phase: a 503 problem with Retry-After: 1, never stored, so the key is released and a
// retry after that second runs again.
func Unavailable() Reply {
	rep := problem(http.StatusServiceUnavailable, ProblemUnavailable, "Service unavailable",
		"A database was busy or unreachable and nothing was kept; retry it with the same Idempotency-Key after Retry-After seconds.")
	rep.Header.Set("Retry-After", "1")
	return rep
}
