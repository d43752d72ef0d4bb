package gormstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/gormstore"
)

// TestSQLTx: the *sql.Tx under the request's transaction (MustDB) is that transaction: a
// statement sent on it commits with the request or rolls back with it, on every dialect
// (PostgreSQL, where MustDB's pool refuses Commit; MySQL and SQLite, where the store's
// guard sits in between too). A *gorm.DB that is no transaction has none (ErrNotSQLTx),
// and one carrying an error returns it.
func TestSQLTx(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			st, db := d.newStores(t)(t)
			withOrders(t, db)
			eng, err := core.New(core.Config{Store: st})
			require.NoError(t, err)
			insert := `INSERT INTO orders (ref, amount) VALUES (?, 1)`
			if d.name == "postgres" {
				insert = `INSERT INTO orders (ref, amount) VALUES ($1, 1)`
			}
			errAbort := errors.New("abort")
			for _, c := range []struct {
				ref  string
				fail error
				want int64
			}{{"sqltx-rolled-back", errAbort, 0}, {"sqltx-committed", nil, 1}} {
				_, _, err := eng.Do(t.Context(), "scope", c.ref, nil, func(ctx context.Context) ([]byte, error) {
					tx, err := gormstore.SQLTx(gormstore.MustDB(ctx))
					if err != nil {
						return nil, err
					}
					if _, err := tx.ExecContext(ctx, insert, c.ref); err != nil {
						return nil, err
					}
					return nil, c.fail
				})
				if c.fail != nil {
					require.ErrorIs(t, err, c.fail)
				} else {
					require.NoError(t, err)
				}
				assert.Equal(t, c.want, countOrders(t, db, c.ref), c.ref)
			}

			err = db.Transaction(func(tx *gorm.DB) error {
				sqlTx, err := gormstore.SQLTx(gormstore.MustDB(gormstore.WithTx(t.Context(), tx)))
				require.NoError(t, err, "a transaction set with WithTx")
				_, err = sqlTx.ExecContext(t.Context(), insert, "sqltx-withtx")
				return err
			})
			require.NoError(t, err)
			assert.Equal(t, int64(1), countOrders(t, db, "sqltx-withtx"))

			_, err = gormstore.SQLTx(db)
			assert.ErrorIs(t, err, gormstore.ErrNotSQLTx, "the database itself")
			failed := db.Session(&gorm.Session{})
			_ = failed.AddError(errAbort)
			_, err = gormstore.SQLTx(failed)
			assert.ErrorIs(t, err, errAbort, "a *gorm.DB carrying an error")
		})
	}
}
