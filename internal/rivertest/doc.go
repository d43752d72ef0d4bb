// Package rivertest proves, on a real PostgreSQL, that a River job enqueued in the
// transaction idem shares with a handler exists if and only if that transaction commits:
// with pgxstore (River's riverpgxv5 driver on the store's pgx.Tx) and with gormstore
// (River's riverdatabasesql driver on the *sql.Tx under GORM's transaction, from
// gormstore.SQLTx). It holds tests only; docs/phased-operations.md says what they prove.
//
// The application under test has a phased payments route whose finished phase writes the
// payment and enqueues its receipt, and an atomic orders route that writes the order and
// enqueues its confirmation in the request's transaction. Each enqueues two jobs: one
// whose args embed idemriver.Key (unique by the operation's derived key) and one of a kind
// with no uniqueness at all, so that a second insert would show as a second row instead of
// being skipped by River.
//
// Every test has a schema of its own, with River's tables migrated into it by rivermigrate.
// The kill trials re-execute the test binary as a child server (RIVERTEST_CHILD), SIGKILL it
// while it holds a boundary, and let a fresh server finish the operation:
//
//	go test -race ./internal/rivertest/
//	RIVERTEST_TRIALS=20 go test -race -run TestKill -v ./internal/rivertest/
package rivertest
