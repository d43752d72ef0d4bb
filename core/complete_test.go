package core_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
)

// TestCompletionOfUnknownOutcomeIsNotRecordedNot409: a completion that fails (its
// connection cut at COMMIT, say) and whose release then finds the key no longer the
// worker's (the completion committed after all, or another worker finished it) answers
// 503 not-recorded, whose retry gets the recorded response; never 409 in progress, which
// would tell the client the operation is still running when it may be done.
func TestCompletionOfUnknownOutcomeIsNotRecordedNot409(t *testing.T) {
	t.Parallel()
	store := &scriptedStore{completeErr: errors.New("complete: unexpected EOF"), releaseErr: fmt.Errorf("fenced: %w", storage.ErrLeaseLost)}
	hs := newHarness(t, core.Config{Store: store}, nil)
	assertProblem(t, hs.do("POST", "k", orderJSON), 503, core.ProblemNotRecorded)
}
