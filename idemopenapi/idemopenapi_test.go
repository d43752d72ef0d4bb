package idemopenapi_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/core/policy"
	"github.com/idemkit/idem/idemopenapi"
)

// api is a small document: orders (201, and a 400 of the API's own), payments, an order
// by id (GET, not keyed) and a webhook receiver whose key is the event's id.
func api() *openapi3.T {
	doc := &openapi3.T{OpenAPI: "3.0.3", Info: &openapi3.Info{Title: "Shop", Version: "1"}, Paths: openapi3.NewPaths()}
	created := func() *openapi3.ResponseRef {
		return &openapi3.ResponseRef{Value: openapi3.NewResponse().WithDescription("Created").
			WithContent(openapi3.NewContentWithJSONSchema(openapi3.NewObjectSchema()))}
	}
	orders := openapi3.NewOperation()
	orders.Description = "Creates an order."
	orders.Responses = openapi3.NewResponses(openapi3.WithStatus(201, created()),
		openapi3.WithStatus(400, &openapi3.ResponseRef{Value: openapi3.NewResponse().WithDescription("The body is not an order.").
			WithContent(openapi3.NewContentWithJSONSchema(openapi3.NewObjectSchema()))}),
		openapi3.WithStatus(401, &openapi3.ResponseRef{Value: openapi3.NewResponse().WithDescription("Who are you?").
			WithContent(openapi3.NewContentWithJSONSchema(openapi3.NewObjectSchema()))}))
	doc.AddOperation("/v1/orders", "POST", orders)
	payments := openapi3.NewOperation()
	payments.Responses = openapi3.NewResponses(openapi3.WithStatus(201, created()))
	doc.AddOperation("/v1/payments", "POST", payments)
	get := openapi3.NewOperation()
	get.Parameters = openapi3.Parameters{{Value: openapi3.NewPathParameter("id").WithSchema(openapi3.NewStringSchema())}}
	get.Responses = openapi3.NewResponses(openapi3.WithStatus(200, created()))
	doc.AddOperation("/v1/orders/{id}", "GET", get)
	hook := openapi3.NewOperation()
	hook.Responses = openapi3.NewResponses(openapi3.WithStatus(200, created()))
	doc.AddOperation("/v1/webhooks", "POST", hook)
	return doc
}

func policyOf(t *testing.T, cfg core.Config) policy.Policy {
	t.Helper()
	if cfg.Store == nil {
		cfg.Store = memstore.New(memstore.WithRetention(24 * time.Hour))
	}
	eng, err := core.New(cfg)
	require.NoError(t, err)
	p := eng.Policy()
	p.Scope = "the account named by X-Account-ID"
	return p
}

func marshal(t *testing.T, doc *openapi3.T) string {
	t.Helper()
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	return string(b)
}

func header(t *testing.T, op *openapi3.Operation, name string) *openapi3.Parameter {
	t.Helper()
	for _, p := range op.Parameters {
		if p.Value.In == "header" && p.Value.Name == name {
			return p.Value
		}
	}
	return nil
}

