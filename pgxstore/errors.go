package pgxstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem/core/storage"
	"github.com/jackc/pgx/v5/pgconn"
)

// SQLSTATEs the store maps to core's sentinel errors.
const (
	lockNotAvailable     = "55P03" // lock_timeout ran out
	queryCanceled        = "57014" // statement_timeout ran out (or a cancel request)
	serializationFailure = "40001"
	deadlockDetected     = "40P01"
	uniqueViolation      = "23505"
)

// classify wraps a database error for the caller: a lock wait that ran out during a
// claim wraps storage.ErrInProgress (the engine answers 409), a serialization failure or a
// deadlock wraps storage.ErrTransient (503 + Retry-After); errors already carrying a core
// sentinel pass through. The driver error stays in the chain for errors.As.
func classify(ctx context.Context, op string, err error, claim bool) error {
	if errors.Is(err, storage.ErrLeaseLost) || errors.Is(err, storage.ErrInProgress) || errors.Is(err, storage.ErrTransient) {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case lockNotAvailable:
			if claim {
				return fmt.Errorf("pgxstore: %s: a request with this key is in flight: %w: %w", op, storage.ErrInProgress, err)
			}
		case queryCanceled:
			// A cancel of our own context is the caller giving up, not a busy key.
			if claim && ctx.Err() == nil {
				return fmt.Errorf("pgxstore: %s: a request with this key is in flight: %w: %w", op, storage.ErrInProgress, err)
			}
		case serializationFailure, deadlockDetected:
			return fmt.Errorf("pgxstore: %s: rolled back: %w: %w", op, storage.ErrTransient, err)
		}
	}
	return fmt.Errorf("pgxstore: %s: %w", op, err)
}
