// Package pgxstore is idem's PostgreSQL store on pgx v5. It keeps idempotency keys in one
// table (schema.sql, created by Migrate) and shares its transaction with the handler, so
// the business write, the key and the recorded response commit together or not at all.
//
//	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	if err != nil { ... }
//	store := pgxstore.New(pool)
//	if err := store.Migrate(ctx); err != nil { ... }
//
//	eng, err := core.New(core.Config{Store: store})
//	if err != nil { ... }
//	accountOf := func(r *http.Request) string { return r.Header.Get("X-Account-ID") }
//	http.Handle("POST /orders", eng.Middleware(accountOf)(http.HandlerFunc(createOrder)))
//
//	func createOrder(w http.ResponseWriter, r *http.Request) {
//		var id int64
//		err := pgxstore.MustTx(r.Context()).QueryRow(r.Context(),
//			`INSERT INTO orders (amount) VALUES ($1) RETURNING id`, 100).Scan(&id)
//		if err != nil {
//			http.Error(w, "could not create the order", http.StatusInternalServerError) // 5xx: rolled back
//			return
//		}
//		w.Header().Set("Location", fmt.Sprintf("/orders/%d", id))
//		w.WriteHeader(http.StatusCreated) // recorded, committed, then sent
//	}
//
// # Atomic mode (the default)
//
// One transaction per keyed request, on one connection. At READ COMMITTED (the default)
// the key row is written once, with the response:
//
//   - BEGIN, the claim and a lookup go in one round trip. The claim writes nothing: when no
//     row holds the key it takes the key's transaction-scoped advisory lock (a 64-bit hash
//     of table, scope and key). A twin in flight holds it: the claim waits, bounded by
//     lock_timeout (its expiry answers 409), and looks again, with a snapshot that sees
//     what the twin committed, so it replays. lock_timeout is set for the transaction (so
//     the handler's own statements run under it too; SET LOCAL lock_timeout again if they
//     need longer).
//   - The handler writes through MustTx(ctx).
//   - A storable response: a plain INSERT of the completed key row and COMMIT go in one
//     round trip, before the response is sent. The primary key is the final arbiter: where
//     the lock did not serialise (an engine that accepts the call and does not lock), the
//     twin's INSERT fails, its transaction is aborted and rolls back with the handler's
//     writes, and it answers 503 + Retry-After (the retry replays). A failed commit (a
//     deferred constraint, say) is a 503 and leaves nothing. A 5xx, a panic or a
//     cancelled request rolls back.
//   - A serialization failure or a deadlock rolls back and answers 503 + Retry-After.
//
// At REPEATABLE READ or SERIALIZABLE (WithIsolation) a snapshot taken before the lock is
// granted could not see a twin that committed in between, so the claim writes the started
// key row first (INSERT … ON CONFLICT DO NOTHING RETURNING; a twin waits on the row, and a
// SELECT reads it on a conflict) and the completion UPDATEs it; a twin that waited for a
// transaction that committed gets a serialization failure, and the store retries its claim
// (nothing of the request has run yet), which replays. WithClaimRowFirst selects that
// claim at READ COMMITTED too, for engines whose advisory locks do not lock.
//
// A first request thus costs the handler's statements plus two round trips of the store's
// own (BEGIN, lock and lookup; INSERT and COMMIT); a replay two round trips and no write
// (BEGIN, lock and lookup; ROLLBACK), or with WithLookupFirst one statement outside a
// transaction (first requests then pay one more round trip).
//
// # Phased mode
//
// The claim commits alone with a lease and a fresh fencing token (a random UUID); a replay
// is that one statement. Each phase commits its own transaction with its recovery point and
// a renewed lease, checked against the token; after a lease runs out, the next retry with
// the same request takes the key over (UPDATE … WHERE locked_until <= now() RETURNING: one
// winner) and the stale worker's phase, completion or release fails with
// storage.ErrLeaseLost. Outside phases, MustTx(ctx) begins the request's final transaction on
// first use (never a second connection while phases run; a phase after it is refused with
// storage.ErrFinalTxOpen) and Complete commits it with the response. While the handler
// runs, the engine renews the lease (Renew: one fenced UPDATE on a connection of its own).
// Complete, Release and Renew are each bounded by the deadline the engine puts in their context (core.Config.StoreTimeout).
//
// Leases and retention use the database clock (now()), never the application's.
//
// # Expiry
//
// DeleteExpired (run by core.Sweeper) deletes the oldest keys in batches, by primary key,
// with FOR UPDATE SKIP LOCKED, never a key whose lease is live. A key past its retention already
// counts as absent to Claim.
//
// # A standby
//
// On a primary with a streaming standby, give the pool every node and
// target_session_attrs=read-write: after a promotion it finds the new primary by itself.
// With asynchronous replication a failover can take back a completion the client was told
// of; with synchronous replication it cannot, except for a COMMIT whose wait for the
// standby was cancelled, which PostgreSQL acknowledges with a warning: WatchReplication
// makes the store see that warning and answer 503 not-recorded (ErrNotReplicated).
// docs/failover.md has the figures and the settings.
//
// # Portability
//
// Every statement on the key table filters on scope (a Citus table distributes by it).
// lock_timeout (55P03) and statement_timeout (57014) expiries both mean 409; 40001 and
// 40P01 mean 503 + Retry-After; WithIsolation selects READ COMMITTED (default) or
// REPEATABLE READ.
package pgxstore
