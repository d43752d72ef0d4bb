package idemclient

import (
	"context"
	"time"
)

// SetClock makes t read the time with now and wait with sleep instead of the real clock
// and timer, so that tests see every wait and none really sleeps.
func SetClock(t *Transport, now func() time.Time, sleep func(ctx context.Context, d time.Duration) error) {
	t.now, t.sleep = now, sleep
}
