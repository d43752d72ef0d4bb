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
// its context is done. Claims and the sweeper read the same setting, so a live key is
// never swept. Run one per deployment (several are harmless: batches are small and
// deletes idempotent). Stores that expire keys themselves (redisstore) need none.
type Sweeper struct {
	// Store is swept. Required.
	Store storage.Store
	// Interval between sweeps. Default: 1m.
	Interval time.Duration
	// BatchSize is the most keys one DeleteExpired call removes. Default: 5000.
	BatchSize int
	// Logger receives a debug line per sweep and errors. Default: discards.
	Logger *slog.Logger
}

// Sweep deletes expired keys batch after batch until a batch comes back short, and
// reports how many it deleted.
func (s *Sweeper) Sweep(ctx context.Context) (int, error) {
	if s.Store == nil {
		return 0, fmt.Errorf("%w: Sweeper.Store: required", ErrInvalidConfig)
	}
	retention, batch := s.Store.Retention(), s.BatchSize
	if retention <= 0 {
		return 0, fmt.Errorf("%w: Sweeper.Store: %T reports a retention of %v", ErrInvalidConfig, s.Store, retention)
	}
	if batch <= 0 {
		batch = 5000
	}
	before := time.Now().Add(-retention)
	total := 0
	for {
		n, err := s.Store.DeleteExpired(ctx, before, batch)
		total += n
		if err != nil {
			return total, fmt.Errorf("idem: sweeping expired keys: %w", err)
		}
		if n < batch {
			return total, nil
		}
	}
}

// Run sweeps at once and then every Interval until ctx is done; it returns nil then.
// Errors are logged and the next sweep tries again.
func (s *Sweeper) Run(ctx context.Context) error {
	interval := s.Interval
	if interval <= 0 {
		interval = time.Minute
	}
	log := s.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		n, err := s.Sweep(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			log.LogAttrs(ctx, slog.LevelError, "idem: sweep failed", slog.Any("error", err))
		default:
			log.LogAttrs(ctx, slog.LevelDebug, "idem: swept expired keys", slog.Int("deleted", n))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
