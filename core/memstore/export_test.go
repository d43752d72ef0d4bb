package memstore

// NewColliding returns a Store that keeps only the bits of mask of its keys' hashes, so
// that tests can make keys share a hash (and a shard): with a small mask, most keys go to
// the shards' spill maps.
func NewColliding(mask uint64, opts ...Option) *Store {
	s := New(opts...)
	s.mask = mask
	return s
}
