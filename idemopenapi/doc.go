// Package idemopenapi publishes idem's idempotency contract in an OpenAPI 3 document:
// one call adds to each keyed operation what a client, and an SDK generator deciding
// what it may retry, needs to know.
//
//	orders := eng.Policy() // the engine given to ginidem, echoidem or Middleware
//	err := idemopenapi.Add(doc, map[string]policy.Policy{"POST /v1/orders": orders})
//
// For each operation named ("METHOD /path", the path as the document has it or as a
// Gin, Echo or ServeMux route spells it: "/v1/orders/:id" is "/v1/orders/{id}"), Add
// adds:
//
//   - the key's header parameter (Idempotency-Key, or the delivery header of a webhook
//     receiver), required or not as the policy says, a string of MinLength–MaxLength
//     (1–255) characters, its description stating the format, the scope and the
//     retention; a key taken from the JSON body is described in the operation's
//     description instead, as OpenAPI has no parameter for it;
//   - the Idempotent-Replayed header on each response the operation documents whose
//     status is stored (a replay carries it), but 401: authentication answers it before
//     the key is looked at, since the key's scope is the caller it names;
//   - a response per status of idem's problems (400, 409, 410, 413, 422, 500, 503), as RFC
//     9457 application/problem+json with the schema IdempotencyProblem, an example per
//     problem kind, a description linking each kind's documentation (the problem's type
//     URI, docs/problems.md by default), and Retry-After where idem sends it. A status
//     the operation already documents keeps its description and content; the problems are
//     added to them;
//   - the policy itself, as JSON, in the operation's extension x-idempotency.
//
// Add is idempotent: calling it again replaces what it added. A response the operation
// gives by $ref is left as it is, since other operations share it.
//
// # Why kin-openapi
//
// The document model is github.com/getkin/kin-openapi's openapi3.T: the OpenAPI 3
// model most Go projects already hold their documents in (oapi-codegen, the common Go
// generator, reads and writes it; kin-openapi's own openapi3filter validates requests
// against it), it reads and writes JSON and YAML, and T.Validate checks a document
// against the specification, which this package's tests run on everything it writes. It
// is a dependency of this package only: core, the adapters and the stores do not import
// it (a test of core says so).
package idemopenapi
