// Package ginidem makes unsafe Gin routes (POST, PATCH) safe to retry with an
// Idempotency-Key: the handler runs once per key, and every retry gets the same answer.
//
// It is a thin adapter: the decisions (key parsing, fingerprint, claim, replay, 409, 422,
// release) are core.Engine's. The middleware hands the engine the request and a function
// that runs the rest of the Gin chain; while that chain runs, c.Writer holds the
// response in memory, and c.Request carries the operation and the store's transaction,
// so core.MustOperation(c.Request.Context()), pgxstore.MustTx and gormstore.MustDB reach them.
// Nothing reaches the client until the engine has recorded (and, in atomic mode,
// committed) the outcome.
//
//	eng, err := core.New(core.Config{Store: store}) // one engine for the application
//	if err != nil { ... }
//	r := gin.New()
//	r.Use(gin.Recovery())
//	v1 := r.Group("/v1", auth, ginidem.New(eng, ginidem.Config{ // auth sets c.Set("account", …)
//		Scope: func(c *gin.Context) string { return c.GetString("account") },
//	}))
//	v1.POST("/orders", createOrder)
//
// examples/quickstart is a whole program built this way (Gin, pgxstore, auth, sweeper,
// graceful shutdown).
//
// # Which requests are keyed
//
// The middleware handles the methods in core.Config.Methods (POST and PATCH by default)
// and lets every other request through untouched; a handled request without a key is a
// 400 problem unless core.Config.KeyOptional is set. Mounted with r.Use on the whole
// engine it therefore keys every POST and PATCH of the app, so a /login or a webhook
// route would get 400. Mount it on the group that needs it, as above, or on single
// routes (r.POST("/orders", mw, h)). Two recipes for the rest:
//
//	// Mounted on the whole app, skip routes by their pattern:
//	r.Use(ginidem.New(eng, ginidem.Config{
//		Scope:   scope,
//		Skipper: func(c *gin.Context) bool { return c.FullPath() == "/login" },
//	}))
//
//	// One route that honours a key without requiring one: another contract, so an
//	// engine of its own on the same store (see core's documentation).
//	optionalEng, err := core.New(core.Config{Store: store, KeyOptional: true})
//	v1.POST("/carts", ginidem.New(optionalEng, ginidem.Config{Scope: scope}), addToCart)
//
// Skipper runs before any key is read and sees the *gin.Context, so c.FullPath() (the
// route pattern, "/orders/:id") and what earlier middleware stored are available.
// Mount exactly one idempotency middleware in front of each route: a request that meets
// a second one (a group's and a route's in a row) is answered 500 misconfigured, naming
// the route, and nothing runs.
//
// The middleware sets c.Request.Pattern to c.FullPath(), as net/http's ServeMux sets
// its pattern, so that core.Event.Route, and the metrics and log lines built on it, name
// the route ("/orders/:id") rather than a path holding identifiers.
//
// # Scope
//
// Scope is required: keys live per scope, so a multi-tenant API returns the caller's
// identity, set by your authentication middleware, which must therefore run first.
// core's documentation (Scope) states what an empty or invalid scope does.
//
// # The handler's response
//
// Middleware that rewrites the response body (compression) belongs before ginidem, so
// that what is held, recorded and replayed is the handler's plain response: a
// Content-Encoding header is not in the default replay allow-list.
//
// What the handler's response does:
//
//   - c.JSON, c.Data, c.String, c.Redirect, c.AbortWithStatusJSON and friends are held,
//     and the status they set is what the engine judges: 2xx, 3xx and deterministic 4xx
//     are recorded and replayed; 5xx releases the key so a retry runs again.
//   - A handler that records errors with c.Error and writes nothing is answered 500 and
//     its key released, not recorded as an empty 200. Mount the middleware that renders
//     c.Errors after ginidem, so that the page it renders is what gets recorded.
//   - A panic releases the key and is re-raised, so gin.Recovery (mounted before
//     ginidem) still answers 500.
//   - Flush (c.Stream, SSE) panics with ErrStreaming and Hijack returns it: a held
//     response cannot be streamed. Pusher returns nil. CloseNotify reaches the real
//     writer. Serve streaming and WebSocket routes without the middleware.
package ginidem
