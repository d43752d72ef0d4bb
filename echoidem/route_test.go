package echoidem_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/echoidem"
)

// TestEventsNameTheEchoRoute: metrics label by the route template, which core cannot see
// in an Echo app; the middleware hands it over, for a first request and for a replay.
func TestEventsNameTheEchoRoute(t *testing.T) {
	t.Parallel()
	var routes []string
	hooks := core.HookFunc(func(_ context.Context, ev core.Event) { routes = append(routes, ev.Route) })
	e := echo.New()
	e.Use(echoidem.NewWithConfig(echoidem.Config{Scope: func(echo.Context) string { return "acct" }, Config: core.Config{Store: memstore.New(), Hooks: hooks}}))
	e.PATCH("/v1/orders/:id", func(c echo.Context) error { return c.String(http.StatusOK, "patched") })
	for range 2 {
		req := httptest.NewRequest(http.MethodPatch, "/v1/orders/42", strings.NewReader(`{"note":"x"}`))
		req.Header.Set("Idempotency-Key", "k")
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		require.Equal(t, http.StatusOK, w.Code)
	}
	assert.Equal(t, []string{"/v1/orders/:id", "/v1/orders/:id", "/v1/orders/:id"}, routes, "claimed, completed, replayed")
}
