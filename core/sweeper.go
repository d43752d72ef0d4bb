package core

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemkit/idem/core/storage"
)

// Sweeper deletes keys past the store's retention (storage.Store.Retention, set where
// the store is made, such as pgxstore.WithRetention) in batches, on an interval, until
// its context is done. Claims and the sweeper read the same setting, so they agree on
// what has expired, up to the skew between two clocks: the sweeper's cut-off is this
// process's time less the retention, while a SQL store's claims judge a key's age by the
// database's clock (keep them in sync, as NTP does). A key whose lease is live is never
// swept, whatever the clocks say (Store.DeleteExpired). Run one per deployment (several are harmless: batches are small and
// deletes idempotent). Stores that expire keys themselves (redisstore) need none.
type Sweeper struct {
	// Store is swept. Required.
	Store storage.Store
	// Interval between sweeps. Default: 1m.
	Interval time.Duration
	// BatchSize is the most keys one DeleteExpired call removes. Default: 5000.
	BatchSize int
	// Pause is how long the sweeper rests between two batches of one sweep, so that the
	// claims a batch held up get in: a database with one write lock (SQLite) otherwise
	// serves a long sweep's batches back to back while claims wait. Default (0): as long
	// as the batch before took, so a sweep takes at most half the database's time;
	// negative: no pause.
	Pause time.Duration
	// Logger receives an error line per sweep that fails and a debug line per sweep that
	// deleted keys. Default: discards.
	Logger *slog.Logger
}

// Sweep deletes expired keys batch after batch, resting Pause between two, until a batch
// comes back short, and reports how many it deleted.
func (s *Sweeper) Sweep(ctx context.Context) (int, error) {
	retention, err := s.retention()
	if err != nil {
		return 0, err
	}
	batch := s.BatchSize
	if batch <= 0 {
		batch = 5000
	}
	before := time.Now().Add(-retention)
	total := 0
	for {
		began := time.Now()
		n, err := s.Store.DeleteExpired(ctx, before, batch)
		total += n
		if err != nil {
			return total, fmt.Errorf("idem: sweeping expired keys: %w", err)
		}
		if n < batch {
			return total, nil
		}
		if err := s.rest(ctx, time.Since(began)); err != nil {
			return total, fmt.Errorf("idem: sweeping expired keys: %w", err)
		}
	}
}

// retention is the store's retention, or an error wrapping ErrInvalidConfig when the
// sweeper cannot sweep at all: no Store, or one reporting no retention.
func (s *Sweeper) retention() (time.Duration, error) {
	if s.Store == nil {
		return 0, fmt.Errorf("%w: Sweeper.Store: required", ErrInvalidConfig)
	}
	retention := s.Store.Retention()
	if retention <= 0 {
		return 0, fmt.Errorf("%w: Sweeper.Store: %T reports a retention of %v", ErrInvalidConfig, s.Store, retention)
	}
	return retention, nil
}

// rest waits Pause (or took, by default) between two batches, or until ctx is done.
func (s *Sweeper) rest(ctx context.Context, took time.Duration) error {
	pause := s.Pause
	if pause == 0 {
		pause = took
	}
	if pause <= 0 || ctx.Err() != nil {
		return context.Cause(ctx)
	}
	t := time.NewTimer(pause)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// Run sweeps at once and then every Interval until ctx is done, and returns nil then: a
// shutdown is not an error. A sweep that fails (the store unreachable, say) is logged and
// the next one tries again, so the only error Run returns is one that no later sweep can
// fix: a Sweeper that cannot sweep at all (no Store, or a store reporting no retention),
// wrapping ErrInvalidConfig, returned at once, before any sweep.
func (s *Sweeper) Run(ctx context.Context) error {
	if _, err := s.retention(); err != nil {
		return err
	}
	log := s.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	every(ctx, s.Interval, time.Minute, log, "sweep", "deleted", s.Sweep)
	return nil
}

// every runs pass at once, then every interval (fallback when interval is not positive)
// until ctx is done: the loop of Sweeper.Run and Completer.Run. A pass that fails is
// logged at Error ("idem: <what> failed"), and the next one tries again; one that did
// something, at Debug ("idem: <what>", its count as the attribute named count).
func every(ctx context.Context, interval, fallback time.Duration, log *slog.Logger, what, count string, pass func(context.Context) (int, error)) {
	if interval <= 0 {
		interval = fallback
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		n, err := pass(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			log.LogAttrs(ctx, slog.LevelError, "idem: "+what+" failed", slog.Any("error", err))
		case n > 0:
			log.LogAttrs(ctx, slog.LevelDebug, "idem: "+what, slog.Int(count, n))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
