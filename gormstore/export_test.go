package gormstore

import "context"

// CreateFromModel creates the store's table from its GORM model (keyRow), as Migrate adds
// a missing column, so that a test can compare it with the table Schema makes.
func (s *Store) CreateFromModel(ctx context.Context) error {
	db := s.db.WithContext(ctx).Table(s.table)
	if s.dialect == mariadb {
		db = db.Set("gorm:table_options", "ENGINE=InnoDB")
	}
	return db.Migrator().CreateTable(&keyRow{})
}

// LockHash exposes lockHash to the external tests.
func (s *Store) LockHash(scope, key string) int64 { return s.lockHash(scope, key) }
