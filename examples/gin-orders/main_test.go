package main

import (
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/examples/internal/demo"
	"github.com/idemkit/idem/idemopenapi"
	"github.com/idemkit/idem/idemtest"
)

// The audit over the router's own route table: every unsafe route is guarded, and the
// published document lists every route, so that an audit of the document's routes (as
// examples/e2e runs against the built server) sees them all.
func TestEveryUnsafeRouteIsGuardedAndPublished(t *testing.T) {
	cfg, err := demo.ParseConfig("gin-orders", []string{"-db", "sqlite:" + filepath.Join(t.TempDir(), "orders.db")},
		func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	app, err := demo.Open(t.Context(), cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer app.Close()
	r := router(app).(*gin.Engine)

	policies, err := app.Policies()
	require.NoError(t, err)
	rep := idemtest.Audit(t, idemtest.AuditTarget{Handler: r, Routes: idemtest.RoutesOf(r.Routes()),
		Header: http.Header{demo.AccountHeader: {"alice"}}, Policies: policies})
	assert.Equal(t, 3, rep.Count(idemtest.Guarded))
	for _, ra := range rep.Routes {
		assert.NotNil(t, ra.Policy, "%s: the record of its policy", ra.Route)
	}

	doc, err := app.OpenAPI(t.Context())
	require.NoError(t, err)
	var documented, routed []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+path)
		}
	}
	for _, rt := range idemtest.RoutesOf(r.Routes()) {
		routed = append(routed, rt.Method+" "+idemopenapi.PathTemplate(rt.Path))
	}
	slices.Sort(documented)
	slices.Sort(routed)
	assert.Equal(t, routed, documented, "the document lists exactly the router's routes")
}
