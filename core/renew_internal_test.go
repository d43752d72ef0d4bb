package core

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/idemkit/idem/core/storage"
)

// countLock counts its renewals.
type countLock struct {
	storage.Lock
	renewals atomic.Int32
}

func (l *countLock) Renew(context.Context) error {
	l.renewals.Add(1)
	return nil
}

// TestRenewalsRenewEachLeaseOnItsOwnClock: the engine's one schedule renews every running
// lease every Lease/3 from its own start, and a stopped lease never again, whatever the
// others do.
func TestRenewalsRenewEachLeaseOnItsOwnClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := &Engine{cfg: Config{StoreTimeout: time.Second}}
		const d = 3 * time.Minute // renewed every minute
		var (
			locks  [3]countLock
			leases [3]lease
		)
		count := func() [3]int32 {
			synctest.Wait()
			return [3]int32{locks[0].renewals.Load(), locks[1].renewals.Load(), locks[2].renewals.Load()}
		}
		leases[0].start(t.Context(), e, &call{}, &locks[0], d)
		time.Sleep(30 * time.Second)
		leases[1].start(t.Context(), e, &call{}, &locks[1], d)
		leases[2].start(t.Context(), e, &call{}, &locks[2], d)
		time.Sleep(45 * time.Second) // 1:15
		assert.Equal(t, [3]int32{1, 0, 0}, count())
		leases[1].stop()
		time.Sleep(2 * time.Minute) // 3:15: the first renewed at 1, 2, 3; the last at 1:30, 2:30
		assert.Equal(t, [3]int32{3, 0, 2}, count())
		leases[0].stop()
		leases[2].stop()
		time.Sleep(5 * time.Minute)
		assert.Equal(t, [3]int32{3, 0, 2}, count())
		e.renewals.mu.Lock()
		assert.Nil(t, e.renewals.first, "nothing left on the schedule")
		e.renewals.mu.Unlock()
	})
}
