package echoidem_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/echoidem"
	"github.com/idemkit/idem/internal/adaptertest"
	"github.com/idemkit/idem/internal/storekit"
)

// The tests in this file run an Echo handler that inserts an order through the transaction
// the request context carries, on real stores: pgxstore on PostgreSQL, gormstore on
// PostgreSQL and on SQLite. Each test gets a schema or file of its own, holding the key
// table (idempotency_keys, the stores' default) and the business table orders.

func newShop(t *testing.T, b *storekit.Backend, fail storekit.Failure) *storekit.Shop {
	t.Helper()
	s := &storekit.Shop{Backend: b}
	e := newEcho()
	e.Use(middleware.Recover())
	e.Use(echoidem.New(adaptertest.Engine(core.Config{Store: b.Store}), echoidem.Config{
		Scope: func(echo.Context) string { return "tenant" },
	}))
	e.POST("/orders", func(c echo.Context) error {
		run := s.Runs.Add(1)
		ctx := c.Request().Context()
		id, err := b.Insert(ctx, core.MustOperation(ctx).Key())
		if err != nil {
			return err
		}
		s.Inserted.Add(1)
		if run == 1 {
			switch fail {
			case storekit.Fail500:
				return errors.New("payment provider down")
			case storekit.Panic:
				panic("after the insert")
			}
		}
		return c.JSON(http.StatusCreated, map[string]int64{"id": id, "run": run})
	})
	s.Handler = e
	return s
}

// TestStores runs storekit's handler tests on this adapter: the handler's insert through
// the request's transaction commits with the key, on pgxstore and gormstore.
func TestStores(t *testing.T) {
	t.Parallel()
	storekit.RunHandlerTests(t, newShop)
}
