package core_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/seamtest"
)

// renewStore is memstore whose locks count their renewals and whose Renew answers what
// the test says: it stands for a store whose lease was taken over behind the worker's
// back, which a real store cannot be made to do while its worker renews.
type renewStore struct {
	*memstore.Store
	renewErr error // what Renew returns; nil: the memstore's answer
	renewals atomic.Int32
}

func (s *renewStore) Claim(ctx context.Context, c storage.Claim) (storage.Claimed, error) {
	claimed, err := s.Store.Claim(ctx, c)
	lock, rec := claimed.Lock, claimed.Record
	if lock == nil {
		return storage.Claimed{Verdict: claimed.Verdict, Lock: lock, Record: rec}, err
	}
	return storage.Claimed{Verdict: claimed.Verdict, Lock: &renewLock{Lock: lock, s: s}}, nil
}

type renewLock struct {
	storage.Lock
	s *renewStore
}

func (l *renewLock) Renew(ctx context.Context) error {
	l.s.renewals.Add(1)
	if l.s.renewErr != nil {
		return l.s.renewErr
	}
	return l.Lock.Renew(ctx)
}

// TestRenewalThatLostTheLeaseFailsThePhase: a renewal that finds the lease taken over
// makes the phase running meanwhile commit nothing and return storage.ErrLeaseLost, and the
// engine answers 409 whatever the handler writes, without recording anything. (In a
// synctest bubble: the provider's slow answer and the renewal timer run on its clock.)
func TestRenewalThatLostTheLeaseFailsThePhase(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const lease = time.Minute
		store := &renewStore{Store: memstore.New(), renewErr: fmt.Errorf("fenced: %w", storage.ErrLeaseLost)}
		var phaseErr error
		ran := false
		hs := newHarness(t, core.Config{Store: store, Mode: core.ModePhased, Lease: lease}, func(w http.ResponseWriter, r *http.Request) {
			op := core.MustOperation(r.Context())
			phaseErr = op.Phase(r.Context(), "charged", func(context.Context) error {
				time.Sleep(lease) // the provider answers after a renewal has run
				ran = true
				return nil
			})
			w.WriteHeader(http.StatusCreated) // a careless handler ignores the error
		})
		w := hs.do(http.MethodPost, "k", orderJSON)
		assert.Equal(t, http.StatusConflict, w.Code, "a worker that lost its lease is answered 409")
		require.ErrorIs(t, phaseErr, storage.ErrLeaseLost, "the phase after a renewal lost the lease")
		assert.True(t, ran, "the phase's function ran")
		assert.Positive(t, store.renewals.Load())
		// The fake lease was not really taken over: the engine's release freed the key,
		// which the phase did not record.
		lock, rec, err := seamtest.Split(store.Store.Claim(t.Context(), storage.Claim{Scope: "acct-1", Key: "k", Fingerprint: []byte("another request"),
			Mode: storage.ModePhased, Lease: time.Minute, Retention: time.Hour}))
		require.NoError(t, err)
		require.Nil(t, rec, "the phase recorded nothing (the key's point: %v)", rec)
		assert.Equal(t, storage.RecoveryStarted, lock.RecoveryPoint())
	})
}

// TestRenewalKeepsALongHandlersLease: while a handler outlives its lease several times
// (without a phase), the engine renews the lease, so a twin meanwhile is answered 409 and
// does not take the key over.
func TestRenewalKeepsALongHandlersLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const lease = time.Minute
		store := &renewStore{Store: memstore.New()}
		var runs atomic.Int32
		hs := newHarness(t, core.Config{Store: store, Mode: core.ModePhased, Lease: lease}, func(w http.ResponseWriter, r *http.Request) {
			if runs.Add(1) == 1 {
				time.Sleep(3 * lease) // a slow provider
			}
			w.WriteHeader(http.StatusCreated)
		})
		slow := make(chan int)
		go func() { slow <- hs.do(http.MethodPost, "k", orderJSON).Code }()
		time.Sleep(2 * lease)
		assert.Equal(t, http.StatusConflict, hs.do(http.MethodPost, "k", orderJSON).Code, "a twin two leases in")
		assert.Equal(t, http.StatusCreated, <-slow)
		assert.EqualValues(t, 1, runs.Load(), "no twin took the key over")
		assert.GreaterOrEqual(t, store.renewals.Load(), int32(6), "renewed every Lease/3")
		w := hs.do(http.MethodPost, "k", orderJSON)
		assert.Equal(t, "true", w.Header().Get("Idempotent-Replayed"))
	})
}

// TestDoRefusesAnUnreachedRecoveryPoint: a redelivery that resumes after a phase its fn no
// longer calls is not recorded: Do returns ErrRecoveryPointUnreached and the ID keeps its
// recovery point, so a fixed fn resumes after it.
func TestDoRefusesAnUnreachedRecoveryPoint(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	eng := newDoEngine(t, core.Config{Store: store, Mode: core.ModePhased})
	var charges, ships atomic.Int32
	phase := func(ctx context.Context, name string, n *atomic.Int32) error {
		return core.MustOperation(ctx).Phase(ctx, name, func(context.Context) error { n.Add(1); return nil })
	}
	boom := errors.New("shipping timed out")
	_, _, err := eng.Do(t.Context(), "s", "msg", nil, func(ctx context.Context) ([]byte, error) {
		if err := phase(ctx, "charged", &charges); err != nil {
			return nil, err
		}
		return nil, boom
	})
	require.ErrorIs(t, err, boom)
	_, _, err = eng.Do(t.Context(), "s", "msg", nil, func(ctx context.Context) ([]byte, error) {
		if err := phase(ctx, "charge_made", &charges); err != nil { // renamed
			return nil, err
		}
		return []byte("done"), phase(ctx, "shipped", &ships)
	})
	require.ErrorIs(t, err, core.ErrRecoveryPointUnreached)
	assert.Contains(t, err.Error(), `"charged"`)
	res, replayed, err := eng.Do(t.Context(), "s", "msg", nil, func(ctx context.Context) ([]byte, error) {
		if err := phase(ctx, "charged", &charges); err != nil {
			return nil, err
		}
		return []byte("done"), phase(ctx, "shipped", &ships)
	})
	require.NoError(t, err)
	assert.False(t, replayed)
	assert.Equal(t, "done", string(res))
	assert.EqualValues(t, 1, charges.Load(), "the committed phase never ran again")
	assert.EqualValues(t, 1, ships.Load())
}
