package main

import (
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

// The README's note on Echo: route-level middleware runs in the order listed, so
// authentication is listed before idem (or mounted on the group), as the scope comes
// from it. Listed the other way round, idem sees no account: 500 misconfigured for
// every request, where the right order answers 401 to a caller without an account.
func TestEchoRunsRouteMiddlewareInTheOrderListed(t *testing.T) {
	eng, err := core.New(core.Config{Store: memstore.New()})
	require.NoError(t, err)
	auth := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			account := c.Request().Header.Get("X-Account-ID")
			if account == "" {
				return c.NoContent(http.StatusUnauthorized)
			}
			c.Set("account", account)
			return next(c)
		}
	}
	createOrder := func(c echo.Context) error { return c.String(http.StatusCreated, "created") }
	e := echo.New()
	// snippet:begin echo-order
	idem := echoidem.New(eng, echoidem.Config{Scope: func(c echo.Context) string {
		account, _ := c.Get("account").(string)
		return account
	}})
	e.POST("/v1/orders", createOrder, auth, idem) // auth runs first, then idem, then the handler
	// snippet:end echo-order
	e.POST("/v1/wrong", createOrder, idem, auth) // idem first: it sees no account

	send := func(path, account string) int {
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{}`))
		r.Header.Set("Idempotency-Key", "k1")
		if account != "" {
			r.Header.Set("X-Account-ID", account)
		}
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		return w.Code
	}
	assert.Equal(t, http.StatusCreated, send("/v1/orders", "alice"))
	assert.Equal(t, http.StatusUnauthorized, send("/v1/orders", ""))
	assert.Equal(t, http.StatusInternalServerError, send("/v1/wrong", "alice"), "idem before auth: no scope, fails closed")
}
