// Package echoidem makes unsafe Echo v4 routes (POST, PATCH) safe to retry with an
// Idempotency-Key: the handler runs once per key, and every retry gets the same answer.
//
// It is a thin adapter: the decisions (key parsing, fingerprint, claim, replay, 409, 422,
// release) are core.Engine's. The middleware hands the engine the request and a function
// that runs the rest of the Echo chain; while that chain runs, c.Response() is a fresh
// echo.Response holding the response in memory, and c.Request() carries the operation
// and the store's transaction, so core.OperationFrom(c.Request().Context()),
// pgxstore.Tx and gormstore.DB reach them. Nothing reaches the client until the engine
// has recorded (and, in atomic mode, committed) the outcome.
//
//	e := echo.New()
//	e.Use(middleware.Recover(), auth)
//	api := e.Group("/api", echoidem.NewWithConfig(echoidem.Config{
//		Scope:  func(c echo.Context) string { return c.Get("account").(string) },
//		Config: core.Config{Store: store}, // a pgxstore, gormstore or memstore (tests) Store
//	}))
//	api.POST("/orders", createOrder)
//
// echoidem.New(store) is the short form for a single-tenant API: it puts every caller in
// one scope, so the same key sent by two clients is one operation. A multi-tenant API
// must set Scope (your authentication middleware must then run first).
//
// Mount it with e.Use, on a group or on a single route (e.POST("/orders", h, mw));
// Skipper, core.Config.Methods and core.Config.Skip let requests through untouched.
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
