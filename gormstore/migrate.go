package gormstore

import (
	"context"
	"fmt"
	"strings"
)

// Migrate creates the key table and its index on created_at if they do not exist, by
// running Schema. On an existing table it only adds missing columns (with the types
// Schema gives them) and the index if it is missing: it never alters a column, so a table
// made by hand (from Schema, or from pgxstore's schema.sql) keeps its types, defaults and
// checks, and on a table made from Schema it changes nothing. Several instances may run it
// at once. It is never called implicitly.
func (s *Store) Migrate(ctx context.Context) error {
	db := s.db.WithContext(ctx)
	m := db.Table(s.table).Migrator()
	if !m.HasTable(s.table) {
		for _, stmt := range s.statements() {
			if err := db.Exec(stmt).Error; err != nil && !m.HasTable(s.table) { // another instance may have won
				return fmt.Errorf("gormstore: migrate %s: %w", s.table, err)
			}
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
	name := s.indexName()
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
	if err := db.Exec(q.String()).Error; err != nil && !m.HasIndex(s.table, name) {
		return fmt.Errorf("gormstore: migrate %s: index: %w", s.table, err)
	}
	return nil
}
