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
// and the phases'). At REPEATABLE READ or SERIALIZABLE a twin may hit a serialization
// failure: the store retries the claim a few times, then returns storage.ErrTransient.
// SQLite ignores it: its write transactions are serializable. Default:
// sql.LevelDefault, the database's own default.
func WithIsolation(level sql.IsolationLevel) Option {
	return func(s *Store) { s.iso = level }
}

// WithLookupFirst makes atomic claims read the key outside a transaction first, as
// phased claims always do: a completed key is then replayed with that one statement, and
// only an unknown key opens a transaction (on SQLite, only those take the write lock). It
// costs every first request one more statement, so it pays off where most requests are
// retries. Default: off on PostgreSQL (at READ COMMITTED an atomic replay costs BEGIN, the
// claim statement and ROLLBACK) and MySQL/MariaDB (BEGIN, the lock wait setting, the
// claim, a SELECT … FOR UPDATE, its restore and ROLLBACK); on SQLite always on, since
// there every claim transaction queues for the one write lock.
func WithLookupFirst() Option {
	return func(s *Store) { s.lookupFirst = true }
}

// WithClaimRowFirst makes an atomic claim on PostgreSQL write the started key row first
// (INSERT … ON CONFLICT DO NOTHING, then SELECT … FOR UPDATE on a conflict: a twin in
// flight waits on that row, up to the lock wait, then replays), and Complete update it to
// completed: the key row is written twice. Use it where the key's advisory lock does not
// serialise twins at READ COMMITTED (an engine that accepts pg_advisory_xact_lock and does
// not lock, as some distributed PostgreSQL-like databases do): there, without it, a twin
// runs its handler too and then fails on the key's INSERT (rolled back; it answers with
// the winner's replay). At REPEATABLE READ or SERIALIZABLE the claim writes the row first anyway.
// MySQL/MariaDB and SQLite always claim with the key row's INSERT. Default: off on
// PostgreSQL at READ COMMITTED: the claim takes the key's transaction-scoped advisory lock
// and looks the key up, and Complete inserts the completed row just before COMMIT, the
// request's one write to the key table (see the package documentation).
func WithClaimRowFirst() Option {
	return func(s *Store) { s.rowFirst = true }
}
