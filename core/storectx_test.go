package core

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type ctxKey struct{}

// TestStoreCtxIsAContextWithTimeout: a store call's context behaves as
// context.WithTimeout's (or WithoutCancel's, detached) would, whether the store only
// reads Err or selects on Done.
func TestStoreCtxIsAContextWithTimeout(t *testing.T) {
	for _, done := range []bool{false, true} {
		name := map[bool]string{false: "Err only", true: "Done"}[done]
		t.Run(name+"/deadline", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				parent := context.WithValue(t.Context(), ctxKey{}, "v")
				sc := new(call).storeCtx(parent, time.Second, false)
				assert.Equal(t, "v", sc.Value(ctxKey{}), "the parent's values")
				d, ok := sc.Deadline()
				assert.True(t, ok)
				assert.Equal(t, time.Now().Add(time.Second), d)
				if done {
					ch := sc.Done()
					time.Sleep(time.Second)
					synctest.Wait()
					<-ch
				} else {
					time.Sleep(time.Second)
				}
				require.ErrorIs(t, sc.Err(), context.DeadlineExceeded)
				require.ErrorIs(t, context.Cause(sc), context.DeadlineExceeded)
				sc.end(context.Canceled)
				require.ErrorIs(t, sc.Err(), context.DeadlineExceeded, "the first error stays")
			})
		})
		t.Run(name+"/parent cancelled", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				parent, cancel := context.WithCancelCause(t.Context())
				sc := new(call).storeCtx(parent, time.Second, false)
				var ch <-chan struct{}
				if done {
					ch = sc.Done()
				}
				require.NoError(t, sc.Err())
				cancel(errors.New("client gone"))
				if done {
					<-ch
				}
				require.ErrorIs(t, sc.Err(), context.Canceled)
				assert.EqualError(t, context.Cause(sc), "client gone", "the parent's cause")
			})
		})
		t.Run(name+"/detached", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				parent, cancel := context.WithCancelCause(context.WithValue(t.Context(), ctxKey{}, "v"))
				cancel(errors.New("client gone"))
				sc := new(call).storeCtx(parent, time.Second, true)
				assert.Equal(t, "v", sc.Value(ctxKey{}))
				var ch <-chan struct{}
				if done {
					ch = sc.Done()
				}
				require.NoError(t, sc.Err(), "a cancelled parent does not cancel a detached call")
				time.Sleep(time.Second)
				if done {
					<-ch
				}
				require.ErrorIs(t, sc.Err(), context.DeadlineExceeded)
				require.ErrorIs(t, context.Cause(sc), context.DeadlineExceeded, "not the parent's cause")
			})
		})
		t.Run(name+"/ended", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sc := new(call).storeCtx(t.Context(), time.Second, false)
				var ch <-chan struct{}
				if done {
					ch = sc.Done()
				}
				sc.end(context.Canceled)
				if done {
					<-ch
				}
				require.ErrorIs(t, sc.Err(), context.Canceled)
			})
		})
	}
}

// TestStoreCtxDerivedContexts: a context a store derives from the call's is cancelled
// with it, and one past its deadline gives a closed Done at once.
func TestStoreCtxDerivedContexts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc := new(call).storeCtx(t.Context(), time.Second, false)
		child, cancel := context.WithCancel(sc)
		defer cancel()
		time.Sleep(time.Second)
		<-child.Done()
		require.ErrorIs(t, context.Cause(child), context.DeadlineExceeded)

		late := new(call).storeCtx(t.Context(), time.Second, false)
		time.Sleep(2 * time.Second)
		<-late.Done()
		require.ErrorIs(t, late.Err(), context.DeadlineExceeded)
	})
}

// TestStoreCtxIsRaceFree: Done, Err and the call's end from several goroutines at once.
func TestStoreCtxIsRaceFree(t *testing.T) {
	for range 100 {
		sc := new(call).storeCtx(t.Context(), time.Millisecond, false)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				<-sc.Done()
				assert.Error(t, sc.Err())
			})
		}
		wg.Go(func() { sc.end(context.Canceled) })
		wg.Wait()
	}
}

// TestCallUsesItsOwnContexts: an operation's usual store calls allocate no context.
func TestCallUsesItsOwnContexts(t *testing.T) {
	c, rn := new(call), new(run)
	allocs := testing.AllocsPerRun(10, func() {
		*c, *rn = call{}, run{}
		c.run = rn
		for range 2 { // the claim's, the completion's
			sc := c.storeCtx(t.Context(), time.Second, false)
			_ = sc.Err()
			sc.end(context.Canceled)
		}
	})
	assert.Zero(t, allocs)
	assert.NotNil(t, c.storeCtx(t.Context(), time.Second, false), "more calls get contexts of their own")
}
