package ginidem_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/ginidem"
)

// A POST route that creates an order once per Idempotency-Key: the retry gets the first
// answer again, marked Idempotent-Replayed, and the handler does not run a second time.
func ExampleNew() {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(gin.Recovery())
	r.Use(func(c *gin.Context) { c.Set("account", c.GetHeader("X-Account")) }) // your auth

	orders := 0
	api := r.Group("/api", ginidem.New(ginidem.Config{
		Scope:  func(c *gin.Context) string { return c.GetString("account") },
		Config: core.Config{Store: memstore.New()}, // pgxstore or gormstore in production
	}))
	api.POST("/orders", func(c *gin.Context) {
		orders++
		c.Header("Location", fmt.Sprintf("/api/orders/%d", orders))
		c.JSON(http.StatusCreated, gin.H{"id": orders})
	})

	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/api/orders", strings.NewReader(`{"item":"book"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "8e0f5b3c-order-1")
		req.Header.Set("X-Account", "acme")
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("Location"), rec.Header().Get("Idempotent-Replayed"), rec.Body.String())
	}
	fmt.Println("orders created:", orders)
	// Output:
	// 201 /api/orders/1  {"id":1}
	// 201 /api/orders/1 true {"id":1}
	// orders created: 1
}

// Without a key the request is refused with an RFC 9457 problem.
func ExampleNew_missingKey() {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.POST("/orders", ginidem.New(ginidem.Config{
		Scope:  func(*gin.Context) string { return "single-tenant" },
		Config: core.Config{Store: memstore.New()},
	}), func(c *gin.Context) { c.Status(http.StatusCreated) })

	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/orders", nil))
	fmt.Println(rec.Code, rec.Header().Get("Content-Type"))
	fmt.Println(rec.Body.String())
	// Output:
	// 400 application/problem+json
	// {"type":"https://github.com/idemkit/idem/blob/main/docs/problems.md#key-missing","title":"Idempotency key missing","status":400,"detail":"POST /orders requires an Idempotency-Key header."}
}

// The error-returning form, for configuration read at run time.
func ExampleConfig_ToMiddleware() {
	cfg := ginidem.Config{
		Scope:  func(c *gin.Context) string { return c.GetString("tenant") },
		Config: core.Config{Store: memstore.New(), Methods: []string{http.MethodPost, http.MethodPut}},
	}
	h, err := cfg.ToMiddleware()
	fmt.Println(h != nil, err)

	cfg.Scope = nil
	_, err = cfg.ToMiddleware()
	fmt.Println(err)
	// Output:
	// true <nil>
	// ginidem: idem: invalid config: Scope: required (return a constant for a single-tenant API)
}
