package core_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/core/storage"
)

func TestSweeperDeletesExpiredKeys(t *testing.T) {
	t.Parallel()
	// The keys are made two hours ago by the store's clock; the sweeper's cut-off is an
	// hour ago by the real one.
	twoHoursAgo := func() time.Time { return time.Now().Add(-2 * time.Hour) }
	store := memstore.New(memstore.WithClock(twoHoursAgo), memstore.WithRetention(time.Hour))
	hs := newHarness(t, core.Config{Store: store}, nil)
	for i := range 7 {
		hs.do("POST", fmt.Sprintf("k%d", i), orderJSON)
	}
	sw := &core.Sweeper{Store: store, BatchSize: 3, Pause: -1}
	n, err := sw.Sweep(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 7, n, "deleted in batches of 3")
	assert.Zero(t, store.Len(), "keys left")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- sw.Run(ctx) }()
	cancel()
	assert.NoError(t, <-done, "Run after cancel")
}

// batches is a store whose DeleteExpired deletes limit keys every time, and cancels the
// sweep's context after the first call when cancel is set.
type batches struct {
	storage.Store
	calls  atomic.Int32
	cancel context.CancelFunc
}

func (b *batches) DeleteExpired(_ context.Context, _ time.Time, limit int) (int, error) {
	if b.calls.Add(1) == 1 && b.cancel != nil {
		b.cancel()
	}
	return limit, nil
}

// TestSweeperRestsBetweenBatches: between two full batches the sweeper waits (Pause, or
// by default as long as the batch took), and a context ended during that rest ends the
// sweep there, after one batch. A negative Pause goes straight on to the next batch.
func TestSweeperRestsBetweenBatches(t *testing.T) {
	t.Parallel()
	for _, pause := range []time.Duration{0, time.Hour} {
		t.Run(fmt.Sprint(pause), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			store := &batches{Store: memstore.New(), cancel: cancel}
			sw := &core.Sweeper{Store: store, BatchSize: 10, Pause: pause}
			n, err := sw.Sweep(ctx)
			require.ErrorIs(t, err, context.Canceled)
			assert.Equal(t, 10, n, "keys deleted before the rest")
			assert.EqualValues(t, 1, store.calls.Load(), "batches")
		})
	}
	t.Run("negative", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		store := &batches{Store: memstore.New(), cancel: cancel}
		sw := &core.Sweeper{Store: store, BatchSize: 10, Pause: -1}
		_, err := sw.Sweep(ctx)
		require.ErrorIs(t, err, context.Canceled)
		assert.EqualValues(t, 1, store.calls.Load(), "batches")
	})
}

// TestSweeperRunReturnsOnlyWhatCannotBeRetried: a sweeper that cannot sweep at all
// returns ErrInvalidConfig at once; a failing store is logged and retried, and the run
// ends with nil when its context does.
func TestSweeperRunReturnsOnlyWhatCannotBeRetried(t *testing.T) {
	t.Parallel()
	err := (&core.Sweeper{}).Run(context.Background()) // never cancelled: it must return by itself
	require.ErrorIs(t, err, core.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "Sweeper.Store")

	store := &failing{Store: memstore.New(), swept: make(chan struct{}, 2)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- (&core.Sweeper{Store: store, Interval: time.Millisecond}).Run(ctx) }()
	<-store.swept // the first sweep failed, and Run went on
	<-store.swept // to the next
	cancel()
	assert.NoError(t, <-done, "Run after a failing sweep and a cancel")
}

// failing is a store whose DeleteExpired fails, reporting each call on swept.
type failing struct {
	storage.Store
	swept chan struct{}
}

func (f *failing) DeleteExpired(context.Context, time.Time, int) (int, error) {
	select {
	case f.swept <- struct{}{}:
	default:
	}
	return 0, errors.New("store unreachable")
}
