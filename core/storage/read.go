package storage

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound is returned, wrapped, by Lookuper.Lookup for a key no record holds. Only
// operators' tools meet it: the engine never looks a key up, so core does not re-export it.
var ErrNotFound = errors.New("idem: no record of this key")

// Lookuper is implemented by a store that can read one key without claiming it, for
// operators' tools (the idem command's show) and tests. Every store of this module
// implements it.
type Lookuper interface {
	// Lookup returns the record of key in scope as the store holds it, expired or not
	// (a record past retention that the sweeper or the store's own expiry has not
	// removed yet is returned), and the store's clock at the read: the now that Decide
	// measures the record's lease and age against (the database's or the Redis
	// server's clock where the store's leases run on it). A completed record carries its
	// Response. No record: an error wrapping ErrNotFound. It changes nothing, takes no
	// lock and does not wait for a transaction in flight (an atomic request's key is
	// not visible before it commits).
	Lookup(ctx context.Context, scope, key string) (rec *Record, now time.Time, err error)
}

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
