// Package echoidem makes unsafe Echo v4 routes (POST, PATCH) safe to retry with an
// Idempotency-Key: the handler runs once per key, and every retry gets the same answer.
//
// It is a thin adapter: the decisions (key parsing, fingerprint, claim, replay, 409, 422,
// release) are core.Engine's. The middleware hands the engine the request and a function
// that runs the rest of the Echo chain; while that chain runs, c.Response() is a fresh
// echo.Response holding the response in memory, and c.Request() carries the operation
// and the store's transaction, so core.MustOperation(c.Request().Context()),
// pgxstore.MustTx and gormstore.MustDB reach them. Nothing reaches the client until the engine
// has recorded (and, in atomic mode, committed) the outcome.
//
//	eng, err := core.New(core.Config{Store: store}) // one engine for the application
//	if err != nil { ... }
//	e := echo.New()
//	e.Use(middleware.Recover())
//	scope := func(c echo.Context) string { s, _ := c.Get("account").(string); return s } // set by auth
//	v1 := e.Group("/v1", auth, echoidem.New(eng, echoidem.Config{Scope: scope}))
//	v1.POST("/orders", createOrder)
//
// The engine's options (store, mode, methods, limits) are core.Config's, given once to
// core.New; echoidem.Config holds what is Echo's: the Skipper and the Scope.
//
// # Which requests are keyed
//
// The middleware handles the methods in core.Config.Methods (POST and PATCH by default)
// and lets every other request through untouched; a handled request without a key is a
// 400 problem unless core.Config.KeyOptional is set. Mounted with e.Use it therefore
// keys every POST and PATCH of the app, so a /login or a webhook route would get 400.
// Mount it on the group that needs it, as above, or on single routes (e.POST("/orders",
// h, mw)). Two recipes for the rest:
//
//	// Mounted on the whole app, skip routes by their pattern:
//	e.Use(echoidem.New(eng, echoidem.Config{
//		Skipper: func(c echo.Context) bool { return c.Path() == "/login" },
//		Scope:   scope,
//	}))
//
//	// One route that honours a key without requiring one: another contract, so an
//	// engine of its own on the same store (see core's documentation).
//	optionalEng, err := core.New(core.Config{Store: store, KeyOptional: true})
//	v1.POST("/carts", addToCart, echoidem.New(optionalEng, echoidem.Config{Scope: scope}))
//
// Skipper runs before any key is read; c.Path() is the route pattern ("/orders/:id"),
// and a middleware.Skipper fits. Mount exactly one idempotency middleware in front of
// each route: a request that meets a second one (a group's and a route's in a row) is
// answered 500 misconfigured, naming the route, and nothing runs.
//
// The middleware sets c.Request().Pattern to c.Path(), as net/http's ServeMux sets
// its pattern, so that core.Event.Route, and the metrics and log lines built on it, name
// the route ("/orders/:id") rather than a path holding identifiers.
//
// # Scope
//
// The scope is required: keys live per scope, so a multi-tenant API returns the caller's
// identity, set by your authentication middleware, which must therefore run first.
// core's documentation (Scope) states what an empty or invalid scope does. Read the
// account with a checked type assertion as above: c.Get(…).(string) unchecked panics
// when it is unset.
//
// # The handler's response
//
// Middleware that rewrites the response body (compression) belongs before echoidem, so
// that what is held, recorded and replayed is the handler's plain response: a
// Content-Encoding header is not in the default replay allow-list.
//
// What the handler's response does:
//
//   - Everything written through c.JSON, c.Blob, c.NoContent, c.Redirect … is held,
//     and its status is what the engine judges: 2xx, 3xx and deterministic 4xx are
//     recorded and replayed; 5xx releases the key so a retry runs again.
//   - A returned error goes through c.Error (the HTTPErrorHandler) while the response
//     is held, so Echo's error page (echo.NewHTTPError(400) → 400 JSON) is what gets
//     recorded, or released for a 5xx; the middleware then returns nil.
//   - A panic releases the key and is re-raised, so the recover middleware (mounted
//     before echoidem) still answers 500.
//   - Flush (c.Response().Flush, SSE) panics with ErrStreaming and Hijack returns it: a
//     held response cannot be streamed. Serve streaming and WebSocket routes without
//     the middleware, or skip them with Skipper.
package echoidem
