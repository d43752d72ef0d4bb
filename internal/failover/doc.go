// Package failover holds idem's tests of SQL beyond one server, run over HTTP through
// core's net/http middleware on topologies the tests start from the machine's binaries
// (internal/pgtopo, internal/galeratopo):
//
//   - PostgreSQL: pgxstore and gormstore, atomic and phased, on a multi-host URL with
//     target_session_attrs=read-write, while the primary is SIGKILLed and its streaming
//     standby promoted, with synchronous and with asynchronous replication
//     (TestPostgresFailover).
//   - MariaDB Galera: gormstore, atomic and phased, with two application instances on two
//     different nodes of a three-node cluster, identical requests split between them,
//     with and without a node's SIGKILL, and on a node that lost quorum (TestGalera…).
//
// Every request is recorded as a call and a return and the history is checked with
// porcupine against the model of one key (internal/history): the first completion fixes
// the answer, a call that starts after a completion was returned gets it replayed, a key
// runs at most once, and nothing answers 500.
//
// The short runs are part of go test ./...; the long ones are behind environment
// variables:
//
//	IDEM_FAILOVER_TRIALS=20 go test -race -count=1 -timeout 60m -run TestPostgresFailover -v ./internal/failover/
//	IDEM_GALERA_TRIALS=20 go test -race -count=1 -timeout 60m -run TestGalera -v ./internal/failover/
//
// IDEM_FAILOVER_TRIALS: primary kills per replication mode (default 1); each logs its
// recovery time after the promotion and the acknowledged completions it lost, and the
// test logs the totals. IDEM_GALERA_TRIALS: rounds of parallel identical requests per
// mode (default 2), and node kills under load (default 1).
package failover
