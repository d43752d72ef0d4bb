package pgxstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/keyrow"
)

// DB is what the store needs of the database: *pgxpool.Pool satisfies it (use that in
// production), and so do *pgx.Conn and pgx.Tx.
//
// With a *pgxpool.Pool an atomic claim sends BEGIN and the claim in one round trip and the
// completion and COMMIT in another. A *pgx.Conn is one connection: the store lets one
// transaction use it at a time, so one atomic request (or one phased request's final
// transaction) runs at a time and others wait for the connection, a claim up to its lock
// wait (then storage.ErrTransient) and other statements as long as their context allows,
// as for a pool's connection; that suits tests and command-line tools. With a pgx.Tx every claim
// is a savepoint in your transaction and commits only when you commit it; a twin in the
// same transaction is not held off, so use it for code that handles one request at a time.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var (
	_ DB = (*pgxpool.Pool)(nil)
	_ DB = (*pgx.Conn)(nil)
	_ DB = (pgx.Tx)(nil)
)

// Defaults of the options.
const (
	// DefaultTable is the table the store uses unless WithTable names another.
	DefaultTable = defaultTable
	// maxSettle bounds how often one claim re-reads a key that changed under it.
	maxSettle = 8
	// maxRetries bounds how often an atomic claim starts again after a serialization
	// failure (a twin committed after its snapshot) before returning storage.ErrTransient;
	// the lock wait bounds it in time. Each retry takes a new snapshot that sees the
	// twin's record, so more than a couple are needed only under heavy contention.
	maxRetries = 16
)

// Option configures a Store.
type Option func(*Store)

// WithTable sets the key table: WithTable("idem_keys") or, schema-qualified,
// WithTable("billing.idem_keys"). Each part is quoted as an identifier, so a name holds
// no dot of its own. Default: "idempotency_keys" (unqualified, so it follows the
// connection's search_path).
func WithTable(name string) Option {
	parts := strings.Split(name, ".")
	if len(parts) > 2 || slices.Contains(parts, "") {
		panic(fmt.Sprintf("pgxstore: WithTable(%q): want \"table\" or \"schema.table\"", name))
	}
	return func(s *Store) { s.table = pgx.Identifier(parts) }
}

// WithRetention sets how long a key is kept: an older key counts as absent to claims,
// and core.Sweeper deletes it. It is the one retention setting (the engine and the
// sweeper read it from the store). Default: storage.DefaultRetention (24h).
func WithRetention(d time.Duration) Option {
	if d <= 0 {
		panic(fmt.Sprintf("pgxstore: WithRetention(%v): the retention must be positive", d))
	}
	return func(s *Store) { s.retention = d }
}

// WithIsolation sets the isolation level of the store's transactions (the atomic claim
// and the handler's writes, phases, the phased final transaction). Default:
// pgx.ReadCommitted. Choose pgx.RepeatableRead or pgx.Serializable when the handler's
// writes need that level (or the database runs no other, as distributed PostgreSQL-like
// databases often do). Each level has one atomic claim:
//
//   - READ COMMITTED: the key's advisory lock and a lookup; Complete inserts the completed
//     key row before COMMIT, the request's one write to the key table (3 round trips for a
//     first request, 2 for a replay; 0.92 of the one-row floor in BENCHMARKS.md).
//   - REPEATABLE READ and SERIALIZABLE: the started key row first, as WithClaimRowFirst,
//     because a snapshot taken before the advisory lock is granted cannot see a twin that
//     committed meanwhile; twins wait on the row instead (3 round trips for a first
//     request, 3 for a replay, the key row written twice). A twin that waited for a
//     transaction that then committed gets a serialization failure: the store starts its
//     claim again, which then replays.
func WithIsolation(level pgx.TxIsoLevel) Option {
	switch level {
	case pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable:
	default:
		panic(fmt.Sprintf("pgxstore: WithIsolation: unsupported level %q", level))
	}
	return func(s *Store) { s.iso = level }
}

// WithLookupFirst makes atomic claims read the key outside a transaction first: a
// completed key is replayed with that one statement, and only an unknown key opens a
// transaction. Choose it where most requests are retries (a client that retries on every
// timeout, a queue consumer that redelivers): a replay takes 1 round trip instead of 2,
// and opens no transaction; every first request pays one round trip more, 4 instead of 3
// (TestStatementBudget). Default: off.
func WithLookupFirst() Option { return func(s *Store) { s.lookupFirst = true } }

