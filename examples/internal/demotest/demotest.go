// Package demotest holds the checks both example servers' own tests run on their routers.
package demotest

import (
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/examples/internal/demo"
	"github.com/idemkit/idem/idemopenapi"
	"github.com/idemkit/idem/idemtest"
)

// AuditAndDocument opens the demo named name on a fresh SQLite file, builds its router
// with router (which returns the handler and the router's own route table, adapted with
// idemtest.RoutesOf), and checks that the audit finds every unsafe route guarded, each
// with the record of its policy, and that the published OpenAPI document lists exactly
// the router's routes, so that an audit of the document's routes (as examples/e2e runs
// against the built server) sees them all.
func AuditAndDocument(t *testing.T, name string, router func(*demo.App) (http.Handler, []idemtest.Route)) {
	t.Helper()
	cfg, err := demo.ParseConfig(name, []string{"-db", "sqlite:" + filepath.Join(t.TempDir(), "orders.db")},
		func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	app, err := demo.Open(t.Context(), cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer app.Close()
	handler, routes := router(app)

	policies, err := app.Policies()
	require.NoError(t, err)
	rep := idemtest.Audit(t, idemtest.AuditTarget{Handler: handler, Routes: routes,
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
	for _, rt := range routes {
		routed = append(routed, rt.Method+" "+idemopenapi.PathTemplate(rt.Path))
	}
	slices.Sort(documented)
	slices.Sort(routed)
	assert.Equal(t, routed, documented, "the document lists exactly the router's routes")
}
