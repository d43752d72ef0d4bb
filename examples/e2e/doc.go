// Package e2e holds the end-to-end tests of the example servers: its TestMain builds
// examples/gin-orders and examples/echo-orders once (with -race when the tests run with
// it), and the tests start them as processes on free loopback ports, against a fresh
// SQLite file and a fresh PostgreSQL schema with each store (pgx, gorm), and drive them
// over real HTTP as any client would, per examples-contract.md.
//
//	go test -race -count=1 ./examples/e2e
//
// PostgreSQL must be reachable (TEST_DATABASE_URL, default the local server); the tests
// fail, never skip, when it is not.
package e2e
