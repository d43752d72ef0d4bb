package storetest

import (
	"context"
	"testing"

	"github.com/idemkit/idem/core/storage"
)

// Harness describes a store to RunHarness: how to make a fresh one for each subtest, and
// the hooks into its database through which the suite checks the rules that the Store
// and Lock interfaces alone cannot show (what the handler's transaction keeps, what a
// database that stops answering costs).
type Harness struct {
	// New returns a fresh, empty store for one subtest (its own table, schema or
	// database), with the hooks into its transaction when it shares one with the
	// handler. Required.
	New func(t *testing.T) Subject

	// Stalling, when set, returns a fresh store whose database the subtest can make stop
	// answering: stall stops it (statements are sent and wait, as on a paused server),
	// and the resume it returns makes it answer again (calling resume twice is harmless).
	// The suite uses it to check that Complete and Release are bounded by
	// the deadline in their context. A store that never waits for anything (memstore) leaves it
	// nil.
	Stalling func(t *testing.T) (store storage.Store, stall func() (resume func()))

	// LosingReplies, when set, returns a fresh store whose connection to its database can
	// lose a reply: loseNext arms it so that the next command the store sends that runs
	// something (a statement, a commit, a script; not a statement's preparation) reaches
	// the database, which runs it, and its reply never comes back: the connection is cut
	// and the driver sees a network error (a driver that resends on such an error, as
	// go-redis does, sends it again on a new connection). lost is closed once the reply
	// has been dropped. The suite uses it to check the rules about work that landed
	// although its caller was told of an error (see storage.Lock.Release). A store with no
	// connection to lose (memstore) leaves it nil.
	LosingReplies func(t *testing.T) (store storage.Store, loseNext func() (lost <-chan struct{}))
}

// Subject is one subtest's store.
type Subject struct {
	Store storage.Store

	// Tx, when set, reaches the transaction the store hands the handler through the
	// store's own getter (pgxstore.MustTx, gormstore.MustDB), as a handler would. nil for a
	// store that shares no transaction (memstore, redisstore): the suite's rules about
	// the handler's writes then have nothing to check.
	Tx *TxHooks
}

// TxHooks reach the transaction a store hands the handler, and the business table the
// suite writes to, one row per call, each row carrying a label. The business table is
// the subject's own (created with the store, in its schema or database).
type TxHooks struct {
	// Write inserts one business row labelled label through the getter, in the
	// transaction ctx carries (a lock's Context, or the ctx a phase's function
	// receives), as a handler's business write does.
	Write func(ctx context.Context, label string) error

	// Count returns how many committed business rows are labelled label, read outside
	// any transaction of the store's.
	Count func(ctx context.Context, label string) (int, error)

	// Commit and Rollback end the transaction ctx carries through the getter, as a
	// handler that tries to commit or roll back itself would (tx.Commit(ctx),
	// DB(ctx).Commit()), and return the getter's error.
	Commit   func(ctx context.Context) error
	Rollback func(ctx context.Context) error
}

// RunHarness runs every conformance test, as Run does, on the stores h makes, plus the
// tests h's hooks make possible: with Subject.Tx, the rules about the handler's
// transaction (a failed phase keeps nothing of its function, the handler cannot commit
// or roll back the key's transaction, a phase after the final transaction opened is
// refused); with Stalling, the deadline Complete and Release keep; with LosingReplies,
// what Release does after a reply was lost.
func RunHarness(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("storetest: Harness.New is required")
	}
	run(t, h)
}
