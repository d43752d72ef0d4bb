// Package backoff is the retry wait that idemclient, grpcidem and core's completer share:
// capped exponential growth with "equal jitter", and a sleep that ends with its context.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Defaults for the clients' InitialBackoff and MaxBackoff settings.
const (
	DefaultInitial = 500 * time.Millisecond
	DefaultMax     = 8 * time.Second
)

// Delay is the wait before the retry that follows attempt (from 1): the bound
// initial·2^(attempt-1), capped at max, and a wait drawn uniformly from its upper half.
// A non-positive initial or max is replaced by DefaultInitial or DefaultMax.
func Delay(initial, max time.Duration, attempt int) time.Duration {
	if initial <= 0 {
		initial = DefaultInitial
	}
	if max <= 0 {
		max = DefaultMax
	}
	d := min(initial, max)
	for i := 1; i < attempt && d < max; i++ {
		d = min(2*d, max)
	}
	half := d / 2
	return d - half + rand.N(half+1)
}

// Sleep waits d, or until ctx ends: then it returns the context's cause.
func Sleep(ctx context.Context, d time.Duration) error {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
