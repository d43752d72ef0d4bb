// Package adapter is for authors of framework adapters: it runs a core.Engine for one
// request of any framework that can hand over an http.ResponseWriter and an
// *http.Request, as ginidem and echoidem do. Applications do not need it: they mount
// core.Engine.Middleware (net/http), ginidem or echoidem.
//
// An adapter reads the request, calls Handle with a function that runs the rest of the
// framework's chain into the held writer it is given, and acts on the Result:
//
//	switch adapter.Handle(eng, w, r, scope, runChainInto) {
//	case adapter.Passed:
//		// not keyed: run the rest of the chain as usual
//	case adapter.Ran, adapter.Answered:
//		// the engine has answered on w: stop the chain
//	}
package adapter

import (
	"net/http"
	"strconv"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/internal/enginelink"
)

// Result says what Handle did with a request, and so what the adapter does next.
type Result int

const (
	// Passed: the request does not take part (its method is not in core.Config.Methods,
	// or its key is optional and absent). The engine wrote nothing and next did not run:
	// run the rest of the chain as usual, on the original writer and request. (When
	// core.Config.Key looks in the body, the engine has read it: the request's Body is
	// then a copy of what it read.)
	Passed Result = enginelink.Passed

	// Ran: the key was claimed and next ran the rest of the chain into the held writer;
	// the engine then wrote the outcome on w: the handler's response once recorded, or a
	// problem when it could not be recorded. The chain has run: stop it.
	Ran Result = enginelink.Ran

	// Answered: the engine answered on w without running next: a replay, or a problem
	// (a missing or malformed key, a key in progress or reused, a store that failed, a
	// misconfiguration). Stop the chain: its handlers must not run.
	Answered Result = enginelink.Answered
)

// String returns "passed", "ran" or "answered".
func (r Result) String() string {
	switch r {
	case Passed:
		return "passed"
	case Ran:
		return "ran"
	case Answered:
		return "answered"
	}
	return "Result(" + strconv.Itoa(int(r)) + ")"
}

// Handle runs eng's protocol for one request and reports what happened (see Result):
//
//   - A request that does not take part is left to the adapter: Passed.
//   - A keyed request is claimed under scope(), which Handle calls once, only for such a
//     request (so it may read what authentication stored in the framework's context).
//     When the key is free, next(held, r2) runs the rest of the chain and Handle returns
//     Ran: the handler must write its response into held, which holds it until the
//     engine has recorded it (held refuses to flush or hijack: wrap it in the framework's
//     writer), and r2's context carries the core.Operation and the store's transaction.
//     next must not keep held or r2 after it returns. A panic in next releases the key
//     and is re-raised, for the framework's recovery to answer.
//   - Otherwise the engine answers on w, next does not run, and Handle returns Answered:
//     a replay, a problem, or a 500 problem of kind core.ProblemMisconfigured naming the
//     route for a request that already runs under an operation (a second idem
//     middleware on the route: a group's and the route's own).
//
// Set r.Pattern to the framework's route pattern first (c.FullPath() in Gin, c.Path() in
// Echo), as http.ServeMux does, so that core.Event.Route and log lines name the route.
// eng must not be nil.
func Handle(eng *core.Engine, w http.ResponseWriter, r *http.Request, scope func() string, next func(held http.ResponseWriter, r *http.Request)) Result {
	return Result(enginelink.Handle(eng, w, r, scope, next))
}
