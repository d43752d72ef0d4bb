package gormstore_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/glebarez/sqlite"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/gormstore"
)

// Order is the example's business row.
type Order struct {
	ID     int64
	Amount int
}

// A handler behind the middleware writes through gormstore.MustDB(r.Context()): the order and
// the key's recorded response commit together, so a retry replays the response and never
// creates a second order. (SQLite here, so the example runs anywhere.)
func Example() {
	dir, err := os.MkdirTemp("", "gormstore-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := gorm.Open(sqlite.Open(filepath.Join(dir, "app.db")+"?_pragma=journal_mode(WAL)"),
		&gorm.Config{Logger: logger.Discard})
	if err != nil {
		log.Fatal(err)
	}
	store := gormstore.New(db)
	if err := store.Migrate(context.Background()); err != nil {
		log.Fatal(err)
	}
	if err := db.AutoMigrate(&Order{}); err != nil {
		log.Fatal(err)
	}

	createOrder := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		order := Order{Amount: 42}
		if err := gormstore.MustDB(r.Context()).Create(&order).Error; err != nil {
			http.Error(w, "could not create the order", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", order.ID))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, order.ID)
	})
	eng, err := core.New(core.Config{Store: store})
	if err != nil {
		log.Fatal(err)
	}
	handler := eng.Middleware(func(r *http.Request) string { return r.Header.Get("X-Account") })(createOrder)

	for range 2 {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"amount":42}`))
		r.Header.Set("Idempotency-Key", "3f2b9c1e-order-1")
		r.Header.Set("X-Account", "acme")
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("Location"), w.Header().Get("Idempotent-Replayed"), w.Body)
	}
	var orders int64
	db.Model(&Order{}).Count(&orders)
	fmt.Println("orders:", orders)
	// Output:
	// 201 /orders/1  {"id":1}
	// 201 /orders/1 true {"id":1}
	// orders: 1
}

// Code that reaches its transaction with gormstore.MustDB also runs inside a transaction the
// caller already has, such as a background job's.
func ExampleWithTx() {
	dir, err := os.MkdirTemp("", "gormstore-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := gorm.Open(sqlite.Open(filepath.Join(dir, "app.db")), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		log.Fatal(err)
	}
	if err := db.AutoMigrate(&Order{}); err != nil {
		log.Fatal(err)
	}
	createOrder := func(ctx context.Context, amount int) error {
		return gormstore.MustDB(ctx).Create(&Order{Amount: amount}).Error
	}

	err = db.Transaction(func(tx *gorm.DB) error {
		return createOrder(gormstore.WithTx(context.Background(), tx), 7)
	})
	fmt.Println("created:", err == nil)

	_, ok := gormstore.DBFromContext(context.Background())
	fmt.Println("a transaction outside a request:", ok)
	// Output:
	// created: true
	// a transaction outside a request: false
}

// On PostgreSQL and MySQL/MariaDB the store takes the application's *gorm.DB as is. The
// MySQL DSN keeps clientFoundRows at its default (false).
func ExampleNew() {
	ctx := context.Background()
	pg, err := gorm.Open(postgres.Open(os.Getenv("DATABASE_URL")), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	pgStore := gormstore.New(pg, gormstore.WithTable("idem.keys"))
	if err := pgStore.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	my, err := gorm.Open(mysql.Open("app:secret@tcp(127.0.0.1:3306)/shop?parseTime=true"), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	myStore := gormstore.New(my, gormstore.WithRetention(48*time.Hour))
	if err := myStore.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	eng, err := core.New(core.Config{Store: myStore})
	if err != nil {
		log.Fatal(err)
	}
	_ = eng.Middleware(func(r *http.Request) string { return r.Header.Get("X-Account") })
}

// Schema is the table's DDL for the store's dialect, with the configured name: what
// Migrate runs on a database without the table, ready for a migration tool's file.
func ExampleStore_Schema() {
	dir, err := os.MkdirTemp("", "gormstore-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := gorm.Open(sqlite.Open(filepath.Join(dir, "app.db")), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		log.Fatal(err)
	}
	store := gormstore.New(db, gormstore.WithTable("idem_keys"))
	fmt.Print(store.Schema())

	// Migrate runs the same DDL, under a deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// CREATE TABLE IF NOT EXISTS `idem_keys` (
	//     scope text NOT NULL, idem_key text NOT NULL,
	//     request_hash blob NOT NULL, method text NOT NULL, path text NOT NULL,
	//     state text NOT NULL, recovery_point text NOT NULL,
	//     locked_until datetime, lease_token blob,
	//     response_code integer, response_headers blob, response_body blob,
	//     created_at datetime NOT NULL, completed_at datetime,
	//     request blob, completer_attempts integer NOT NULL DEFAULT 0, next_attempt datetime, released_at datetime,
	//     PRIMARY KEY (scope,idem_key));
	// CREATE INDEX IF NOT EXISTS `idem_keys_created_at_idx` ON `idem_keys` (created_at);
}
