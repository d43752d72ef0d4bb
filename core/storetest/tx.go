package storetest

import (
	"context"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core/storage"
)

// txTests run in every mode, on a store that shares its transaction with the handler
// (Subject.Tx): what the handler's writes become.
var txTests = []test{
	{"HandlerCannotEndTx", testHandlerCannotEndTx},
	{"FailedPhaseKeepsNothing", testFailedPhaseKeepsNothing},
}

// txPhasedTests run in ModePhased only, on a store that shares its transaction.
var txPhasedTests = []test{
	{"PhaseAfterFinalTx", testPhaseAfterFinalTx},
}

// requireRows checks how many committed business rows carry label.
func (s *suite) requireRows(label string, want int, msg string) {
	s.t.Helper()
	n, err := s.tx.Count(s.ctx, label)
	require.NoError(s.t, err, "counting the business rows labelled %q", label)
	require.Equal(s.t, want, n, "business rows labelled %q: %s", label, msg)
}

// write writes a business row labelled label in ctx's transaction and requires success.
func (s *suite) write(ctx context.Context, label string) {
	s.t.Helper()
	require.NoError(s.t, s.tx.Write(ctx, label), "writing business row %q through the store's getter", label)
}

// testHandlerCannotEndTx: Commit and Rollback of the key's transaction through the
// store's getter are refused with ErrTxOwned and end nothing: the write before them is
// not committed, the transaction takes writes after them, and a failed request still
// keeps none of them. So a handler that commits and then fails cannot leave a business
// row behind for its retry to write again (two rows for one key). The same holds for a
// phase's transaction.
func testHandlerCannotEndTx(s *suite) {
	c := s.claim("k", "a")
	l := s.mustFresh(c)
	ctx := l.Context(s.ctx)
	s.write(ctx, "order")
	err := s.tx.Commit(ctx)
	require.Error(s.t, err, "Commit through the store's getter must be refused: the store commits the request's transaction with its response")
	require.ErrorIs(s.t, err, storage.ErrTxOwned, "Commit through the store's getter")
	require.ErrorIs(s.t, s.tx.Rollback(ctx), storage.ErrTxOwned, "Rollback through the store's getter")
	s.requireRows("order", 0, "a refused Commit commits nothing")
	s.write(ctx, "after")

	// The request fails: the engine releases the key.
	require.NoError(s.t, l.Release(s.ctx), "Release")
	s.requireRows("order", 0, "a released request keeps none of its writes, whatever Commit the handler tried")
	s.requireRows("after", 0, "a released request keeps none of its writes")

	// The retry runs again and completes: one business row for one key.
	l2 := s.mustFresh(c)
	s.write(l2.Context(s.ctx), "order")
	s.complete(l2, created("1"))
	s.requireRows("order", 1, "one key, one business row")

	// A phase's transaction (phased: its own; atomic: the request's, under a savepoint).
	c3 := s.claim("k3", "a")
	l3 := s.mustFresh(c3)
	err = l3.Phase(s.ctx, "charged", func(ctx context.Context) error {
		s.write(ctx, "phase")
		require.ErrorIs(s.t, s.tx.Commit(ctx), storage.ErrTxOwned, "Commit of a phase's transaction through the store's getter")
		require.ErrorIs(s.t, s.tx.Rollback(ctx), storage.ErrTxOwned, "Rollback of a phase's transaction through the store's getter")
		s.write(ctx, "phase")
		return nil
	})
	require.NoError(s.t, err, "Phase")
	s.complete(l3, created("3"))
	s.requireRows("phase", 2, "the phase's writes, committed by the store, each once")
}

// testFailedPhaseKeepsNothing: a phase whose function fails keeps none of the writes it
// made through the store's transaction, in either mode (atomic: rolled back to a
// savepoint, the request's earlier writes kept; phased: the phase's transaction rolled
// back), while the request goes on and completes.
func testFailedPhaseKeepsNothing(s *suite) {
	c := s.claim("k", "a")
	l := s.mustFresh(c)
	if s.mode == storage.ModeAtomic {
		s.write(l.Context(s.ctx), "before")
	}
	err := l.Phase(s.ctx, "charged", func(ctx context.Context) error {
		s.write(ctx, "failed")
		return errBoom
	})
	require.ErrorIs(s.t, err, errBoom, "Phase must return the error of its function")
	if s.mode == storage.ModePhased {
		s.requireRows("failed", 0, "a failed phase commits nothing")
		s.mustStarted(c, c, storage.RecoveryStarted)
	}
	err = l.Phase(s.ctx, "shipped", func(ctx context.Context) error {
		s.write(ctx, "kept")
		return nil
	})
	require.NoError(s.t, err, "a phase after a failed one")
	s.complete(l, created("1"))
	s.mustReplay(c, c, created("1"))
	s.requireRows("failed", 0, "a phase whose function failed must keep none of its writes")
	s.requireRows("kept", 1, "the next phase's writes")
	if s.mode == storage.ModeAtomic {
		s.requireRows("before", 1, "rolling back a failed phase keeps the request's earlier writes")
	}
}

// testPhaseAfterFinalTx: in phased mode, once the handler has opened the request's final
// transaction (its getter called outside a phase), a phase is refused with
// ErrFinalTxOpen without running its function or recording its point, and the final
// transaction carries on and commits with the response. Otherwise the final writes made
// before the phase would commit with it, and run again on a retry that resumes after it.
func testPhaseAfterFinalTx(s *suite) {
	c := s.claim("k", "a")
	l := s.mustFresh(c)
	ctx := l.Context(s.ctx)
	s.write(ctx, "final")
	ran := false
	err := l.Phase(ctx, "charged", func(ctx context.Context) error {
		ran = true
		s.write(ctx, "late")
		return nil
	})
	require.ErrorIs(s.t, err, storage.ErrFinalTxOpen, "a phase started while the request's final transaction is open")
	require.False(s.t, ran, "a refused phase must not run its function")
	s.mustStarted(c, c, storage.RecoveryStarted)
	s.requireRows("final", 0, "the final transaction commits with the response, not with a phase")
	s.write(ctx, "final")
	s.complete(l, created("1"))
	s.requireRows("final", 2, "the final transaction commits with the response")
	s.requireRows("late", 0, "a refused phase writes nothing")
	s.mustReplay(c, c, created("1"))
}
