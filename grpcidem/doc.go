// Package grpcidem makes unary gRPC calls safe to retry, with the engine and store the
// application's HTTP routes use: a server interceptor runs each keyed call at most once
// per idempotency key and scope, answering a repeat with the first outcome, and a client
// interceptor gives each logical call one key and retries it.
//
// On the server, one engine serves HTTP and gRPC:
//
//	eng, err := core.New(core.Config{Store: pgxstore.New(pool)})
//	...
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
//		auth,                      // sets the caller in the context
//		grpcidem.UnaryServerInterceptor(eng, grpcidem.Config{
//			Scope:   func(ctx context.Context) string { return accountFrom(ctx) },
//			Methods: []string{"/shop.v1.Orders/CreateOrder"},
//		}),
//	))
//
// The key is the "idempotency-key" metadata (Config.Metadata), or a string field of the
// request message (Config.Field: AIP-155's "request_id"): the value as sent, 1–255
// characters of printable ASCII, one value, no comma. The fingerprint is the full method name
// and the request's deterministic protobuf encoding: a repeat whose message differs in
// any field is refused, whatever the field order on the wire.
//
// The handler runs through core.Engine.Do, so it gets what an HTTP handler gets: in
// atomic mode (pgxstore, gormstore) the store's transaction in its context
// (pgxstore.MustTx(ctx), gormstore.MustDB(ctx)), which commits together with the recorded
// outcome or not at all; in phased mode core.MustOperation(ctx) for phases and derived
// keys.
//
// The answers, in gRPC's terms (each status of idem's own carries a google.rpc.ErrorInfo
// with ErrorDomain and a reason, Reason of the problem kind):
//
//   - The first call: the handler's answer. A final status (FinalCode: OK,
//     INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED, UNAUTHENTICATED,
//     FAILED_PRECONDITION, OUT_OF_RANGE) is recorded with the response message and the
//     header and trailer metadata Config.ReplayHeader and ReplayTrailer name. Any other
//     code, a panic or a cancelled call releases the key (atomic mode rolls the
//     handler's writes back), so a retry runs again.
//   - A repeat of a recorded call: the recorded response message or status, with the
//     named metadata and "idempotent-replayed: true" in the header metadata.
//   - A repeat while the first is running: ABORTED, reason IN_PROGRESS, with a
//     google.rpc.RetryInfo (core.Config.RetryAfter).
//   - The key reused with another method or message: FAILED_PRECONDITION, reason
//     KEY_REUSED.
//   - No key, or a malformed one: INVALID_ARGUMENT, reason KEY_MISSING or KEY_INVALID
//     (with core.Config.KeyOptional, a call without a key runs unprotected instead).
//   - The store failed: UNAVAILABLE with a RetryInfo, reason STORE_UNAVAILABLE (the
//     method did not run), COLLISION or NOT_RECORDED (it ran and nothing was kept).
//   - A recorded outcome over core.Config.MaxResponseBody: the first call gets it whole,
//     repeats FAILED_PRECONDITION, reason RESPONSE_TOO_LARGE; it never runs again.
//   - The server's own mistakes (an empty scope, a Field the request lacks):
//     INTERNAL, reason MISCONFIGURED.
//
// On the client, UnaryClientInterceptor sends the key before the first attempt, so that
// gRPC's own retries (a service config retryPolicy) resend it, and retries UNAVAILABLE
// and ABORTED itself, honouring RetryInfo:
//
//	conn, err := grpc.NewClient(addr, grpc.WithUnaryInterceptor(
//		grpcidem.UnaryClientInterceptor(grpcidem.ClientConfig{})))
//	...
//	resp, err := orders.CreateOrder(ctx, req, grpcidem.Key(job.ID))
//
// See docs/grpc.md for the full policy of a gRPC method and the recorded format.
package grpcidem
