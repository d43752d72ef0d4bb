// Package redisstore is idem's Redis store, on go-redis v9, for phased operations: work
// whose side effect lives outside a relational database (a payment provider, an email
// API, another service), or an application with no SQL database at all.
//
//	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	store := redisstore.New(client) // options: WithPrefix, WithRetention, WithReplicaAcks
//
//	eng, err := core.New(core.Config{Store: store, Mode: core.ModePhased})
//	if err != nil { ... }
//	accountOf := func(r *http.Request) string { return r.Header.Get("X-Account-ID") }
//	http.Handle("POST /payments", eng.Middleware(accountOf)(http.HandlerFunc(pay)))
//
//	func pay(w http.ResponseWriter, r *http.Request) {
//		ctx := r.Context()
//		op := core.MustOperation(ctx)
//		var charge string
//		err := op.Phase(ctx, "charged", func(ctx context.Context) error {
//			var err error
//			charge, err = provider.Charge(ctx, 100, op.DerivedKey("charge")) // the provider's own idempotency key
//			return err
//		})
//		if err != nil { ... } // a 5xx gives the key up; the retry resumes
//		if charge == "" { // resumed after "charged": ask the provider, by the same key
//			charge, _ = provider.Lookup(ctx, op.DerivedKey("charge"))
//		}
//		w.WriteHeader(http.StatusCreated) // recorded, then sent; retries get it replayed
//	}
//
// Any go-redis client works: a *redis.Client, a failover client (Sentinel) or a
// *redis.ClusterClient.
//
// # What is protected, and what is not
//
// The SQL stores (pgxstore, gormstore) offer atomic mode: the key, the handler's business
// writes and the recorded response commit in one transaction, or not at all. Redis has no
// transaction to share with your handler, so this store runs phased mode only
// (SupportsAtomic is false; an atomic claim fails with storage.ErrUnsupportedMode) and
// Lock.Context hands the handler its context unchanged. What that means:
//
//   - Protected, as with the SQL stores: one execution at a time per key across every
//     instance (the claim is one script on the server: exactly one of any number of racers
//     wins); duplicates get 409 while the lease is live, and the recorded response,
//     byte for byte, afterwards; 422 for a key reused with another request; a crashed or
//     stalled worker's key is taken over after its lease, by exactly one retry, which
//     resumes after the last recorded phase; and a stale worker, fenced by its token, can
//     then neither record a phase, nor complete, nor release.
//   - Not protected: a phase's side effect and its recovery point are two writes, to two
//     systems. A crash, a lost lease or a Redis failure between them leaves the effect done
//     and the point unrecorded, so the next attempt runs the phase again: every phase must
//     be idempotent itself (call the provider with op.DerivedKey). Likewise the handler's
//     last work and the recorded response are two writes: a failed completion answers 503,
//     and the retry runs the handler again from the last recorded phase.
//
// If the side effect is a write to your SQL database, use that database's store in
// atomic mode instead: there the write and the key commit together.
//
// # How a request runs
//
// Every state change is one Lua script run on the server (EVALSHA, falling back to EVAL
// after a restart emptied Redis's script cache), and every script works on one hash per
// key. A fresh claim, a takeover and a replay are one round trip each; so is the
// completion. A phase is two: Phase first renews the lease (fenced: if the lease was lost,
// fn does not run), then runs fn, then records the point and renews the lease again
// (fenced: if the lease was lost meanwhile, the point is not recorded and Phase returns
// storage.ErrLeaseLost). The point is recorded after fn, never before: a crash in between
// must make the next holder run the phase again rather than skip a phase that never ran.
// Release deletes the key when no phase was recorded, and otherwise ends the lease at once
// and keeps the point, so the retry resumes without waiting. While the handler runs, the
// engine renews the lease (Renew: the renew script, fenced, without a point).
//
// Lease ends and creation times come from the Redis server's clock (TIME inside the
// scripts), never from the application's, so instances whose clocks disagree still agree
// on who holds a key. Fencing tokens are 128 random bits, fresh for every claim and
// takeover.
//
// # Keys
//
// One hash per operation, named prefix{h}: h is the hex SHA-256 of the scope (with its
// length) and the key, so scopes and keys of any bytes are safe, and the braces are a
// Redis Cluster hash tag that keeps all of one operation in one slot. The hash holds the
// fingerprint, method, path, state, recovery point, lease end, token, creation and
// completion times, status, headers (storage.EncodeHeader) and body. Store.Key gives a
// key's name, for redis-cli.
//
// # Expiry
//
// The hash's TTL is the retention (WithRetention, 24h by default), set when the key is
// claimed and never refreshed by a replay; a phase extends it only as far as its lease
// needs, so Redis never expires a key in progress. Redis deletes expired keys itself:
// DeleteExpired is a no-op and core.Sweeper is not needed. A key older than a claim's
// retention whose lease is not live counts as absent, as with every store.
//
// # When Redis fails
//
// A Redis that is down, paused, restarting or failing over makes the store return an
// error, and the engine answers 503 + Retry-After without running the handler: it fails
// closed. Such errors wrap ErrUnavailable (a handler whose Phase returns one should
// answer 503 with Retry-After as well); those by which Redis refused a script without
// running it (LOADING, READONLY, TRYAGAIN, CLUSTERDOWN, MASTERDOWN, BUSY) say that
// nothing changed; the driver's error stays in the chain. On a cluster client, an error that means a node is gone makes the
// store reload the client's view of the cluster (at most every quarter of a second), so
// a master's keys are served again as soon as its replica is promoted; a failover client
// (Sentinel) follows the new master by itself. The deadline the engine puts in each call's
// context (core.Config.StoreTimeout) bounds it, which go-redis honours only with
// redis.Options.ContextTimeoutEnabled; without it the client's ReadTimeout and
// WriteTimeout bound them instead. The scripts are safe to send twice, as go-redis does
// after a connection error: a claim or completion that finds its own token, or a release
// that finds the key gone, reports its own earlier success.
//
// # Running Redis for it
//
// The store's guarantees are as durable as Redis's writes:
//
//   - Persistence: a Redis restarted without its data (no AOF, no RDB) has forgotten
//     every key, so retries run again. Use appendonly yes; appendfsync everysec may lose
//     the last second of claims on a crash of the host.
//   - Replication: a replica promoted by Sentinel or Cluster may not have the last writes
//     of its primary (replication is asynchronous), with the same effect for those keys:
//     a completion acknowledged a moment before the failover can be gone, and its retry
//     runs the handler again. WithReplicaAcks makes completions and phases wait for
//     replicas (WAIT on the key's own master) and answers 503 not-recorded when they do
//     not acknowledge in time, so no client holds a response a failover can take back.
//   - Eviction: use maxmemory-policy noeviction. Under allkeys-* or volatile-* policies
//     Redis may evict a key before its retention, and its retry runs again.
package redisstore
