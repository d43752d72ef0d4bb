package reliability_test

import (
	"context"
	"sync"
)

// signal is an event that happens once: fire may be called any number of times, from any
// goroutine (a core.Hooks observer), and wait returns once it has been.
type signal struct {
	once sync.Once
	c    chan struct{}
}

func newSignal() *signal { return &signal{c: make(chan struct{})} }

func (s *signal) fire() { s.once.Do(func() { close(s.c) }) }

// wait returns nil once s has fired, or ctx's error if it ends first.
func (s *signal) wait(ctx context.Context) error {
	select {
	case <-s.c:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
