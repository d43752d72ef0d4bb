// Package enginelink joins core/adapter to the engine. core keeps its per-request entry
// point unexported, so that its documentation shows the application's API only, and sets
// Handle here in an init function; core/adapter calls it, under its own typed names.
// Nothing else uses this package.
package enginelink

import "net/http"

// The results Handle returns; core/adapter gives them a type and documents them
// (adapter.Passed, adapter.Ran, adapter.Answered).
const (
	Passed = iota + 1
	Ran
	Answered
)

// Handle runs eng, a *core.Engine, for one request, as core/adapter.Handle documents,
// and returns Passed, Ran or Answered. core sets it in an init function, so it is set
// before any code that can name a *core.Engine runs.
var Handle func(eng any, w http.ResponseWriter, r *http.Request, scope func() string, next func(held http.ResponseWriter, r *http.Request)) int
