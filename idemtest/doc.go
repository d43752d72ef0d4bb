// Package idemtest checks that an API's own routes keep idem's promises: it runs the
// verification list against an http.Handler in a test, or against a deployed URL (the
// `idem check` command), and says for each check what it expected and what came back.
//
// In a test, three lines:
//
//	idemtest.Check(t, idemtest.Target{Handler: router, Path: "/v1/orders",
//		Header:      http.Header{"Authorization": {"Bearer test"}},
//		Body:        func(int) []byte { return []byte(`{"item":"book","quantity":2}`) },
//		SideEffects: func() int { return countRows(t, "orders") }})
//
// The checks, in order (Result.Name):
//
//   - missing-key: a request without a key is a 400 problem (key-missing); nothing runs.
//   - malformed-keys: an empty key, 256 characters, a control character, non-ASCII, a
//     bare key with a comma, and two Idempotency-Key fields are each a 400 problem
//     (key-invalid) and nothing runs; the key that was sent twice, sent once, runs fresh.
//   - first-fresh: a new key runs the operation: 2xx without Idempotent-Replayed.
//   - replay: the same key and body get the first answer again, status, body (byte for
//     byte), Location and Content-Type, with Idempotent-Replayed: true; nothing runs.
//   - changed-body: the same key with another body is a 422 problem (key-reused).
//   - parallel: Target.Parallel requests with one key at once run the operation once;
//     the others are replays or 409 problems (in-progress) with Retry-After; a retry
//     afterwards replays.
//   - failure-retry (with Target.InjectFailure): a 5xx is not stored, so the retry with
//     the same key runs the operation again, and the next one replays that.
//   - get-untouched (with Target.GetPath): GET answers with a key as without one.
//
// With Target.SideEffects every check also counts the side effect: one per operation,
// none for a rejected request or a replay. Without it only the answers are checked, which
// cannot tell a replay computed by running the handler twice from a real one.
//
// Every run uses fresh random keys, sends about 30 requests plus Target.Parallel, and is
// bounded by Target.Timeout and each request by Target.RequestTimeout. Run returns the
// Report (the CLI prints it as text or JSON); Check reports failures through testing.TB
// and logs the whole report, so `go test -v` shows it when every check passes.
//
// # Audit: which unsafe routes are guarded
//
// Check verifies one route; Audit finds the routes to verify. Given the app's route
// table (RoutesOf adapts gin.Engine.Routes and echo.Echo.Routes in one line), it sends
// each unsafe route (POST, PUT, PATCH, DELETE; path parameters filled with a
// placeholder) one request without a key and fails the test for each that is neither
// guarded by idem (400 key-missing) nor on the allow-list:
//
//	idemtest.Audit(t, idemtest.AuditTarget{Handler: r, Routes: idemtest.RoutesOf(r.Routes()),
//		Header: http.Header{"Authorization": {"Bearer test"}}, Allow: []string{"POST /login"}})
//
// An unguarded route's handler runs with that request, so audit a test instance. The
// audit sees only what reaches idem: a route whose chain refuses the request before idem
// runs (authentication, a validator) is reported with what it answered; RunAudit says more.
package idemtest
