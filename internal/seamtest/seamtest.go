// Package seamtest helps tests that call a storage.Store directly. Test support only.
package seamtest

import "github.com/idemkit/idem/core/storage"

// Split returns a claim's lock and record as separate values, with its error, for tests
// that check the one they expect: lock, rec, err := seamtest.Split(store.Claim(ctx, c)).
func Split(c storage.Claimed, err error) (storage.Lock, *storage.Record, error) {
	return c.Lock, c.Record, err
}
