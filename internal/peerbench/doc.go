// Package peerbench puts idem's in-memory hot path and gofiber's idempotency middleware
// (github.com/gofiber/fiber/v2/middleware/idempotency, in memory) on the same workload in
// one go test -bench run, so the ratio between them is measured, not remembered. It is a
// module of its own (its go.mod replaces idem with ../..), so that the library's go.mod
// names no fiber or fasthttp. From the repository's root:
//
//	cd internal/peerbench && go test -run '^$' -bench . -benchmem -count 6 -benchtime 20000x
//
// (A fixed -benchtime gives every stack's first the same number of live keys; with an
// automatic b.N each store grows to a different size.)
//
// The workload: one goroutine, POST /v1/orders with a ~230-byte nested JSON body,
// answered 201 with a Location header and a ~180-byte JSON body. For each stack the
// benchmark runs the route bare (no middleware), a first request (a new key every
// iteration) and a replay (one key). first − bare and replay − bare are each
// middleware's own cost. fiber does no fingerprinting at all; idem canonicalises JSON
// (RFC 8785) and hashes method, path, query and body. Test support only: nothing here
// is imported by the library, and `go test ./...` at the root does not reach it.
package peerbench
