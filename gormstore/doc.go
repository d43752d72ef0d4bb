// Package gormstore is an idem key store (storage.Store) on a GORM database: PostgreSQL
// (gorm.io/driver/postgres), MySQL or MariaDB with InnoDB (gorm.io/driver/mysql) and
// SQLite (github.com/glebarez/sqlite, pure Go, no cgo). The handler's business writes go
// through the same transaction as the key, so they commit together with the recorded
// response or not at all.
//
//	db, err := gorm.Open(postgres.Open(os.Getenv("DATABASE_URL")), &gorm.Config{})
//	// …
//	store := gormstore.New(db)            // WithTable, WithRetention, WithIsolation, WithLookupFirst
//	if err := store.Migrate(ctx); err != nil { … } // explicit (see Table); New never touches the database
//
//	eng, err := core.New(core.Config{Store: store})
//	// …
//	mux.Handle("POST /orders", eng.Middleware(accountID)(http.HandlerFunc(createOrder)))
//
//	func createOrder(w http.ResponseWriter, r *http.Request) {
//		order := Order{Amount: 42}
//		if err := gormstore.MustDB(r.Context()).Create(&order).Error; err != nil {
//			http.Error(w, "could not create the order", http.StatusInternalServerError) // 5xx: rolled back, key released
//			return
//		}
//		w.Header().Set("Location", fmt.Sprintf("/orders/%d", order.ID))
//		w.WriteHeader(http.StatusCreated) // recorded and committed with the order, then sent
//	}
//
// # The handler's transaction
//
// MustDB(ctx) returns the request's *gorm.DB, bound to its transaction and to ctx. It panics
// when ctx carries none (the route is not behind the middleware, or had no key): writing
// outside the transaction would silently lose the guarantee, so there is no fallback to
// the plain database. DBFromContext reports false instead. WithTx puts a transaction
// the caller already has into a context, so the same code runs in a background job or a
// test; the store's claims still open their own transactions.
//
// In atomic mode (the engine's default for this store) the transaction is the claim's:
// one transaction per keyed request, on one connection. On MySQL/MariaDB and SQLite (and
// on PostgreSQL above READ COMMITTED, or WithClaimRowFirst) its first write is the claim,
// and the completion UPDATE and COMMIT happen before the response is sent; on PostgreSQL
// at READ COMMITTED the claim writes nothing, and the completion INSERTs the key row once
// (see PostgreSQL below). A 5xx, a panic or a
// cancelled request rolls everything back: no key, no business row. The transaction is
// bound to the request's context; core.Operation.Phase runs its function inside it.
//
// In phased mode the claim commits at once with a lease and a random fencing token. Each
// phase (core.Operation.Phase) runs in its own transaction, opened when its function first
// calls DB and committed together with the new recovery point and a renewed lease, fenced
// by the token: after a takeover the stale worker's phase, completion and release change
// nothing and fail with storage.ErrLeaseLost. Outside phases, DB opens the request's final
// transaction on first use and Complete commits it with the response. Phases come first:
// once the final transaction is open, a phase is refused with storage.ErrFinalTxOpen (its
// function does not run), so a request never holds two connections and never commits its
// final writes with a phase. Phases do not nest. While the handler runs, the engine renews
// the lease (Lock.Renew: an UPDATE on a connection of its own; on SQLite it waits for the
// write lock that an open phase or final transaction holds).
//
// In either mode the handler cannot end the request's transaction: Commit and Rollback
// on what MustDB returns fail with ErrTxOwned and send nothing (MustDB(ctx).Transaction nests
// with savepoints, as GORM does in a transaction). In atomic mode a phase's function runs
// under a savepoint: if it fails, its writes are rolled back and the request's earlier
// ones stay.
//
// Complete and Release are bounded by the deadline the engine puts in their context (core.Config.StoreTimeout),
// their COMMIT or ROLLBACK included: database/sql runs those without a context, so the
// store waits for them at most that long, then returns an error and lets the call finish
// (or the connection break) in the background.
//
// # PostgreSQL
//
// At READ COMMITTED (the server's default level, or WithIsolation(sql.LevelReadCommitted))
// the atomic claim writes nothing: one statement reads the key's row and, unless a row
// holds the key or the transaction is at another level, takes the key's
// transaction-scoped advisory lock (pg_try_advisory_xact_lock on a 64-bit hash of table,
// scope and key, the number pgxstore uses); holding it, a lookup looks again, since that
// statement's snapshot predates the lock. Complete INSERTs the completed row with the
// response just before COMMIT, the request's one write to the key table. A twin in
// flight holds the lock: a twin waits for it inside the same statement
// (pg_advisory_xact_lock, bounded by lock_timeout; expiry 409), then looks again and
// replays. A row that holds the key is reported from the claim statement's
// read (a replay writes nothing), or replaced or taken over as below. The primary key is
// the final arbiter: where advisory locks do not lock (some distributed engines accept
// the call and do nothing), a twin runs its handler too and its INSERT fails on the key:
// its transaction rolls back with its writes, Complete returns storage.ErrRecordedFirst,
// and the engine answers it with the winner's replay (or 422 for a different request).
// WithClaimRowFirst makes twins wait on the key row instead, so the handler runs once.
//
// Otherwise (WithClaimRowFirst, REPEATABLE READ, SERIALIZABLE, phased mode) the claim is
// INSERT … ON CONFLICT DO NOTHING (clause.OnConflict), then SELECT … FOR UPDATE on a
// conflict. A twin in flight makes the INSERT wait, bounded by lock_timeout; its expiry
// (55P03, or 57014 from a statement_timeout) is storage.ErrInProgress: 409.
//
// Either way the claim sets lock_timeout to the lock wait (core.Config.LockWait) with
// set_config('lock_timeout', …, true), that is SET LOCAL: in atomic mode lock_timeout is
// set for the transaction (so the handler's own statements run under it too; SET LOCAL
// lock_timeout again if they need longer), as in pgxstore. A handler's statement that
// waits longer for a row another transaction holds fails with 55P03 (the store does not
// see it: the handler answers it, a 503 + Retry-After say, and a 5xx rolls everything
// back, nothing recorded). In phased mode the claim's transaction commits
// before the handler runs, and phases and the final transaction keep the connection's
// own lock_timeout.
//
// Serialization failures and deadlocks (40001, 40P01) are storage.ErrTransient: 503. At
// REPEATABLE READ (WithIsolation) a twin that waited for a transaction that committed
// gets one; the store retries the claim (nothing of the request has run yet), and it
// replays. Times come from the database clock (statement_timestamp()).
//
// The store works on a table made by hand from pgxstore's schema.sql (lease_token is a
// uuid in both), and Migrate leaves such a table as it is.
//
// # MySQL and MariaDB
//
// InnoDB is required (Migrate creates the table with ENGINE=InnoDB). The claim is
// INSERT … ON DUPLICATE KEY UPDATE (clause.OnConflict{DoNothing: true}): on a duplicate it
// takes an exclusive lock, where a plain INSERT's shared lock lets two waiting twins
// deadlock once the first rolls back. The store tells a new key from an existing one by
// the rows affected, so New panics on a DSN with clientFoundRows=true. The wait is bounded
// by innodb_lock_wait_timeout, which exists per session only and in whole seconds: the
// store sets it (the lock wait rounded up, at least 1s) for the claim and puts the
// session's value back before the handler runs and before the connection returns to the
// pool: unlike on PostgreSQL, the handler's statements wait up to the session's own.
// Its expiry (1205) is storage.ErrInProgress; a deadlock (1213) is storage.ErrTransient,
// after the claim was retried. Gap locks at REPEATABLE READ can make concurrent claims of
// new keys deadlock: that is the retried case. A deadlock in the handler rolls InnoDB's
// whole transaction back, claim included: the store then refuses the handler's later
// statements and the completion (ErrRolledBack), so nothing commits without the key. DeleteExpired runs at READ COMMITTED with
// FOR UPDATE SKIP LOCKED (MySQL 8.0+, MariaDB 10.6+), so it takes no gap locks.
//
// scope and idem_key are VARBINARY(255): keys compare byte for byte, as on the other
// dialects (a utf8mb4 VARCHAR would merge "Key", "key" and "key "), and the 510-byte
// primary key fits InnoDB's index limits under any row format. A scope or key over 255
// bytes is refused, never truncated. Times are DATETIME(6) holding UTC from the database
// clock (UTC_TIMESTAMP(6)); the store reads and writes them as UTC whatever the DSN's
// parseTime, loc and time_zone say.
//
// # SQLite
//
// No DSN parameter is required; journal_mode WAL is recommended, so readers never wait for
// the writer, with synchronous FULL, so that an acknowledged response survives a power
// loss (NORMAL in WAL mode can lose the last commits), and an explicit busy_timeout:
//
//	gorm.Open(sqlite.Open("app.db?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(5000)"), &gorm.Config{})
//
// SQLite has no row locks and one writer. Every transaction the store opens writes first
// (the claim, or in phased mode a fenced touch of the key), so it takes the write lock at
// once, waiting up to the lock wait (PRAGMA busy_timeout, set for the claim and put back
// after); SQLITE_BUSY past the wait is storage.ErrInProgress. Writers are serialized: in
// atomic mode a keyed request holds the write lock while its handler runs, so concurrent
// keyed requests, whatever their keys, run one after the other and one that waits longer
// than the lock wait gets 409. Use phased mode (core.Config.Mode) where handlers are slow.
// A handler that writes through the plain *gorm.DB instead of MustDB(ctx) waits for its own
// request's write lock until busy_timeout runs out.
// The store's other statements wait up to the connection's busy_timeout (the driver's
// default is 5s). SQLite runs in the application's process, so the store uses the
// application's clock, stored as fixed-width UTC text ("2006-01-02 15:04:05.000000").
//
// # Table
//
// One table, DefaultTable unless WithTable names another (schema-qualified where the
// database has schemas), with PRIMARY KEY (scope, idem_key) and an index on created_at
// named <table>_created_at_idx. Schema returns its DDL for the store's dialect with the
// configured name; Migrate runs that DDL when the table is missing, and on a table made
// from it (by hand or by a migration tool) does nothing. On any other existing table it
// adds only what is missing (a column, the index) and never alters or drops a column.
// Give Migrate a deadline:
//
//	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
//	defer cancel()
//	if err := store.Migrate(ctx); err != nil { … } // or apply store.Schema() with your migration tool
//
// Schema returns the table's DDL for the dialect; the README lists it for each. A table
// made before the completer's columns (request, completer_attempts, next_attempt,
// released_at) needs them before this version runs on it: Migrate adds them.
//
// On MySQL/MariaDB scope and idem_key are varbinary(255), the byte columns longblob
// (lease_token varbinary(16)), the text columns longtext and the times datetime(6), with
// ENGINE=InnoDB; on SQLite the byte columns are blob and the times datetime. Bodies and
// headers are stored as bytes, never JSON: headers as storage.EncodeHeader lines.
//
// # Expiry
//
// DeleteExpired (run by core.Sweeper) deletes the oldest keys created before its cut-off,
// by primary key, in one short statement or transaction per batch, never a started key
// whose lease is live nor (PostgreSQL, MySQL/MariaDB) a row another transaction holds. A
// key past its retention already counts as absent to Claim.
//
// # Logging
//
// The store's statements go through the *gorm.DB's logger. GORM's default logger reports
// failed statements as errors and statements over 200ms as slow, so a twin that waited
// for a lock or gave up (answered 409) shows up there; configure the logger accordingly.
package gormstore
