package idemopenapi_test

import (
	"context"
	"fmt"
	"log"
	"maps"
	"slices"

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
