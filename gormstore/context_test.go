package gormstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idem/gormstore"
)

// TestDBWithoutTransaction: outside a keyed request DB panics with a message naming the
// way out, DBFromContext reports false, and neither falls back to a plain database.
func TestDBWithoutTransaction(t *testing.T) {
	t.Parallel()
	if db, ok := gormstore.DBFromContext(t.Context()); ok || db != nil {
		t.Fatalf("DBFromContext = %v, %t; want nil, false", db, ok)
	}
	defer func() {
		p := recover()
		msg := fmt.Sprint(p)
		if p == nil || !strings.Contains(msg, gormstore.ErrNoTx.Error()) || !strings.Contains(msg, "DBFromContext") {
			t.Fatalf("DB panicked with %q, want a message naming ErrNoTx and DBFromContext", msg)
		}
	}()
	gormstore.MustDB(t.Context())
}

// TestWithTx: code written against gormstore.MustDB runs in a transaction the caller already
// has, and commits or rolls back with it.
func TestWithTx(t *testing.T) {
	t.Parallel()
	db := withOrders(t, openSQLite(t))
	createOrder := func(ctx context.Context, ref string) error {
		return gormstore.MustDB(ctx).Create(&order{Ref: ref}).Error
	}
	errAbort := errors.New("abort")
	err := db.Transaction(func(tx *gorm.DB) error {
		if err := createOrder(gormstore.WithTx(t.Context(), tx), "rolled-back"); err != nil {
			return err
		}
		return errAbort
	})
	if !errors.Is(err, errAbort) {
		t.Fatalf("transaction: %v", err)
	}
	err = db.Transaction(func(tx *gorm.DB) error {
		return createOrder(gormstore.WithTx(t.Context(), tx), "committed")
	})
	if err != nil {
		t.Fatalf("transaction: %v", err)
	}
	if r, c := countOrders(t, db, "rolled-back"), countOrders(t, db, "committed"); r != 0 || c != 1 {
		t.Fatalf("%d rolled-back and %d committed orders, want 0 and 1", r, c)
	}

	defer func() {
		if recover() == nil {
			t.Fatal("WithTx(ctx, nil) did not panic")
		}
	}()
	gormstore.WithTx(t.Context(), nil)
}
