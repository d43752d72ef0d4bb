package echoidem_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/echoidem"
	"github.com/idemkit/idem/internal/adaptertest"
)

func benchHandler(c echo.Context) error {
	c.Response().Header().Set("Location", "/v1/orders/1")
	return c.Blob(http.StatusCreated, "application/json", adaptertest.BenchResponse)
}

func BenchmarkEcho(b *testing.B) {
	bare := echo.New()
	bare.POST("/v1/orders", benchHandler)
	idem := echo.New()
	idem.POST("/v1/orders", benchHandler, echoidem.New(adaptertest.Engine(core.Config{Store: memstore.New()}), echoidem.Config{Scope: func(echo.Context) string { return "acct" }}))
	adaptertest.Bench(b, bare, idem)
}
