package gormstore_test

import (
	"context"
	"database/sql"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/internal/testdb"
)

// openMySQLStore is the README's "GORM on MySQL or MariaDB", as code the test below runs.
func openMySQLStore(ctx context.Context, dsn string) (*gorm.DB, *gormstore.Store, error) {
	// snippet:begin mysql
	// dsn is go-sql-driver's form, not a URL: "root@tcp(127.0.0.1:3306)/test?parseTime=true"
	// (user[:password]@tcp(host:port)/database?params). parseTime=true is for your own
	// models' time.Time fields; the store reads its times right with or without it.
	db, err := gorm.Open(mysql.Open(dsn), &gorm.Config{})
	if err != nil {
		return nil, nil, err
	}
	store := gormstore.New(db) // panics on clientFoundRows=true: the store counts the rows a claim affected
	if err := store.Migrate(ctx); err != nil {
		return nil, nil, err
	}
	// snippet:end mysql
	return db, store, nil
}

// TestMySQLAsTheREADMEOpensIt: GORM opened on MariaDB the way the README shows, with the
// DSN settings it names, keeps a keyed POST exactly once: the retry is a replay and one
// order exists.
func TestMySQLAsTheREADMEOpensIt(t *testing.T) {
	t.Parallel()
	dsn, _ := testdb.MySQLDatabase(t)
	require.Contains(t, dsn, "parseTime=true", "the README's DSN sets parseTime")
	db, store, err := openMySQLStore(t.Context(), dsn)
	require.NoError(t, err)
	sqlDB, err := db.DB()
	require.NoError(t, err)
	t.Cleanup(func() { _ = sqlDB.Close() })
	require.NoError(t, db.AutoMigrate(&Order{}))

	createOrder := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		order := Order{Amount: 42}
		if err := gormstore.MustDB(r.Context()).Create(&order).Error; err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Location", "/orders/"+strconv.FormatInt(order.ID, 10))
		w.WriteHeader(http.StatusCreated)
	})
	eng, err := core.New(core.Config{Store: store})
	require.NoError(t, err)
	handler := eng.Middleware(func(*http.Request) string { return "acme" })(createOrder)
	var answers []*httptest.ResponseRecorder
	for range 2 {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"amount":42}`))
		r.Header.Set("Idempotency-Key", "mysql-readme-1")
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		answers = append(answers, w)
	}
	require.Equal(t, http.StatusCreated, answers[0].Code, answers[0].Body.String())
	assert.Empty(t, answers[0].Header().Get("Idempotent-Replayed"))
	assert.Equal(t, http.StatusCreated, answers[1].Code)
	assert.Equal(t, "true", answers[1].Header().Get("Idempotent-Replayed"))
	assert.Equal(t, answers[0].Header().Get("Location"), answers[1].Header().Get("Location"))
	var orders int64
	require.NoError(t, db.Model(&Order{}).Count(&orders).Error)
	assert.Equal(t, int64(1), orders)
	var engine sql.NullString
	require.NoError(t, db.Raw("SELECT engine FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?",
		gormstore.DefaultTable).Scan(&engine).Error)
	assert.Equal(t, "InnoDB", engine.String, "Migrate made the key table")
}