// WithClaimRowFirst makes the atomic claim at READ COMMITTED write the started key row
// first (INSERT … ON CONFLICT DO NOTHING: a twin in flight waits on that row, up to the
// lock wait, then replays), and Complete update it to completed. Choose it only on an
// engine whose pg_advisory_xact_lock accepts the call and does not lock (some distributed
// PostgreSQL-like databases): there, without it, exactly once still holds (the primary
// key decides, and the twin that records second rolls back everything and answers with
// the winner's replay), but concurrent twins each run their handler. On PostgreSQL it is
// slower: the key row is written twice, a replay takes 3 round trips instead of 2, and
// BenchmarkFloor gave 0.85 of the one-row floor against the default's 0.92
// (BENCHMARKS.md). At REPEATABLE READ and SERIALIZABLE (WithIsolation) the claim writes
// the row first anyway. Default: off.
func WithClaimRowFirst() Option { return func(s *Store) { s.claimFirst = true } }

// Store keeps idempotency keys in PostgreSQL through pgx v5. It implements storage.Store in
// both modes. Create it with New; it is safe for concurrent use.
type Store struct {
	db          DB
	table       pgx.Identifier
	retention   time.Duration
	iso         pgx.TxIsoLevel
	lookupFirst bool
	claimFirst  bool
	q           queries
	cq          completerQueries
	lockSeed    keyrow.LockSeed // lockHash's state after the table name
	// sem serialises use of a DB that is one connection (*pgx.Conn, pgx.Tx); nil for a
	// pool.
	sem chan struct{}
}

var _ storage.Store = (*Store)(nil)

// New returns a Store on db. It panics if db is nil. Create the table with Migrate (or
// by hand from the DDL in schema.sql / the README).
func New(db DB, opts ...Option) *Store {
	if db == nil {
		panic("pgxstore: New needs a DB (a *pgxpool.Pool, *pgx.Conn or pgx.Tx)")
	}
	s := &Store{db: db, table: pgx.Identifier{defaultTable}, retention: storage.DefaultRetention, iso: pgx.ReadCommitted}
	for _, o := range opts {
		o(s)
	}
	if s.iso != pgx.ReadCommitted {
		// The one claim of REPEATABLE READ and SERIALIZABLE (see WithIsolation): a
		// snapshot is taken before the advisory lock is granted, so it cannot see a twin
		// that committed in between; the key row, written first, serialises twins.
		s.claimFirst = true
	}
	switch db.(type) {
	case *pgx.Conn, pgx.Tx:
		s.sem = make(chan struct{}, 1)
	}
	s.q = newQueries(s.table)
	s.cq = newCompleterQueries(s.table)
	s.lockSeed = keyrow.NewLockSeed(s.table.Sanitize())
	return s
}

// lockHash is the advisory lock key of (scope, key) in the store's table (keyrow's hash,
// the one gormstore computes for the same table). Two keys can share a hash: they then
// wait for each other needlessly, up to the lock wait; the primary key, not the lock,
// decides what is recorded. The lock shares the database's one-bigint advisory lock space
// with the application's own advisory locks.
func (s *Store) lockHash(scope, key string) int64 { return s.lockSeed.Hash(scope, key) }

// Schema returns the DDL of the store's table (schema.sql with the configured table name),
// for migration tools that keep their own files.
func (s *Store) Schema() string { return s.q.schema }

// Migrate creates the table and its index if they do not exist. It is idempotent, safe
// to run from several instances at once (it holds an advisory lock), and leaves a table
// made by hand from the same DDL untouched.
func (s *Store) Migrate(ctx context.Context) error {
	if _, err := s.exec(ctx, nil, s.q.migrate); err != nil {
		return fmt.Errorf("pgxstore: migrate %s: %w", s.table.Sanitize(), err)
	}
	return nil
}

// Retention reports how long keys are kept (WithRetention).
func (s *Store) Retention() time.Duration { return s.retention }

// SupportsAtomic reports true: the store shares its transaction with the handler.
func (s *Store) SupportsAtomic() bool { return true }

// DeleteExpired deletes at most limit keys created before before, oldest first, and never
// one whose lease is live or that another transaction holds (SKIP LOCKED). One statement,
// by primary key, so it runs on databases without a stable ctid too (Citus, CockroachDB,
// YugabyteDB).
func (s *Store) DeleteExpired(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	ct, err := s.exec(ctx, nil, s.q.sweep, before, limit)
	if err != nil {
		return 0, classify(ctx, "delete expired keys", err, false)
	}
	return int(ct.RowsAffected()), nil
}

// Claim claims c.Key in c.Scope, or reports the record that holds it; see storage.Store.
// A zero c.Retention keeps keys for ever; the engine sets it, and a positive c.Lease and
// c.LockWait.
func (s *Store) Claim(ctx context.Context, c storage.Claim) (storage.Claimed, error) {
	switch c.Mode {
	case storage.ModeAtomic:
		return s.claimAtomic(ctx, c)
	case storage.ModePhased:
		return s.claimPhased(ctx, c)
	default:
		return storage.Claimed{}, fmt.Errorf("pgxstore: mode %v: %w", c.Mode, storage.ErrUnsupportedMode)
	}
}

