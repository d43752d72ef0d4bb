package main

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/idemkit/idem/examples/internal/demo"
	"github.com/idemkit/idem/examples/internal/demotest"
	"github.com/idemkit/idem/idemtest"
)

// The audit over the router's own route table: every unsafe route is guarded, and the
// published document lists every route.
func TestEveryUnsafeRouteIsGuardedAndPublished(t *testing.T) {
	demotest.AuditAndDocument(t, "echo-orders", func(app *demo.App) (http.Handler, []idemtest.Route) {
		r := router(app).(*echo.Echo)
		return r, idemtest.RoutesOf(r.Routes())
	})
}
