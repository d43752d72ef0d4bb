// Package e2e holds the end-to-end tests of the example servers: its TestMain builds
// examples/gin-orders and examples/echo-orders once (with -race when the tests run with
// it), and the tests start them as processes on free loopback ports, against a fresh
// SQLite file, a fresh PostgreSQL schema with each store (pgx, gorm) and a fresh MariaDB
// database (gorm), and drive them over real HTTP as any client would, per the contract
// in examples/README.md.
//
//	go test -race -count=1 ./examples/e2e
//
// PostgreSQL and MariaDB must be reachable (TEST_DATABASE_URL and TEST_MYSQL_DSN, default
// the local servers); the tests fail, never skip, when they are not.
package e2e
