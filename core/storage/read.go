package storage

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound is returned, wrapped, by Store.Lookup for a key no record holds.
var ErrNotFound = errors.New("idem: no record of this key")

// KeyCounter is implemented by a store that can count its keys, for operators' tools
// (the idem command's stats). Every store of this module implements it.
type KeyCounter interface {
	// CountKeys counts every key the store holds, at one instant of its clock, measuring
	// retention with the store's Retention(). It reads the whole table (or key space):
	// an operator's query, not one for a request path.
	CountKeys(ctx context.Context) (*KeyCounts, error)
}

// KeyCounts is what KeyCounter.CountKeys reports.
type KeyCounts struct {
	// Started and Completed count the keys in each state.
	Started, Completed int
	// Live counts the started keys whose lease has not ended at Now: requests in flight.
	// The other started keys are resumable: a retry takes them over.
	Live int
	// Expired counts the keys created more than the store's retention before Now: claims
	// treat those without a live lease as absent, and the sweeper (or the store's own
	// expiry) removes them. ExpiredLive counts those of them that hold a live lease: they
	// are kept until it ends.
	Expired, ExpiredLive int
	// Oldest is the key created first, with its Scope, Key, State and CreatedAt set; nil
	// when the store holds no key.
	Oldest *Record
	// Now is the store's clock when it counted.
	Now time.Time
}
