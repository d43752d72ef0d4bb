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
// retries. Default: off on PostgreSQL and MySQL/MariaDB (an atomic replay costs BEGIN,
// the lock wait setting, the claim, a SELECT … FOR UPDATE, its restore and ROLLBACK); on
// SQLite always on, since there every claim transaction queues for the one write lock.
func WithLookupFirst() Option {
	return func(s *Store) { s.lookupFirst = true }
}

// WithSingleWrite makes an atomic claim on PostgreSQL write nothing: it takes the key's
// transaction-scoped advisory lock (a twin in flight holds it, so a twin waits, up to the
// lock wait, then replays) and looks the key up; Complete inserts the completed row with
// the response just before COMMIT, the request's one write to the key table. The primary
// key stays the final arbiter: where the lock does not serialise, the twin's INSERT
// fails, its transaction rolls back with its business writes, and Complete returns an
// error wrapping storage.ErrTransient (503; the retry replays). It runs the store's
// transactions at READ COMMITTED unless WithIsolation names a level; at REPEATABLE READ
// or SERIALIZABLE the claim keeps writing the key row first, because a snapshot taken
// before the lock is granted cannot see a twin that committed in between.
// MySQL/MariaDB and SQLite ignore it: their claim is the key row's INSERT. Default: off.
func WithSingleWrite() Option {
	return func(s *Store) { s.singleWrite = true }
}
