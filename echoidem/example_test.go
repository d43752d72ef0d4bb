package echoidem_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/echoidem"
)

// A POST route that creates an order once per Idempotency-Key and caller: the retry gets
// the first answer again, marked Idempotent-Replayed, and the handler does not run a
// second time.
func ExampleNew() {
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc { // your auth
		return func(c echo.Context) error {
			c.Set("account", c.Request().Header.Get("X-Account"))
			return next(c)
		}
	})

	// One engine for the application, shared by every keyed route.
	eng, err := core.New(core.Config{Store: memstore.New()}) // pgxstore or gormstore in production
	if err != nil {
		panic(err)
	}
	orders := 0
	api := e.Group("/api", echoidem.New(eng, echoidem.Config{
		Scope: func(c echo.Context) string { s, _ := c.Get("account").(string); return s },
	}))
	api.POST("/orders", func(c echo.Context) error {
		orders++
		c.Response().Header().Set("Location", fmt.Sprintf("/api/orders/%d", orders))
		return c.JSON(http.StatusCreated, map[string]int{"id": orders})
	})

	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/api/orders", strings.NewReader(`{"item":"book"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "8e0f5b3c-order-1")
		req.Header.Set("X-Account", "acme")
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		fmt.Print(rec.Code, " ", rec.Header().Get("Location"), " ", rec.Header().Get("Idempotent-Replayed"), " ", rec.Body.String())
	}
	fmt.Println("orders created:", orders)
	// Output:
	// 201 /api/orders/1  {"id":1}
	// 201 /api/orders/1 true {"id":1}
	// orders created: 1
}

// A handler's returned error is rendered by Echo's error handler while the response is
// held: a 4xx is recorded and replayed, a 5xx releases the key so a retry runs again.
func ExampleNew_errors() {
	eng, err := core.New(core.Config{Store: memstore.New()})
	if err != nil {
		panic(err)
	}
	e := echo.New()
	// Each caller's keys live under its account (what authentication put in the context).
	e.Use(echoidem.New(eng, echoidem.Config{Scope: func(c echo.Context) string { return c.Request().Header.Get("X-Account") }}))
	runs := 0
	e.POST("/transfers", func(c echo.Context) error {
		runs++
		if runs == 1 {
			return echo.NewHTTPError(http.StatusServiceUnavailable, "ledger down")
		}
		return echo.NewHTTPError(http.StatusBadRequest, "insufficient funds")
	})

	for range 3 {
		req := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(`{"amount":100}`))
		req.Header.Set("X-Account", "acme")
		req.Header.Set("Idempotency-Key", `"transfer-42"`) // an RFC 8941 string works too
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		fmt.Print(rec.Code, " ", rec.Header().Get("Idempotent-Replayed"), " ", rec.Body.String())
	}
	fmt.Println("runs:", runs)
	// Output:
	// 503  {"message":"ledger down"}
	// 400  {"message":"insufficient funds"}
	// 400 true {"message":"insufficient funds"}
	// runs: 2
}

// A full configuration, Echo style: Skipper first, then the scope; the engine's options
// are core.Config's, and an invalid one is core.New's error, naming the field.
func ExampleConfig() {
	eng, err := core.New(core.Config{
		Store:   memstore.New(),
		Methods: []string{http.MethodPost, http.MethodPatch, http.MethodPut},
	})
	fmt.Println(err)
	mw := echoidem.New(eng, echoidem.Config{
		Skipper: func(c echo.Context) bool { return strings.HasPrefix(c.Path(), "/webhooks/") },
		Scope:   func(c echo.Context) string { return c.Request().Header.Get("X-Tenant") },
	})
	fmt.Println(mw != nil)

	_, err = core.New(core.Config{})
	fmt.Println(err)
	// Output:
	// <nil>
	// true
	// idem: invalid config: Store: required
}
