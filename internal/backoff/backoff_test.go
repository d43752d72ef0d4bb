package backoff_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/internal/backoff"
)

// TestDelayBounds: the waits stay in the upper half of their doubling bound, capped, and
// are jittered.
func TestDelayBounds(t *testing.T) {
	t.Parallel()
	seen := map[time.Duration]bool{}
	for range 200 {
		for attempt, bound := range map[int]time.Duration{1: 10, 2: 20, 3: 40, 4: 50, 30: 50, 1000: 50} {
			bound *= time.Millisecond
			d := backoff.Delay(10*time.Millisecond, 50*time.Millisecond, attempt)
			require.GreaterOrEqual(t, d, bound/2, "attempt %d", attempt)
			require.LessOrEqual(t, d, bound, "attempt %d", attempt)
			if attempt == 1 {
				seen[d] = true
			}
		}
	}
	assert.Greater(t, len(seen), 50, "the waits are jittered")
	// A cap below the initial wait caps the first wait too.
	assert.LessOrEqual(t, backoff.Delay(time.Second, 100*time.Millisecond, 1), 100*time.Millisecond)
}

// TestDelayDefaults: a non-positive setting takes its default.
func TestDelayDefaults(t *testing.T) {
	t.Parallel()
	d := backoff.Delay(0, 0, 1)
	assert.GreaterOrEqual(t, d, backoff.DefaultInitial/2)
	assert.LessOrEqual(t, d, backoff.DefaultInitial)
	assert.LessOrEqual(t, backoff.Delay(-1, -1, 30), backoff.DefaultMax)
	assert.Greater(t, backoff.Delay(0, 0, 30), backoff.DefaultMax/2-1)
}

// TestSleepEndsWithTheContext: the wait returns the context's cause at once when it ends,
// and nothing after a wait that ran out.
func TestSleepEndsWithTheContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(context.DeadlineExceeded)
	require.ErrorIs(t, backoff.Sleep(ctx, time.Hour), context.DeadlineExceeded)

	ctx, cancel2 := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- backoff.Sleep(ctx, time.Hour) }()
	cancel2()
	require.ErrorIs(t, <-done, context.Canceled)

	require.NoError(t, backoff.Sleep(t.Context(), 0))
}
