// Package storage is the seam between idem's engine and the stores that keep its keys.
// Application code picks a store (pgxstore, gormstore, redisstore, memstore), hands it to
// core.Config.Store, and tests the errors declared here (ErrInProgress, ErrLeaseLost…)
// with errors.Is. Store authors implement Store and Lock, decide what a claim does with
// an existing record with Decide, return the errors declared here, and run the
// conformance suite in core/storetest; KeyCounter is optional, for operators' tools (the
// idem command's stats).
//
// The engine never sees SQL, and a store sees of HTTP only what it keeps: a Claim carries
// the scope, key, request fingerprint and mode (with the method and path, for
// diagnostics); a Record carries what is stored; a Response (a status, an http.Header and
// the body's bytes) is what a replay sends byte for byte. A store never reads a request
// or writes to a client.
package storage