func TestAddDocumentsEachKeyedOperation(t *testing.T) {
	doc := api()
	require.NoError(t, idemopenapi.Add(doc, map[string]policy.Policy{
		"POST /v1/orders":   policyOf(t, core.Config{}),
		"POST /v1/payments": policyOf(t, core.Config{LeaseWait: 2 * time.Second}),
		"POST /v1/webhooks": policyOf(t, core.Config{Key: core.KeyFromJSON("id")}),
	}))
	require.NoError(t, doc.Validate(t.Context()))

	orders := doc.Paths.Value("/v1/orders").Post
	key := header(t, orders, "Idempotency-Key")
	require.NotNil(t, key)
	assert.True(t, key.Required)
	assert.Equal(t, uint64(1), key.Schema.Value.MinLength)
	assert.Equal(t, uint64(255), *key.Schema.Value.MaxLength)
	assert.Contains(t, key.Description, "Within 24 hours (86400 seconds) of its first use")
	assert.Contains(t, key.Description, "the account named by X-Account-ID")
	assert.True(t, strings.HasPrefix(orders.Description, "Creates an order.\n\n**Idempotent** (phased mode)"), orders.Description)

	replayed := orders.Responses.Status(201).Value.Headers["Idempotent-Replayed"]
	require.NotNil(t, replayed, "a 201 may be a replay")
	assert.Equal(t, []any{"true"}, replayed.Value.Schema.Value.Enum)
	assert.NotNil(t, orders.Responses.Status(400).Value.Headers["Idempotent-Replayed"], "the API's own 400 is stored, so replayed")

	for status, kinds := range map[int][]string{409: {"in-progress"}, 422: {"key-reused"}, 413: {"body-too-large"},
		400: {"key-missing", "key-invalid", "body-unreadable"}, 503: {"store-unavailable", "collision", "not-recorded"}} {
		r := orders.Responses.Status(status)
		require.NotNil(t, r, "%d documented", status)
		mt := r.Value.Content["application/problem+json"]
		require.NotNil(t, mt, "%d as application/problem+json", status)
		assert.Equal(t, "#/components/schemas/"+idemopenapi.ProblemSchema, mt.Schema.Ref)
		for _, k := range kinds {
			assert.Contains(t, *r.Value.Description, "["+k+"]("+core.DefaultProblemBase+k+")", "%d links %s's documentation", status, k)
			require.Contains(t, mt.Examples, k)
			assert.Equal(t, status, mt.Examples[k].Value.Value.(map[string]any)["status"])
		}
		_, retry := r.Value.Headers["Retry-After"]
		assert.Equal(t, status == 409 || status == 503, retry, "%d: Retry-After", status)
		if status != 400 { // the API's own 400 is replayed; idem's problems never are
			assert.Nil(t, r.Value.Headers["Idempotent-Replayed"], "%d: idem's problems are never replayed", status)
		}
	}
	// authentication answers 401 before the key is looked at: never a replay
	assert.Nil(t, orders.Responses.Status(401).Value.Headers["Idempotent-Replayed"], "a 401 is not a replay")
	own := orders.Responses.Status(400).Value
	assert.True(t, strings.HasPrefix(*own.Description, "The body is not an order.\n\nIdempotency problems"), *own.Description)
	assert.NotNil(t, own.Content["application/json"], "the API's own content stays")

	ext, ok := orders.Extensions[idemopenapi.Extension].(map[string]any)
	require.True(t, ok)
	assert.Equal(t, float64(86400), ext["retention_seconds"])
	assert.Equal(t, "the account named by X-Account-ID", ext["scope"])

	hook := doc.Paths.Value("/v1/webhooks").Post
	assert.Nil(t, header(t, hook, "Idempotency-Key"), "the key is in the body")
	assert.Contains(t, hook.Description, "the JSON body's member `id`")
	assert.NotNil(t, hook.Responses.Status(422))

	get := doc.Paths.Value("/v1/orders/{id}").Get
	assert.Nil(t, get.Extensions[idemopenapi.Extension], "GET is not keyed")
	assert.Nil(t, get.Responses.Status(409))

	schema := doc.Components.Schemas[idemopenapi.ProblemSchema].Value
	assert.Equal(t, []string{"type", "title", "status", "detail"}, schema.Required)
	assert.Equal(t, "https://github.com/idemkit/idem/blob/main/docs/problems.md", schema.ExternalDocs.URL)
}

// The document survives JSON: what a server publishes loads and validates.
func TestAddedDocumentLoadsAndValidates(t *testing.T) {
	doc := api()
	require.NoError(t, idemopenapi.Add(doc, map[string]policy.Policy{"POST /v1/orders": policyOf(t, core.Config{})}))
	loaded, err := openapi3.NewLoader().LoadFromData([]byte(marshal(t, doc)))
	require.NoError(t, err)
	require.NoError(t, loaded.Validate(t.Context()))
	assert.NotNil(t, header(t, loaded.Paths.Value("/v1/orders").Post, "Idempotency-Key"))
}

