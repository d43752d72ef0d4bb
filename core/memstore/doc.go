// Package memstore keeps idempotency keys in the memory of one process.
//
// It is for tests and for a single process only, and protects nothing across instances:
// two servers each have their own memory, so a retry routed to the other one runs the
// side effect again. Use a database store (pgxstore, gormstore) as soon as more than one
// process serves the API.
//
// It has no transaction to share, so it runs phased mode only (SupportsAtomic reports
// false and a ModeAtomic claim fails with storage.ErrUnsupportedMode). What that loses: the
// handler's writes and the key's completion are not atomic. A handler that wrote its rows
// and then crashed before Complete leaves a started key whose lease expires; the retry
// takes over and runs the handler again from the last recorded phase. Phase runs its
// function and then records the recovery point; the function's side effects cannot be
// rolled back if the lease was lost meanwhile.
//
// Everything else of the storage.Store contract holds: leases, a fresh fencing token per
// claim and takeover (a stale lock's Phase, Complete and Release return an error wrapping
// storage.ErrLeaseLost and change nothing), recovery points, keys past retention counted as
// absent, DeleteExpired, atomic takeover of an expired lease. The store is safe for
// concurrent use and starts no goroutines. The process restarting loses every key.
//
// Usage:
//
//	eng, err := core.New(core.Config{Store: memstore.New()})
//	// …
//	mw := eng.Middleware(func(r *http.Request) string { return r.Header.Get("X-Account") })
//
// It is deliberately plain: one map behind one mutex, holding each key's storage.Record.
// Claim keeps a copy of the fingerprint and Complete a copy of the response's header and
// body, never the caller's; times are the store's clock's (WithClock). The header is kept
// as every store keeps it (storage.EncodeHeader: a name without values is not kept).
//
// The first replay or lookup of a completed key builds its record, which never changes
// again: every later replay returns that same *storage.Record, and allocates nothing. Records
// returned by Claim are shared with the store and with other callers: do not mutate
// them, their Fingerprint, Response, Response.Header or Response.Body.
package memstore
