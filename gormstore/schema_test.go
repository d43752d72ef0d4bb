package gormstore_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/internal/testdb"
)

// TestSchemaByHand: on each dialect a table made by hand from Schema() (the configured
// name, quoted) works with the store, and Migrate then runs no DDL at all.
func TestSchemaByHand(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db := d.open(t)
			ddl := &ddlLog{Interface: logger.Discard}
			table := testdb.Name("by_hand")
			store := gormstore.New(db.Session(&gorm.Session{Logger: ddl}), gormstore.WithTable(table))

			schema := store.Schema()
			assert.Contains(t, schema, "CREATE TABLE IF NOT EXISTS "+quote(db, table)+" (")
			assert.Contains(t, schema, quote(db, table+"_created_at_idx"))
			for _, stmt := range strings.SplitAfter(schema, ";\n") {
				if stmt = strings.TrimSpace(stmt); stmt != "" {
					require.NoError(t, db.Exec(stmt).Error, "by hand: %s", stmt)
				}
			}

			require.NoError(t, store.Migrate(t.Context()), "Migrate on a table made from Schema()")
			assert.Empty(t, ddl.statements(), "Migrate on a table made from Schema() must change nothing")
			roundTrip(t, store)
		})
	}
}

// TestReadmeSchema: the README repeats Schema() for each dialect, word for word.
func TestReadmeSchema(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	for _, d := range dialects {
		schema := gormstore.New(d.open(t)).Schema()
		assert.Contains(t, string(readme), "```sql\n"+schema+"```", "README.md does not repeat the %s Schema(); copy it over", d.name)
	}
}

// TestSchemaMatchesModel: the columns Schema() creates are those of the GORM model Migrate
// uses to add a missing column: same names, types, nullability and primary key.
func TestSchemaMatchesModel(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db := d.open(t)
			fromSchema := gormstore.New(db, gormstore.WithTable(testdb.Name("schema")))
			require.NoError(t, fromSchema.Migrate(t.Context()))
			fromModel := gormstore.New(db, gormstore.WithTable(testdb.Name("model")))
			require.NoError(t, fromModel.CreateFromModel(t.Context()))
			assert.Equal(t, columns(t, db, fromModel), columns(t, db, fromSchema))
		})
	}
}

// TestMigrateConcurrently: instances migrating at once all succeed, and make one table
// with its one index on created_at, which the store then uses.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			db := d.open(t)
			table := testdb.Name("raced")
			store := gormstore.New(db, gormstore.WithTable(table))
			var wg sync.WaitGroup
			errs := make([]error, 8)
			for i := range errs {
				wg.Go(func() { errs[i] = store.Migrate(t.Context()) })
			}
			wg.Wait()
			for i, err := range errs {
				assert.NoError(t, err, "Migrate %d", i)
			}
			indexes, err := db.Migrator().GetIndexes(table)
			require.NoError(t, err)
			var onCreatedAt []string
			for _, idx := range indexes {
				if cols := idx.Columns(); len(cols) == 1 && cols[0] == "created_at" {
					onCreatedAt = append(onCreatedAt, idx.Name())
				}
			}
			assert.Equal(t, []string{table + "_created_at_idx"}, onCreatedAt)
			roundTrip(t, store)
		})
	}
}

// roundTrip claims, completes and replays a key.
func roundTrip(t *testing.T, store *gormstore.Store) {
	t.Helper()
	c := claimFor("round-trip", "a", storage.ModeAtomic)
	lock := mustLock(t, store, c)
	require.NoError(t, lock.Complete(t.Context(), created))
	rec := mustRecord(t, store, c)
	require.NotNil(t, rec.Response, "the replay")
	assert.Equal(t, created.Status, rec.Response.Status)
	assert.Equal(t, created.Header, rec.Response.Header)
	assert.Equal(t, created.Body, rec.Response.Body)
}

// column is what TestSchemaMatchesModel compares of a column.
type column struct {
	Name, Type        string
	Nullable, Primary bool
}

// columns lists the store's table's columns, in table order.
func columns(t *testing.T, db *gorm.DB, store *gormstore.Store) []column {
	t.Helper()
	types, err := db.Migrator().ColumnTypes(table(t, store))
	require.NoError(t, err)
	var out []column
	for _, ct := range types {
		nullable, _ := ct.Nullable()
		primary, _ := ct.PrimaryKey()
		out = append(out, column{Name: ct.Name(), Type: strings.ToLower(ct.DatabaseTypeName()), Nullable: nullable, Primary: primary})
	}
	require.NotEmpty(t, out)
	return out
}

// table is the name in the store's Schema().
func table(t *testing.T, store *gormstore.Store) string {
	t.Helper()
	head, _, ok := strings.Cut(strings.TrimPrefix(store.Schema(), "CREATE TABLE IF NOT EXISTS "), " (")
	require.True(t, ok, "Schema() starts with CREATE TABLE IF NOT EXISTS")
	return strings.Trim(head, "`\"")
}

// quote is name quoted for db's dialect.
func quote(db *gorm.DB, name string) string {
	var b strings.Builder
	db.Dialector.QuoteTo(&b, name)
	return b.String()
}

// ddlLog records the DDL statements run through a *gorm.DB.
type ddlLog struct {
	logger.Interface
	mu  sync.Mutex
	ddl []string
}

func (l *ddlLog) LogMode(logger.LogLevel) logger.Interface { return l }

func (l *ddlLog) Trace(_ context.Context, _ time.Time, fc func() (string, int64), _ error) {
	q, _ := fc()
	switch strings.ToUpper(strings.Fields(q + " x")[0]) {
	case "CREATE", "ALTER", "DROP":
		l.mu.Lock()
		l.ddl = append(l.ddl, q)
		l.mu.Unlock()
	}
}

func (l *ddlLog) statements() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.ddl...)
}
