package pgxstore

// LockHash exposes lockHash to the external tests, which look the key's advisory lock up
// in pg_locks.
func (s *Store) LockHash(scope, key string) int64 { return s.lockHash(scope, key) }
