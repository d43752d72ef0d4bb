package ginidem_test

import (
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/ginidem"
	"github.com/idemkit/idem/internal/adaptertest"
)

func benchHandler(c *gin.Context) {
	c.Header("Location", "/v1/orders/1")
	c.Data(http.StatusCreated, "application/json", adaptertest.BenchResponse)
}

func BenchmarkGin(b *testing.B) {
	bare := gin.New()
	bare.POST("/v1/orders", benchHandler)
	idem := gin.New()
	idem.POST("/v1/orders", ginidem.New(adaptertest.Engine(core.Config{Store: memstore.New()}), ginidem.Config{
		Scope: func(*gin.Context) string { return "acct" },
	}), benchHandler)
	adaptertest.Bench(b, bare, idem)
}
