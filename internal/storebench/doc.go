// Package storebench measures what one completed key costs each store in the database
// that keeps it, in one go test -bench run, so the stores are compared on the same
// operation: bytes of Redis memory per key (redisstore, on a redis-server of its own) and
// bytes of PostgreSQL per row (pgxstore, in a schema of its own).
//
//	go test -run '^$' -bench . -benchtime 10000x ./internal/storebench/
//
// The operation: scope "acct-0001", a 36-character key, POST /v1/payments, a 32-byte
// fingerprint, answered 201 with Content-Type and Location headers and a 37-byte JSON
// body. Test support only: nothing here is imported by the library.
package storebench
