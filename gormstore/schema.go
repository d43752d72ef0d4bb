package gormstore

import (
	"strings"
)

// The key table's DDL per dialect, with {table} and {index} for the quoted names. The
// column types are keyRow's (model.go), which Migrate uses only to add a missing column
// to an existing table; TestSchemaMatchesModel holds the two together.
const (
	postgresSchema = `CREATE TABLE IF NOT EXISTS {table} (
    scope text NOT NULL, idem_key text NOT NULL,
    request_hash bytea NOT NULL, method text NOT NULL, path text NOT NULL,
    state text NOT NULL, recovery_point text NOT NULL,
    locked_until timestamptz(6), lease_token uuid,
    response_code integer, response_headers bytea, response_body bytea,
    created_at timestamptz(6) NOT NULL, completed_at timestamptz(6),
    request bytea, completer_attempts integer NOT NULL DEFAULT 0, next_attempt timestamptz(6), released_at timestamptz(6),
    PRIMARY KEY (scope, idem_key));
CREATE INDEX IF NOT EXISTS {index} ON {table} (created_at);
`
	// MySQL has no CREATE INDEX IF NOT EXISTS: the index is part of the table.
	mysqlSchema = `CREATE TABLE IF NOT EXISTS {table} (
    scope varbinary(255) NOT NULL, idem_key varbinary(255) NOT NULL,
    request_hash longblob NOT NULL, method longtext NOT NULL, path longtext NOT NULL,
    state longtext NOT NULL, recovery_point longtext NOT NULL,
    locked_until datetime(6) NULL, lease_token varbinary(16),
    response_code int, response_headers longblob, response_body longblob,
    created_at datetime(6) NOT NULL, completed_at datetime(6) NULL,
    request longblob, completer_attempts int NOT NULL DEFAULT 0, next_attempt datetime(6) NULL,
    released_at datetime(6) NULL,
    PRIMARY KEY (scope, idem_key),
    INDEX {index} (created_at)) ENGINE=InnoDB;
`
	// No space in the primary key's column list: the SQLite driver's Migrator reads the
	// key from this text and misses idem_key after one.
	sqliteSchema = `CREATE TABLE IF NOT EXISTS {table} (
    scope text NOT NULL, idem_key text NOT NULL,
    request_hash blob NOT NULL, method text NOT NULL, path text NOT NULL,
    state text NOT NULL, recovery_point text NOT NULL,
    locked_until datetime, lease_token blob,
    response_code integer, response_headers blob, response_body blob,
    created_at datetime NOT NULL, completed_at datetime,
    request blob, completer_attempts integer NOT NULL DEFAULT 0, next_attempt datetime, released_at datetime,
    PRIMARY KEY (scope,idem_key));
CREATE INDEX IF NOT EXISTS {index} ON {table} (created_at);
`
)

// Schema returns the DDL of the store's table for its dialect, with the configured table
// name (WithTable): what Migrate runs on a database without the table. Each statement
// ends with ";" and a newline, and each is idempotent (IF NOT EXISTS), so the text can go
// into a migration tool's file as it is, and Migrate then finds nothing to do.
func (s *Store) Schema() string {
	ddl := sqliteSchema
	switch s.dialect {
	case postgres:
		ddl = postgresSchema
	case mariadb:
		ddl = mysqlSchema
	}
	var index strings.Builder
	s.db.Dialector.QuoteTo(&index, s.indexName())
	return strings.NewReplacer("{table}", s.quoted, "{index}", index.String()).Replace(ddl)
}

// indexName is the name of the index on created_at, as pgxstore names it, so that
// neither store adds a second one to a table the other made.
func (s *Store) indexName() string {
	return s.table[strings.LastIndexByte(s.table, '.')+1:] + "_created_at_idx"
}

// statements splits Schema into its statements, for drivers that run one per Exec.
func (s *Store) statements() []string {
	var out []string
	for _, stmt := range strings.SplitAfter(s.Schema(), ";\n") {
		if stmt = strings.TrimSpace(stmt); stmt != "" {
			out = append(out, strings.TrimSuffix(stmt, ";"))
		}
	}
	return out
}
