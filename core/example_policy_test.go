package core_test

import (
	"encoding/json"
	"fmt"
	"log"
	"strings"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
)

// The policy of the routes an engine guards, read from its configuration and store: as
// data, as JSON and as the endpoint's written record in Markdown.
func ExampleEngine_Policy() {
	eng, err := core.New(core.Config{Store: memstore.New()}) // the engine given to ginidem, echoidem or Middleware
	if err != nil {
		log.Fatal(err)
	}
	p := eng.Policy()
	p.Scope = "the account named by the X-Account-ID header" // the engine cannot know it

	fmt.Println(p.Key.In, p.Key.Name, p.Key.Required, p.Key.MinLength, p.Key.MaxLength, p.Retention, p.Mode)
	for _, a := range p.Answers {
		switch a.Name {
		case "replay", "in-progress", "key-reused", "key-missing":
			fmt.Println(a.Name, a.Status, a.Headers)
		}
	}

	b, err := json.Marshal(p)
	if err != nil {
		log.Fatal(err)
	}
	var doc map[string]any
	_ = json.Unmarshal(b, &doc)
	fmt.Println(doc["retention_seconds"], doc["mode"], doc["stored_statuses"])

	record := strings.Split(p.Markdown("POST /v1/orders"), "\n")
	fmt.Println(strings.Join(record[:2], "\n"))
	fmt.Println(record[4])
	// Output:
	// header Idempotency-Key true 1 255 24h0m0s phased
	// replay 0 [Idempotent-Replayed]
	// in-progress 409 [Retry-After]
	// key-reused 422 []
	// key-missing 400 []
	// 86400 phased 2xx, 3xx, 4xx (except 408, 409, 425, 429)
	// ### Idempotency for POST /v1/orders
	//
	// - **Scope and retention:** keys belong to the account named by the X-Account-ID header and never collide across scopes; a key is kept 24h (86400 seconds), then counts as absent and a retry runs again.
}
