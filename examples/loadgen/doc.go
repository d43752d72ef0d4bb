// Command loadgen drives an example server (examples/gin-orders or examples/echo-orders)
// over loopback and checks that every acknowledged key created exactly one order.
//
//	go run ./examples/loadgen                                   # the server at http://127.0.0.1:8080
//	go run ./examples/loadgen -spawn gin                        # build gin-orders, start it on a fresh SQLite file
//	go run ./examples/loadgen -spawn echo -db 'postgres://postgres@127.0.0.1:5432/test?search_path=lg_x' -store gorm
//
// N workers send POST /v1/orders (or /v1/payments with -route payments) as fast as the
// server answers, each request with an Idempotency-Key and a JSON body derived from the
// key, so a request that reuses a key is a true retry. The plan is fixed before the run:
// -requests requests, of which a fraction -dup reuse a key already in the plan and the
// rest bring a new key, up to -keys distinct keys (when the keys run out, the remaining
// requests reuse keys too, and the effective duplicate ratio is printed). New keys and
// duplicates are interleaved at random over the whole run (-seed makes it repeatable). A
// 409 is "still in progress, retry later": the key is sent again after Retry-After (at
// most -retries times), while the worker goes on with the plan.
//
// At the end loadgen prints the throughput, the latency percentiles and the status counts
// (201 original, 201 replayed, 409, anything else), then lists the account's orders (and
// for payments, the provider's charges) and compares the rows created for this run's
// keys with the distinct keys that got a 201. It exits with status 1 unless every
// acknowledged key has exactly one row, with the id its 201 named, and no other key of
// the run has one; 2 for bad flags.
//
// Every run uses a fresh random account (X-Account-ID) unless -account is given, and keys
// carry a random run id, so runs never see each other's keys. loadgen refuses a target
// that is not a loopback address, and its dialer refuses any connection that does not
// resolve to one. The run is bounded by -requests and -duration.
//
// With -spawn gin|echo it builds that example server with the go command (so run it from
// inside the module), starts it on a free loopback port in a temporary directory (a
// fresh SQLite file unless -db names a database; -store picks the PostgreSQL store, or
// redis for the payments' keys in the Redis at 127.0.0.1:6379), and stops it when done.
// The server's configuration comes from these flags only: ADDR, DATABASE_URL,
// REDIS_ADDR, IDEM_* and LOG_LEVEL are removed from its environment.
package main
