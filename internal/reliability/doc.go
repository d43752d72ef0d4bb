// Package reliability holds idem's fault-injection, crash, timeout, outage, multi-instance,
// sweeper and security tests, run over HTTP through core's net/http middleware on real
// databases: pgxstore on PostgreSQL; gormstore on PostgreSQL, MariaDB and SQLite; and
// redisstore on a private redis-server. The package's only code is the loopback TCP Proxy
// the tests put between a store and its database to break the network on command: cut
// every connection, refuse new ones, stall and resume, or cut at a moment of a command on
// the wire (PostgreSQL's or MySQL's protocol): before COMMIT reaches the server, before its
// answer reaches the client, just after, or at the first statement naming a key.
//
// The tests need PostgreSQL (TEST_DATABASE_URL, default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable), MariaDB or MySQL
// (TEST_MYSQL_DSN, default root@tcp(127.0.0.1:3306)/test) and the redis-server binary on
// PATH (each Redis test starts its own, on a free port, without persistence). A test
// whose service is missing fails, saying how to start it. Run them with:
//
//	go test -race ./internal/reliability/
//
// The long runs, behind environment variables:
//
//	IDEM_FAULT_TRIALS=1000 go test -race -run 'TestFaultTrials|TestGormFaultTrials' -v -timeout 60m ./internal/reliability/
//	IDEM_SQLITE_KILL_TRIALS=1000 go test -race -run TestSQLiteKillTrials -v -timeout 60m ./internal/reliability/
//	IDEM_SWEEP_KEYS=100000 go test -race -run TestSweeperUnderLoad -v -timeout 60m ./internal/reliability/
//	go test -run '^$' -fuzz '^FuzzFingerprintJSON$' -fuzztime 3m ./internal/reliability/
//
// The settings:
//
//   - IDEM_FAULT_TRIALS: network-cut trials per store × database × atomic claim
//     (TestFaultTrials: pgxstore × PostgreSQL, the default single write and
//     WithClaimRowFirst; TestGormFaultTrials: gormstore × PostgreSQL, the same two, and ×
//     MariaDB). Default 100; at least one per moment (seven). One subtest alone, say:
//     -run 'TestFaultTrials/single_write' or 'TestGormFaultTrials/PostgreSQL_single_write'.
//   - IDEM_SQLITE_KILL_TRIALS: process-kill trials of gormstore × SQLite (the test binary
//     re-executed as the application, killed by os.Exit or SIGKILL). Default 100, as for
//     the network cuts; at least 14, each moment once by each way.
//   - IDEM_SWEEP_KEYS: expired keys the sweeper deletes under live load on each database
//     (TestSweeperUnderLoad); a tenth as many in-retention keys must stay. Default 10000.
//   - IDEM_SWEEP_BATCH: the sweeper's BatchSize there. Default 1000.
//   - IDEM_FLOOD_KEYS: the size of the one-scope key flood (TestKeyFloodFromOneScope).
//     Default 10000.
//
// The trials log one summary line per store × database × claim: attempted / acknowledged /
// duplicated / lost, and per moment how many trials exercised it (the first request sent
// the claim's and, for a cut at or after it, the completion's statements of the form under
// test: a pgx tracer or a GORM logger names them; every trial must), what the first
// request got and whether the retry replayed or ran the handler again. TestSweeperUnderLoad logs the p99 latency of the
// load's requests without and during the sweep; it asserts only correctness.
package reliability
