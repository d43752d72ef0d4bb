// Package phasedtest proves idem's phased operations end to end, over HTTP, on real
// databases: pgxstore on PostgreSQL, and gormstore on PostgreSQL and SQLite. It holds
// tests only (see docs/phased-operations.md for what they prove and how to read them).
//
// The application under test is a payment API whose handler runs two phases:
// charge_created calls a payment provider stub with the derived key <key>:charge (the
// provider keeps its charges in a table of its own, keyed by account and idempotency key,
// written in its own transaction on its own connection) and records the charge id in the
// phase's transaction; finished writes the payment row. The response is recorded with the
// request's final transaction. An orders route on the same router keeps the atomic
// default, to show that a route opts in to phased mode by mounting its own middleware.
//
// The crash tests re-execute the test binary as a child HTTP server (the environment
// variable PHASEDTEST_CHILD makes TestMain serve instead of running tests) that exits with
// status 3 right after a given phase commits; a fresh child then serves the retry.
//
// Run them with:
//
//	go test -race ./internal/phasedtest/
//	PHASEDTEST_TRIALS=20 go test -race -run TestCrashRecovery -v ./internal/phasedtest/
package phasedtest
