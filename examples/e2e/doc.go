// Package e2e holds the end-to-end tests of the example servers: its TestMain builds
// examples/gin-orders and examples/echo-orders once (with -race when the tests run with
// it), and the tests start them as processes on free loopback ports, against a fresh
// SQLite file, a fresh PostgreSQL schema with each store (pgx, gorm) and a fresh MariaDB
// database (gorm), and again on SQLite, PostgreSQL and MariaDB with -store redis (the
// payments' keys in Redis, under a key prefix of the test's own), and drive them over
// real HTTP as any client would, per the contract in examples/README.md.
//
//	go test -race -count=1 ./examples/e2e
//
// TestKillUnderLoad SIGKILLs each server under a mixed load of orders and payments,
// restarts it on the same database and re-sends every key: every answer seen before the
// kill must come back byte for byte, and every key must end with exactly one order, or
// one payment with one provider charge. IDEM_KILL_TRIALS sets the kills per server and
// database (default 1); IDEM_KILL_SEED the first seed, which each run logs:
//
//	IDEM_KILL_TRIALS=20 go test -count=1 -timeout 40m -run TestKillUnderLoad -v ./examples/e2e
//
// TestClientThroughFaults sends orders and payments at once through idemclient.Transport
// and internal/httpfault's proxy, which resets connections, drops answers the server sent
// and delays requests: every logical request must end with a 201, one order or one
// payment (with one charge) each, and the replay wherever the first answer was dropped.
//
// PostgreSQL, MariaDB and Redis must be reachable (TEST_DATABASE_URL, TEST_MYSQL_DSN and
// TEST_REDIS_ADDR, default the local servers); the tests fail, never skip, when they are
// not.
package e2e
