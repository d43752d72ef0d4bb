// Package storetest is the conformance suite every storage.Store runs: the one statement
// of what a store promises (a rule that is not a test here is not a rule). It checks,
// through the Store and Lock interfaces, every sentence of the contract in
// core/storage/store.go: claim and replay, fingerprint mismatch, keys in progress, release
// after a failure, phases and recovery points, lease expiry, renewal and takeover, fencing
// of a stale lock, retention, DeleteExpired, scope isolation and many goroutines claiming
// one key. Through core's engine on the store it checks the rules the two keep together:
// a recovery point the code never reaches fails the request (500 cannot-resume) and keeps
// the point, and a phase that runs for several leases keeps its key while a twin retries.
//
// ModePhased is always exercised; ModeAtomic too when the store's SupportsAtomic reports
// true (otherwise the suite checks that an atomic claim fails with
// storage.ErrUnsupportedMode). Lookup is tested on every store, among others that
// storage.Decide on what it reads says what the next claim does, and so is
// storage.KeyCounter on a store that implements it.
//
// Every store implements storage.Completable (core.Completer's seam), and the suite holds
// it to its rules in ModePhased: a kept request comes back byte for byte and goes when the
// key completes; Abandoned lists exactly the abandoned keys (not a live lease, a completed
// key, one without a request, one past the horizon or the grace, one out of attempts or
// not yet due); of completers racing to begin one attempt exactly one wins; and through
// core's engine, two completers and the client's retry racing on a payment that failed
// after charging run each remaining phase once, and a retry afterwards is a replay.
//
// Call Run from the store's external test package, with a function that gives each
// subtest a fresh, empty store of its own (its own table, schema or database), so the
// subtests run in parallel without seeing each other's keys:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) storage.Store {
//			return mystore.New(testdb.Postgres(t))
//		})
//	}
//
// A store that shares a transaction with the handler calls RunHarness instead, with hooks
// that reach that transaction through the store's getter (Subject.Tx): the suite then
// checks that the handler cannot commit or roll it back, that a failed phase keeps none
// of its writes in either mode, and that a phase started once the final transaction is
// open is refused. A store whose database can stop answering gives Harness.Stalling, and
// the suite checks that Complete and Release are bounded by the deadline of the context they are given.
//
// The suite waits for real time to pass only where that is the case under test (a lease
// or a retention running out, decided by the store's or the database's clock), with
// leases of a few hundred milliseconds, and watches an atomic twin keep waiting for as
// long. It compares the store's timestamps with the test's clock within a minute, so
// the store and the database must run on clocks that agree that closely.
//
// Where goroutines race for one key (200 claimers, several takeovers at once) a loser
// may get an error wrapping storage.ErrTransient instead of a Record: that is what a
// database at REPEATABLE READ reports for a serialization failure, and the engine
// answers it with 503 + Retry-After. A second Lock is never allowed.
package storetest
