package ginidem_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/ginidem"
	"github.com/idemkit/idem/internal/adaptertest"
	"github.com/idemkit/idem/internal/storekit"
)

// The tests in this file run a Gin handler that inserts an order through the transaction
// the request context carries, on real stores: pgxstore on PostgreSQL, gormstore on
// PostgreSQL and on SQLite. Each test gets a schema or file of its own, holding the key
// table (idempotency_keys, the stores' default) and the business table orders.

func newShop(t *testing.T, b *storekit.Backend, fail storekit.Failure) *storekit.Shop {
	t.Helper()
	s := &storekit.Shop{Backend: b}
	r := gin.New()
	r.Use(gin.RecoveryWithWriter(io.Discard)) // gin.Recovery(), quiet
	r.Use(ginidem.New(adaptertest.Engine(core.Config{Store: b.Store}), ginidem.Config{
		Scope: func(*gin.Context) string { return "tenant" },
	}))
	r.POST("/orders", func(c *gin.Context) {
		run := s.Runs.Add(1)
		ctx := c.Request.Context()
		id, err := b.Insert(ctx, core.MustOperation(ctx).Key())
		if err != nil {
			c.AbortWithStatusJSON(http.StatusInternalServerError, gin.H{"error": err.Error()})
			return
		}
		s.Inserted.Add(1)
		if run == 1 {
			switch fail {
			case storekit.Fail500:
				c.AbortWithStatusJSON(http.StatusInternalServerError, gin.H{"error": "payment provider down"})
				return
			case storekit.Panic:
				panic("after the insert")
			}
		}
		c.JSON(http.StatusCreated, gin.H{"id": id, "run": run})
	})
	s.Handler = r
	return s
}

// TestStores runs storekit's handler tests on this adapter: the handler's insert through
// the request's transaction commits with the key, on pgxstore and gormstore.
func TestStores(t *testing.T) {
	t.Parallel()
	storekit.RunHandlerTests(t, newShop)
}
