package gormstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storetest"
	"github.com/idemkit/idem/gormstore"
)

// TestConformance runs core/storetest on each dialect at the database's default
// isolation (READ COMMITTED on PostgreSQL, REPEATABLE READ on MariaDB).
//
// SQLite runs it in phased mode only: the suite's atomic ScopeIsolation case holds two
// atomic locks from one goroutine, and SQLite has a single writer, so the second claim
// waits for the first lock's transaction until its lock wait runs out. Atomic mode on
// SQLite is covered by TestAtomic and TestMiddleware instead.
func TestConformance(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			newStore := d.newStores(t)
			if d.name == "sqlite" {
				storetest.Run(t, func(t *testing.T) core.Store { return phasedOnly{newStore(t).(*gormstore.Store)} })
				return
			}
			storetest.Run(t, newStore)
		})
	}
}

// TestConformanceIsolation runs core/storetest on PostgreSQL at REPEATABLE READ, where
// twins meet serialization failures: the path distributed PostgreSQL engines take.
func TestConformanceIsolation(t *testing.T) {
	t.Run("postgres/"+sql.LevelRepeatableRead.String(), func(t *testing.T) {
		t.Parallel()
		storetest.Run(t, dialects[0].newStores(t, gormstore.WithIsolation(sql.LevelRepeatableRead)))
	})
}

// phasedOnly hides atomic mode, for the suite on SQLite (see TestConformance).
type phasedOnly struct{ *gormstore.Store }

func (phasedOnly) SupportsAtomic() bool { return false }

func (p phasedOnly) Claim(ctx context.Context, c core.Claim) (core.Lock, *core.Record, error) {
	if c.Mode != core.ModePhased {
		return nil, nil, fmt.Errorf("phasedOnly: %w", core.ErrUnsupportedMode)
	}
	return p.Store.Claim(ctx, c)
}
