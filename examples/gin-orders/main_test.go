package main

import (
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem/examples/internal/demo"
	"github.com/idemkit/idem/examples/internal/demotest"
	"github.com/idemkit/idem/idemtest"
)

// The audit over the router's own route table: every unsafe route is guarded, and the
// published document lists every route.
func TestEveryUnsafeRouteIsGuardedAndPublished(t *testing.T) {
	demotest.AuditAndDocument(t, "gin-orders", func(app *demo.App) (http.Handler, []idemtest.Route) {
		r := router(app).(*gin.Engine)
		return r, idemtest.RoutesOf(r.Routes())
	})
}
