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
	"github.com/idemkit/idem/internal/adaptertest"
)

// TestEventsNameTheEchoRoute: metrics label by the route template, which core cannot see
// in an Echo app; the middleware hands it over, for a first request and for a replay.
func TestEventsNameTheEchoRoute(t *testing.T) {
	t.Parallel()
	var routes []string
	hooks := core.HookFunc(func(_ context.Context, ev core.Event) { routes = append(routes, ev.Route) })
	e := echo.New()
	e.Use(echoidem.New(adaptertest.Engine(core.Config{Store: memstore.New(), Hooks: hooks}), echoidem.Config{Scope: func(echo.Context) string { return "acct" }}))
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

// TestSecondMiddlewareIsMisconfigured: the middleware on a group and again on one of its
// routes is a 500 problem naming the route (not a 409 for ever, the key held by the
// first); the handler does not run and no key is kept.
func TestSecondMiddlewareIsMisconfigured(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	keyed := echoidem.New(adaptertest.Engine(core.Config{Store: store}), echoidem.Config{Scope: func(echo.Context) string { return "acct" }})
	runs := 0
	e := echo.New()
	api := e.Group("/api", keyed)
	api.POST("/orders", func(c echo.Context) error { runs++; return c.String(http.StatusCreated, "made") }, keyed)
	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/api/orders", strings.NewReader(`{"item":"book"}`))
		req.Header.Set("Idempotency-Key", "k")
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		require.Equal(t, http.StatusInternalServerError, w.Code, "body %s", w.Body)
		assert.Contains(t, w.Body.String(), string(core.ProblemMisconfigured))
		assert.Contains(t, w.Body.String(), "/api/orders", "the problem names the route")
	}
	assert.Zero(t, runs, "handler runs")
	assert.Zero(t, store.Len(), "keys kept")
}
