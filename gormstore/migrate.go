package gormstore

import (
	"context"
	"fmt"
	"strings"
)

// Migrate creates the key table and its index on created_at if they do not exist,
// from the store's GORM model (see the package documentation for the DDL it amounts to
// on each dialect). On an existing table it only adds missing columns: unlike a plain
// AutoMigrate it never alters a column, so a table made by hand (from pgxstore's
// schema.sql, say) keeps its types, defaults and checks. It is never called implicitly.
func (s *Store) Migrate(ctx context.Context) error {
	db := s.db.WithContext(ctx).Table(s.table)
	if s.dialect == mariadb {
		db = db.Set("gorm:table_options", "ENGINE=InnoDB")
	}
	m := db.Migrator()
	if !m.HasTable(s.table) {
		if err := m.CreateTable(&keyRow{}); err != nil && !m.HasTable(s.table) { // another instance may have won
			return fmt.Errorf("gormstore: migrate %s: %w", s.table, err)
		}
	} else {
		for _, column := range modelColumns {
			if !m.HasColumn(&keyRow{}, column) {
				if err := m.AddColumn(&keyRow{}, column); err != nil {
					return fmt.Errorf("gormstore: migrate %s: add column %s: %w", s.table, column, err)
				}
			}
		}
	}
	// The index on created_at, named as pgxstore names it, so that neither store adds a
	// second one to a table the other made.
	name := s.table[strings.LastIndexByte(s.table, '.')+1:] + "_created_at_idx"
	if m.HasIndex(s.table, name) {
		return nil
	}
	var q strings.Builder
	q.WriteString("CREATE INDEX ")
	if s.dialect != mariadb { // MySQL has no IF NOT EXISTS here
		q.WriteString("IF NOT EXISTS ")
	}
	s.db.Dialector.QuoteTo(&q, name)
	q.WriteString(" ON " + s.quoted + " (created_at)")
	if err := s.db.WithContext(ctx).Exec(q.String()).Error; err != nil && !m.HasIndex(s.table, name) {
		return fmt.Errorf("gormstore: migrate %s: index: %w", s.table, err)
	}
	return nil
}