func TestAddTwiceChangesNothing(t *testing.T) {
	doc := api()
	policies := map[string]policy.Policy{"POST /v1/orders": policyOf(t, core.Config{}), "POST /v1/webhooks": policyOf(t, core.Config{Key: core.KeyFromJSON("id")})}
	require.NoError(t, idemopenapi.Add(doc, policies))
	once := marshal(t, doc)
	require.NoError(t, idemopenapi.Add(doc, policies))
	assert.JSONEq(t, once, marshal(t, doc))
}

func TestOptionalKeyAndOtherHeader(t *testing.T) {
	doc := api()
	require.NoError(t, idemopenapi.Add(doc, map[string]policy.Policy{
		"POST /v1/orders":   policyOf(t, core.Config{KeyOptional: true, MinKeyLength: 16}),
		"POST /v1/webhooks": policyOf(t, core.Config{Key: core.KeyFromHeader("X-GitHub-Delivery")}),
	}))
	require.NoError(t, doc.Validate(t.Context()))
	key := header(t, doc.Paths.Value("/v1/orders").Post, "Idempotency-Key")
	require.NotNil(t, key)
	assert.False(t, key.Required)
	assert.Equal(t, uint64(16), key.Schema.Value.MinLength)
	assert.Contains(t, key.Description, "Optional")
	for _, k := range []string{"key-missing"} {
		assert.NotContains(t, *doc.Paths.Value("/v1/orders").Post.Responses.Status(400).Value.Description, "["+k+"]")
	}
	assert.NotNil(t, header(t, doc.Paths.Value("/v1/webhooks").Post, "X-GitHub-Delivery"))
}

func TestAddRefusesWhatTheDocumentLacks(t *testing.T) {
	for name, key := range map[string]string{
		"unknown path":   "POST /v1/refunds",
		"unknown method": "PUT /v1/orders",
		"no method":      "/v1/orders",
		"no path":        "POST",
	} {
		doc := api()
		before := marshal(t, doc)
		err := idemopenapi.Add(doc, map[string]policy.Policy{"POST /v1/payments": policyOf(t, core.Config{}), key: policyOf(t, core.Config{})})
		require.Error(t, err, name)
		assert.Equal(t, before, marshal(t, doc), "%s: nothing changed", name)
	}
	err := idemopenapi.Add(api(), map[string]policy.Policy{"POST /v1/refunds": policyOf(t, core.Config{})})
	assert.ErrorIs(t, err, idemopenapi.ErrNoOperation)
}

func TestRoutePatternsNameTheirOperation(t *testing.T) {
	doc := api()
	for route, want := range map[string]string{
		"/v1/orders/:id":          "/v1/orders/{id}",
		"/v1/orders/{id}":         "/v1/orders/{id}",
		"/files/*filepath":        "/files/{filepath}",
		"/files/{path...}":        "/files/{path}",
		"/v1/orders/{$}":          "/v1/orders/",
		"/v1/orders/:id/items/:n": "/v1/orders/{id}/items/{n}",
		"/v1/orders":              "/v1/orders",
	} {
		assert.Equal(t, want, idemopenapi.PathTemplate(route), route)
	}
	p := policyOf(t, core.Config{Methods: []string{"GET"}})
	require.NoError(t, idemopenapi.Add(doc, map[string]policy.Policy{"GET /v1/orders/:id": p}))
	assert.NotNil(t, doc.Paths.Value("/v1/orders/{id}").Get.Extensions[idemopenapi.Extension])
}

// core, the adapters, the stores and idemtest do not bring kin-openapi to their users.
func TestOnlyThisPackageImportsKinOpenAPI(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps",
		"github.com/idemkit/idem/core/...", "github.com/idemkit/idem/ginidem", "github.com/idemkit/idem/echoidem",
		"github.com/idemkit/idem/idemtest", "github.com/idemkit/idem/pgxstore", "github.com/idemkit/idem/gormstore",
		"github.com/idemkit/idem/redisstore").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "github.com/idemkit/idem/core\n", "go list lists the packages")
	assert.NotContains(t, string(out), "getkin", "kin-openapi is a dependency of idemopenapi only")
}
