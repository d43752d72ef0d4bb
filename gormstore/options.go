package gormstore

import (
	"database/sql"
	"time"
)

// Option configures a Store.
type Option func(*Store)

// WithTable names the key table. A schema-qualified name ("idem.keys") is allowed where
// the database has schemas. Default: DefaultTable ("idempotency_keys").
func WithTable(name string) Option {
	return func(s *Store) { s.table = name }
}

// WithRetention sets how long a key is kept: an older key counts as absent to claims,
// and core.Sweeper deletes it. It is the one retention setting (the engine and the
// sweeper read it from the store). Default: storage.DefaultRetention (24h).
func WithRetention(d time.Duration) Option {
	return func(s *Store) { s.retention = d }
}

// WithIsolation sets the isolation level of the transactions the store opens on
// PostgreSQL and MySQL/MariaDB (the claim's, which the handler shares in atomic mode,
// and the phases'). Choose a level above READ COMMITTED when the handler's writes need it.
// On PostgreSQL each level has one atomic claim: at READ COMMITTED the key's advisory lock
// and a lookup, the completed row inserted before COMMIT (6 statements for a first request,
// 3 for a replay); at REPEATABLE READ or SERIALIZABLE the started key row first, as
// WithClaimRowFirst, because a snapshot taken before the lock is granted cannot see a twin
// that committed meanwhile (6 and 5 statements, the key row written twice). At the
// server's default level (no WithIsolation) the claim asks the transaction its level and
// takes the matching path. At REPEATABLE READ or SERIALIZABLE a twin may hit a
// serialization failure: the store retries the claim a few times, then returns
// storage.ErrTransient. SQLite ignores it: its write transactions are serializable.
// Default: sql.LevelDefault, the database's own default.
func WithIsolation(level sql.IsolationLevel) Option {
	return func(s *Store) { s.iso = level }
}

// WithLookupFirst makes atomic claims read the key outside a transaction first, as
// phased claims always do: a completed key is then replayed with that one statement, and
// only an unknown key opens a transaction. Choose it where most requests are retries (a
// client that retries on every timeout, a redelivering queue consumer): on PostgreSQL a
// replay takes 1 statement instead of 3 (BEGIN, the claim, ROLLBACK), and every first
// request one more, 7 instead of 6 (TestStatementBudget; BenchmarkAtomic gave first
// requests 0.65 of the one-row floor against the default's 0.76, BENCHMARKS.md). On
// MySQL/MariaDB an atomic replay otherwise costs BEGIN, the lock wait setting, the claim,
// a SELECT … FOR UPDATE, its restore and ROLLBACK. Default: off on PostgreSQL and
// MySQL/MariaDB; on SQLite always on, since there every claim transaction queues for the
// one write lock.
func WithLookupFirst() Option {
	return func(s *Store) { s.lookupFirst = true }
}

// WithClaimRowFirst makes an atomic claim on PostgreSQL at READ COMMITTED write the
// started key row first (INSERT … ON CONFLICT DO NOTHING, then SELECT … FOR UPDATE on a
// conflict: a twin in flight waits on that row, up to the lock wait, then replays), and
// Complete update it to completed. Choose it only on an engine whose
// pg_advisory_xact_lock accepts the call and does not lock (some distributed
// PostgreSQL-like databases): there, without it, exactly once still holds (the primary key
// decides; the twin that records second rolls back everything and answers with the
// winner's replay), but concurrent twins each run their handler. On PostgreSQL it is
// slower: the key row is written twice, a replay takes 5 statements instead of 3, and
// BenchmarkAtomic gave 0.62 of the one-row floor against the default's 0.76
// (BENCHMARKS.md). At REPEATABLE READ or SERIALIZABLE the claim writes the row first
// anyway; MySQL/MariaDB and SQLite always claim with the key row's INSERT. Default: off.
func WithClaimRowFirst() Option {
	return func(s *Store) { s.rowFirst = true }
}
