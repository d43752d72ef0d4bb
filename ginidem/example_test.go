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

	// One engine for the application, shared by every keyed route.
	eng, err := core.New(core.Config{Store: memstore.New()}) // pgxstore or gormstore in production
	if err != nil {
		panic(err)
	}
	orders := 0
	api := r.Group("/api", ginidem.New(eng, ginidem.Config{
		Scope: func(c *gin.Context) string { return c.GetString("account") },
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
	eng, err := core.New(core.Config{Store: memstore.New()})
	if err != nil {
		panic(err)
	}
	r.POST("/orders", ginidem.New(eng, ginidem.Config{
		Scope: func(*gin.Context) string { return "single-tenant" },
	}), func(c *gin.Context) { c.Status(http.StatusCreated) })

	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/orders", nil))
	fmt.Println(rec.Code, rec.Header().Get("Content-Type"))
	fmt.Println(rec.Body.String())
	// Output:
	// 400 application/problem+json
	// {"type":"https://github.com/idemkit/idem/blob/main/docs/problems.md#key-missing","title":"Idempotency key missing","status":400,"detail":"POST /orders requires an Idempotency-Key header."}
}

// An invalid configuration is core.New's error, naming the field.
func ExampleNew_invalidConfig() {
	_, err := core.New(core.Config{Store: memstore.New(), Methods: []string{"post"}})
	fmt.Println(err)
	// Output:
	// idem: invalid config: Methods: "post" would never match a request (methods are case-sensitive): write "POST"
}
