package main

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/ginidem"
	"github.com/idemkit/idem/idemtest"
)

// The README's two recipes for an app whose routes are not all keyed, run as tests.
// The regions between "snippet" markers are the README's text (internal/doccheck
// compares them).

// counting is a handler that counts its runs and answers 201.
func counting(runs *int) gin.HandlerFunc {
	return func(c *gin.Context) {
		*runs++
		c.JSON(http.StatusCreated, gin.H{"run": *runs})
	}
}

func post(r http.Handler, path, key string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, req)
	return rec
}

// TestRecipeSkipper: mounted on the whole app, the middleware keys every POST and PATCH;
// a Skipper on c.FullPath() (the route pattern, not the raw path) lets /login through.
func TestRecipeSkipper(t *testing.T) {
	gin.SetMode(gin.TestMode)
	store := memstore.New()
	var logins, orders int
	login, createOrder := counting(&logins), counting(&orders)
	r := gin.New()
	r.Use(func(c *gin.Context) { c.Set("account", "alice") }) // your auth

	// snippet:begin skipper
	eng, err := core.New(core.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	r.Use(ginidem.New(eng, ginidem.Config{
		Scope:   func(c *gin.Context) string { return c.GetString("account") },
		Skipper: func(c *gin.Context) bool { return c.FullPath() == "/login" },
	}))
	r.POST("/login", login)        // not keyed
	r.POST("/orders", createOrder) // keyed: 400 without an Idempotency-Key
	// snippet:end skipper

	assert.Equal(t, http.StatusCreated, post(r, "/login", "").Code)
	assert.Equal(t, http.StatusCreated, post(r, "/login", "").Code)
	assert.Equal(t, 2, logins, "/login runs every time, without a key")
	assert.Equal(t, http.StatusBadRequest, post(r, "/orders", "").Code)
	assert.Equal(t, http.StatusCreated, post(r, "/orders", "k1").Code)
	assert.Equal(t, "true", post(r, "/orders", "k1").Header().Get("Idempotent-Replayed"))
	assert.Equal(t, 1, orders)
}

// TestRecipeKeyOptional: mounted per route, one route can take a key without requiring
// one: with a key it runs once and replays; without one it runs every time.
func TestRecipeKeyOptional(t *testing.T) {
	gin.SetMode(gin.TestMode)
	store := memstore.New()
	var orders, carts int
	createOrder, addToCart := counting(&orders), counting(&carts)
	r := gin.New()
	auth := func(c *gin.Context) { c.Set("account", "alice") }

	// snippet:begin optional
	// Whether a key is required is part of an engine's contract: the optional route gets
	// an engine of its own, on the same store.
	eng, err := core.New(core.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	optionalEng, err := core.New(core.Config{Store: store, KeyOptional: true})
	if err != nil {
		t.Fatal(err)
	}
	scope := ginidem.Config{Scope: func(c *gin.Context) string { return c.GetString("account") }}
	required := ginidem.New(eng, scope)
	optional := ginidem.New(optionalEng, scope)

	v1 := r.Group("/v1", auth)
	v1.POST("/orders", required, createOrder) // 400 without a key
	v1.POST("/carts", optional, addToCart)    // a key is honoured when sent
	// snippet:end optional

	assert.Equal(t, http.StatusBadRequest, post(r, "/v1/orders", "").Code)
	assert.Equal(t, 0, orders)
	assert.Equal(t, http.StatusCreated, post(r, "/v1/carts", "").Code)
	assert.Equal(t, http.StatusCreated, post(r, "/v1/carts", "").Code)
	assert.Equal(t, 2, carts, "without a key the route runs every time")
	assert.Equal(t, http.StatusCreated, post(r, "/v1/carts", "c1").Code)
	assert.Equal(t, "true", post(r, "/v1/carts", "c1").Header().Get("Idempotent-Replayed"))
	assert.Equal(t, 3, carts, "with a key it runs once")
}

// TestRoutesWithIdemtest: the README's "Testing your routes" snippet, run on a Gin app
// whose order handler counts its side effect.
func TestRoutesWithIdemtest(t *testing.T) {
	gin.SetMode(gin.TestMode)
	var mu sync.Mutex
	orders := 0
	router := gin.New()
	router.Use(func(c *gin.Context) { c.Set("account", c.GetHeader("X-Account-ID")) }) // your auth
	eng, err := core.New(core.Config{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	v1 := router.Group("/v1", ginidem.New(eng, ginidem.Config{
		Scope: func(c *gin.Context) string { return c.GetString("account") },
	}))
	v1.POST("/orders", func(c *gin.Context) {
		mu.Lock()
		orders++
		n := orders
		mu.Unlock()
		c.Header("Location", "/v1/orders/"+strconv.Itoa(n))
		c.JSON(http.StatusCreated, gin.H{"id": n})
	})
	countOrders := func(*testing.T) int { mu.Lock(); defer mu.Unlock(); return orders }

	// snippet:begin idemtest
	idemtest.Check(t, idemtest.Target{Handler: router, Path: "/v1/orders",
		Header: http.Header{"X-Account-ID": {"acme"}}, Body: func(int) []byte { return []byte(`{"item":"book"}`) },
		SideEffects: func() int { return countOrders(t) }})
	// snippet:end idemtest
}
