package main

// The CLI's one statement of its own: whether the key table exists, asked of the
// database's catalog. Everything on the key table itself goes through the stores
// (migrate, sweep; show through Store.Lookup, stats through storage.KeyCounter).

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// tableExists reports whether the key table is there (always true on Redis: it has none).
func (c *conn) tableExists(ctx context.Context) (bool, error) {
	var n int
	var err error
	switch c.url.dialect {
	case redisDB:
		return true, nil
	case postgres:
		err = c.db.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT to_regclass($1) AS t) r WHERE t IS NOT NULL`,
			pgx.Identifier(strings.Split(c.table, ".")).Sanitize()).Scan(&n)
	case mysqlDB:
		schema, name, qualified := strings.Cut(c.table, ".")
		if !qualified {
			schema, name = "", c.table
		}
		err = c.db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.tables
			WHERE table_schema = COALESCE(NULLIF(?, ''), DATABASE()) AND table_name = ?`, schema, name).Scan(&n)
	default:
		err = c.db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, c.table).Scan(&n)
	}
	if err != nil {
		return false, fmt.Errorf("looking for table %s: %w", c.table, err)
	}
	return n > 0, nil
}