// claimArgs are the arguments of the claim and insert statements.
func claimArgs(c storage.Claim, tok keyrow.Token, wait time.Duration) []any {
	ms := max(wait.Milliseconds(), 1)
	return []any{c.Scope, c.Key, c.Fingerprint, c.Method, c.Path, tok,
		c.Lease.Microseconds(), strconv.FormatInt(ms, 10)}
}

// hold takes the connection of a single-connection DB, waiting as long as ctx allows and,
// for a claim, at most its lock wait (wait; then storage.ErrTransient: another request,
// maybe with another key, is using it). For a pool it does nothing.
func (s *Store) hold(ctx context.Context, wait time.Duration) (release func(), err error) {
	if s.sem == nil {
		return func() {}, nil
	}
	var waited <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		waited = t.C
	}
	select {
	case s.sem <- struct{}{}:
		return s.unhold, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-waited:
		return nil, fmt.Errorf("pgxstore: the store's single connection stayed busy for %v: %w", wait, storage.ErrTransient)
	}
}

func (s *Store) unhold() { <-s.sem }

// exec runs one statement, in tx or (tx nil) on its own.
func (s *Store) exec(ctx context.Context, tx pgx.Tx, sql string, args ...any) (pgconn.CommandTag, error) {
	if tx != nil {
		return tx.Exec(ctx, sql, args...)
	}
	release, err := s.hold(ctx, 0)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer release()
	return s.db.Exec(ctx, sql, args...)
}

// scan runs a one-row query, in tx or (tx nil) on its own, and scans it into dest.
func (s *Store) scan(ctx context.Context, tx pgx.Tx, wait time.Duration, sql string, args []any, dest ...any) error {
	if tx != nil {
		return tx.QueryRow(ctx, sql, args...).Scan(dest...)
	}
	release, err := s.hold(ctx, wait)
	if err != nil {
		return err
	}
	defer release()
	return s.db.QueryRow(ctx, sql, args...).Scan(dest...)
}

// beginner is the BeginTx of *pgxpool.Pool and *pgx.Conn.
type beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// begin opens a transaction at the store's isolation level (a savepoint when the DB is a
// pgx.Tx). On a single-connection DB the transaction holds the connection until it ends.
func (s *Store) begin(ctx context.Context, wait time.Duration) (pgx.Tx, error) {
	release, err := s.hold(ctx, wait)
	if err != nil {
		return nil, err
	}
	var tx pgx.Tx
	if b, ok := s.db.(beginner); ok {
		tx, err = b.BeginTx(ctx, pgx.TxOptions{IsoLevel: s.iso})
	} else {
		tx, err = s.db.Begin(ctx)
	}
	if err != nil {
		release()
		return nil, err
	}
	if s.sem == nil {
		return tx, nil
	}
	return &heldTx{Tx: tx, release: release}, nil
}

// heldTx gives the single connection back when its transaction ends.
type heldTx struct {
	pgx.Tx
	release func()
	done    bool
}

func (t *heldTx) Commit(ctx context.Context) error {
	err := t.Tx.Commit(ctx)
	t.end()
	return err
}

func (t *heldTx) Rollback(ctx context.Context) error {
	err := t.Tx.Rollback(ctx)
	t.end()
	return err
}

func (t *heldTx) end() {
	if !t.done {
		t.done = true
		t.release()
	}
}

// acquirer is the Acquire of *pgxpool.Pool.
type acquirer interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
}

// held is a pool's connection a transaction has to itself. The zero held is none.
type held struct {
	conn   *pgx.Conn
	pooled *pgxpool.Conn // conn's, from the pool
}

// giveBack returns the connection to its pool, once.
func (h *held) giveBack() {
	if h.pooled != nil {
		h.pooled.Release()
	}
	*h = held{}
}

// dedicated returns a connection of the pool's that the caller has to itself until it
// gives it back; ok is false when the DB is not a pool (a *pgx.Conn, a pgx.Tx), and the
// caller goes through begin. (On one *pgx.Conn, a tool's or a test's, BEGIN then costs a
// round trip of its own.)
func (s *Store) dedicated(ctx context.Context) (h held, ok bool, err error) {
	db, ok := s.db.(acquirer)
	if !ok {
		return held{}, false, nil
	}
	pc, err := db.Acquire(ctx)
	if err != nil {
		return held{}, true, err
	}
	return held{conn: pc.Conn(), pooled: pc}, true, nil
}
