package idemopenapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"maps"
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/core/policy"
	"github.com/idemkit/idem/idemopenapi"
)

// Publish a keyed route's policy in the API's OpenAPI document.
func ExampleAdd() {
	doc := &openapi3.T{OpenAPI: "3.0.3", Info: &openapi3.Info{Title: "Shop", Version: "1"}, Paths: openapi3.NewPaths()}
	create := openapi3.NewOperation()
	create.Responses = openapi3.NewResponses(openapi3.WithStatus(201, &openapi3.ResponseRef{Value: openapi3.NewResponse().WithDescription("Created")}))
	doc.AddOperation("/v1/orders", "POST", create)

	eng, err := core.New(core.Config{Store: memstore.New()}) // the engine the route's middleware runs
	if err != nil {
		log.Fatal(err)
	}
	if err := idemopenapi.Add(doc, map[string]policy.Policy{"POST /v1/orders": eng.Policy()}); err != nil {
		log.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		log.Fatal(err)
	}

	key := create.Parameters[0].Value
	fmt.Println(key.In, key.Name, key.Required, key.Schema.Value.MinLength, *key.Schema.Value.MaxLength)
	for _, code := range slices.Sorted(maps.Keys(create.Responses.Map())) {
		fmt.Println(code, slices.Sorted(maps.Keys(create.Responses.Value(code).Value.Headers)))
	}
	// Output:
	// header Idempotency-Key true 1 255
	// 201 [Idempotent-Replayed]
	// 400 []
	// 408 []
	// 409 [Retry-After]
	// 410 []
	// 413 []
	// 422 []
	// 500 []
	// 503 [Retry-After]
}

// Publish the policy in the document you already keep as a file (openapi.yaml), and
// serve the result.
func ExampleAdd_existingDocument() {
	// snippet:begin load
	spec := []byte(`
openapi: 3.0.3
info: {title: Shop, version: "1"}
paths:
  /v1/orders:
    post:
      responses:
        "201": {description: Created}
`) // or: spec, err := os.ReadFile("openapi.yaml")
	doc, err := openapi3.NewLoader().LoadFromData(spec)
	if err != nil {
		log.Fatal(err)
	}
	eng, err := core.New(core.Config{Store: memstore.New()}) // the engine POST /v1/orders runs
	if err != nil {
		log.Fatal(err)
	}
	if err := idemopenapi.Add(doc, map[string]policy.Policy{"POST /v1/orders": eng.Policy()}); err != nil {
		log.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		log.Fatal(err)
	}
	published, err := json.Marshal(doc) // what GET /openapi.json answers
	if err != nil {
		log.Fatal(err)
	}
	// snippet:end load

	fmt.Println(strings.Contains(string(published), `"x-idempotency"`), doc.Paths.Value("/v1/orders").Post.Parameters[0].Value.Name)
	// Output:
	// true Idempotency-Key
}
