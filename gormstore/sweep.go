package gormstore

import (
	"context"
	"database/sql"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idem/core/storage"
)

// DeleteExpired implements storage.Store.DeleteExpired by primary key, oldest first, never
// touching a started key whose lease is live nor, on PostgreSQL and MySQL/MariaDB, a row
// another transaction holds (FOR UPDATE SKIP LOCKED; MySQL 8.0+/MariaDB 10.6+). The cut-off
// is the caller's time; lease liveness is judged by the database's clock.
func (s *Store) DeleteExpired(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	nowSQL, nowArgs := s.nowSQL(s.clock())
	where := "created_at < ? AND (state = ? OR locked_until IS NULL OR locked_until < " + nowSQL + ")"
	whereArgs := append([]any{s.timeArg(before), string(storage.StateCompleted)}, nowArgs...)
	pick := "SELECT scope, idem_key FROM " + s.quoted + " WHERE " + where + " ORDER BY created_at LIMIT ?"

	if s.dialect != mariadb {
		// One statement: MySQL cannot take a LIMIT in an IN subquery on the table it deletes
		// from, the others can.
		if s.dialect == postgres {
			pick += " FOR UPDATE SKIP LOCKED"
		}
		res := s.db.WithContext(ctx).Exec("DELETE FROM "+s.quoted+" WHERE (scope, idem_key) IN ("+pick+")", append(whereArgs, limit)...)
		if res.Error != nil {
			return 0, wrap(ctx, "delete expired", res.Error)
		}
		return int(res.RowsAffected), nil
	}

	// MySQL/MariaDB: lock a batch, then delete it, at READ COMMITTED so that no gap lock
	// holds up a concurrent claim.
	var n int64
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		rows, err := tx.Raw(pick+" FOR UPDATE SKIP LOCKED", append(whereArgs, limit)...).Rows()
		if err != nil {
			return err
		}
		var keys [][]any
		for rows.Next() {
			var scope, key []byte
			if err := rows.Scan(&scope, &key); err != nil {
				rows.Close()
				return err
			}
			keys = append(keys, []any{scope, key})
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if len(keys) == 0 {
			return nil
		}
		res := tx.Exec("DELETE FROM "+s.quoted+" WHERE (scope, idem_key) IN ? AND "+where, append([]any{keys}, whereArgs...)...)
		n = res.RowsAffected
		return res.Error
	}, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, wrap(ctx, "delete expired", err)
	}
	return int(n), nil
}
