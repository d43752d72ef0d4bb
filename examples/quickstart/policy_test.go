package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/core/policy"
	"github.com/idemkit/idem/ginidem"
	"github.com/idemkit/idem/idemopenapi"
	"github.com/idemkit/idem/idemtest"
)

// The README's "Publishing your idempotency policy", run: the route's policy from the
// Config its middleware is built from, added to the API's OpenAPI document and served,
// and the audit of the app's unsafe routes.
func TestPublishingThePolicy(t *testing.T) {
	gin.SetMode(gin.TestMode)
	store := memstore.New()
	var logins, orders int
	login, createOrder := counting(&logins), counting(&orders)
	auth := func(c *gin.Context) { c.Set("account", c.GetHeader("X-Account-ID")) }
	r := gin.New()

	// snippet:begin policy
	// Your API's OpenAPI 3 document (kin-openapi), built in code as here, or loaded from
	// your openapi.yaml with openapi3.NewLoader().LoadFromFile: it must have the operation.
	doc := &openapi3.T{OpenAPI: "3.0.3", Info: &openapi3.Info{Title: "Shop", Version: "1"}, Paths: openapi3.NewPaths()}
	create := openapi3.NewOperation()
	create.Responses = openapi3.NewResponses(openapi3.WithStatus(201, &openapi3.ResponseRef{Value: openapi3.NewResponse().WithDescription("Created")}))
	doc.AddOperation("/v1/orders", http.MethodPost, create)

	eng, err := core.New(core.Config{Store: store}) // the engine's policy comes from its configuration
	if err != nil {
		t.Fatal(err)
	}
	v1 := r.Group("/v1", auth)
	v1.POST("/orders", ginidem.New(eng, ginidem.Config{Scope: func(c *gin.Context) string { return c.GetString("account") }}), createOrder)
	r.POST("/login", login) // unsafe, and deliberately not keyed

	orderPolicy := eng.Policy()                                        // key, scope, retention (the store's), fingerprint, answers
	orderPolicy.Scope = "the account named by the X-Account-ID header" // what only you know
	md := orderPolicy.Markdown("POST /v1/orders")                      // the endpoint's written record

	err = idemopenapi.Add(doc, map[string]policy.Policy{"POST /v1/orders": orderPolicy})
	if err != nil {
		t.Fatal(err)
	}
	r.GET("/openapi.json", func(c *gin.Context) { c.JSON(http.StatusOK, doc) })
	// snippet:end policy

	require.NoError(t, doc.Validate(t.Context()))
	assert.Contains(t, md, "### Idempotency for POST /v1/orders")
	assert.Contains(t, md, "the account named by the X-Account-ID header")

	// snippet:begin audit
	idemtest.Audit(t, idemtest.AuditTarget{
		Handler:  r,
		Routes:   idemtest.RoutesOf(r.Routes()), // echo: idemtest.RoutesOf(e.Routes())
		Header:   http.Header{"X-Account-ID": {"acme"}},
		Allow:    []string{"POST /login"},
		Policies: map[string]policy.Policy{"POST /v1/orders": orderPolicy}, // their records in the report
	})
	// snippet:end audit
	assert.Equal(t, 0, orders, "the audit's request without a key did not run the guarded route")
	assert.Equal(t, 1, logins, "the allowed route ran")

	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi.json", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.True(t, json.Valid(rec.Body.Bytes()))
	assert.Contains(t, rec.Body.String(), `"name":"Idempotency-Key"`)
	assert.Contains(t, rec.Body.String(), `"retention_seconds":86400`)
}
