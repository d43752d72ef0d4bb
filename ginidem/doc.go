// Package ginidem makes unsafe Gin routes (POST, PATCH) safe to retry with an
// Idempotency-Key: the handler runs once per key, and every retry gets the same answer.
//
// It is a thin adapter: the decisions (key parsing, fingerprint, claim, replay, 409, 422,
// release) are core.Engine's. The middleware hands the engine the request and a function
// that runs the rest of the Gin chain; while that chain runs, c.Writer holds the
// response in memory, and c.Request carries the operation and the store's transaction,
// so core.OperationFrom(c.Request.Context()), pgxstore.Tx and gormstore.DB reach them.
// Nothing reaches the client until the engine has recorded (and, in atomic mode,
// committed) the outcome.
//
//	r := gin.New()
//	r.Use(gin.Recovery(), auth)
//	api := r.Group("/api")
//	api.Use(ginidem.New(ginidem.Config{
//		Scope:  func(c *gin.Context) string { return c.GetString("account") },
//		Config: core.Config{Store: store}, // a pgxstore, gormstore or memstore (tests) Store
//	}))
//	api.POST("/orders", createOrder)
//
// Mount it on the engine, a group or a single route (r.POST("/orders", mw, h)); methods
// not in core.Config.Methods, and requests core.Config.Skip skips, pass through untouched.
//
// Scope is required: keys live per scope, so a multi-tenant API must return the caller's
// identity (set by your authentication middleware, which must therefore run first).
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
