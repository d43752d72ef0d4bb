package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/policy"
	"github.com/idemkit/idem/idemopenapi"
)

// OpenAPIPath is where both servers serve the API's OpenAPI document, without an account.
const OpenAPIPath = "/openapi.json"

// Policies returns the idempotency policy of each keyed route, by "METHOD /path", read
// from the configuration each route's middleware is built from (so from its store too:
// the retention, and the mode), with what the engine cannot know filled in: the scope,
// the downstream keys, the tests.
func (a *App) Policies() (map[string]policy.Policy, error) {
	scope := "the account named by the " + AccountHeader + " header"
	routes := []struct {
		route      string
		eng        *core.Engine
		downstream []string
		tests      []string
	}{
		{"POST /v1/orders", a.OrdersIdem(), nil,
			[]string{"examples/e2e/contract_test.go: replay, 409, 422 and 400 on both servers and every store"}},
		{"POST /v1/payments", a.PaymentsIdem(), []string{"the payment provider's charge, with the key `<Idempotency-Key>:charge` (Operation.DerivedKey)"},
			[]string{"examples/e2e/contract_test.go", "examples/e2e/crash_test.go: a crash after a phase resumes with one charge"}},
		{"POST /v1/webhooks/provider", a.WebhooksIdem(), nil,
			[]string{"examples/e2e/webhooks_test.go: a redelivered event is applied once"}},
	}
	policies := make(map[string]policy.Policy, len(routes))
	for _, r := range routes {
		p := r.eng.Policy()
		p.Scope, p.Downstream, p.Tests = scope, r.downstream, r.tests
		policies[r.route] = p
	}
	return policies, nil
}

// OpenAPI returns the API's OpenAPI 3 document: every route, and on the keyed ones the
// idempotency contract (idemopenapi.Add), validated.
func (a *App) OpenAPI(ctx context.Context) (*openapi3.T, error) {
	doc := apiDocument()
	policies, err := a.Policies()
	if err != nil {
		return nil, err
	}
	if err := idemopenapi.Add(doc, policies); err != nil {
		return nil, err
	}
	if err := doc.Validate(ctx); err != nil {
		return nil, fmt.Errorf("the OpenAPI document is invalid: %w", err)
	}
	return doc, nil
}

// ServeOpenAPI answers GET /openapi.json with the document OpenAPI built at Open.
func (a *App) ServeOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(a.openapi)
}

// openAPIJSON builds the document once, at Open.
func (a *App) openAPIJSON(ctx context.Context) ([]byte, error) {
	doc, err := a.OpenAPI(ctx)
	if err != nil {
		return nil, err
	}
	return json.Marshal(doc)
}

// apiDocument is the API without its idempotency contract: the routes of
// examples/README.md, their bodies and their own answers.
func apiDocument() *openapi3.T {
	str := openapi3.NewStringSchema
	// Integers go up to maxSafeInt: past it the fingerprint no longer tells two apart.
	integer := func(min float64) *openapi3.Schema { return openapi3.NewInt64Schema().WithMin(min).WithMax(maxSafeInt) }
	object := func(props map[string]*openapi3.Schema) *openapi3.Schema {
		s := openapi3.NewObjectSchema().WithProperties(props)
		for name := range props {
			s.Required = append(s.Required, name)
		}
		slices.Sort(s.Required)
		return s
	}
	schemas := openapi3.Schemas{
		"Order": {Value: object(map[string]*openapi3.Schema{"id": str(), "item": str(), "quantity": integer(1),
			"created_at": str().WithFormat("date-time")})},
		"Payment": {Value: object(map[string]*openapi3.Schema{"id": str(), "amount_cents": integer(1), "currency": str(),
			"charge_id": str(), "created_at": str().WithFormat("date-time")})},
		"Charge": {Value: object(map[string]*openapi3.Schema{"id": str(), "idempotency_key": str(), "amount_cents": integer(1)})},
		"Event": {Value: object(map[string]*openapi3.Schema{"seq": str(), "id": str(), "type": str(),
			"received_at": str().WithFormat("date-time")})},
		"Problem": {Value: object(map[string]*openapi3.Schema{"type": str().WithFormat("uri"), "title": str(),
			"status": openapi3.NewIntegerSchema(), "detail": str()})},
	}
	// On PostgreSQL GET /v1/payments/{id} says where the payment's receipt is (receipts.go).
	receipt := openapi3.NewStringSchema().WithEnum("queued", "sent")
	receipt.Description = "GET /v1/payments/{id} on PostgreSQL: the receipt email, a River job, is queued or sent"
	schemas["Payment"].Value.Properties["receipt"] = openapi3.NewSchemaRef("", receipt)
	ref := func(name string) *openapi3.SchemaRef {
		return openapi3.NewSchemaRef("#/components/schemas/"+name, schemas[name].Value)
	}
	doc := &openapi3.T{
		OpenAPI: "3.0.3",
		Info: &openapi3.Info{Title: "idem demo: orders and payments", Version: "1",
			Description: "The example servers' API (examples/README.md). Its POST routes are safe to retry with an idempotency key."},
		Paths: openapi3.NewPaths(),
		Components: &openapi3.Components{
			Schemas: schemas,
			SecuritySchemes: openapi3.SecuritySchemes{
				"account": {Value: openapi3.NewSecurityScheme().WithType("apiKey").WithIn("header").WithName(AccountHeader).
					WithDescription("The caller's account: a stand-in for authentication. Idempotency keys are scoped by it.")},
			},
		},
		Security: openapi3.SecurityRequirements{{"account": {}}},
	}

	body := func(s *openapi3.Schema) *openapi3.RequestBodyRef {
		return &openapi3.RequestBodyRef{Value: openapi3.NewRequestBody().WithRequired(true).WithJSONSchema(s)}
	}
	// op is an operation answering ok with okSchema (and a Location when created), 401
	// and the demo's problems of the statuses listed.
	op := func(summary string, req *openapi3.RequestBodyRef, ok int, okSchema *openapi3.SchemaRef, problems ...int) *openapi3.Operation {
		o := openapi3.NewOperation()
		o.Summary, o.RequestBody = summary, req
		r := openapi3.NewResponse().WithDescription(http.StatusText(ok)).WithContent(openapi3.NewContentWithJSONSchemaRef(okSchema))
		if ok == http.StatusCreated {
			r.Headers = openapi3.Headers{"Location": {Value: &openapi3.Header{Parameter: openapi3.Parameter{
				Description: "The created resource.", Schema: str().NewRef()}}}}
		}
		o.Responses = openapi3.NewResponses(openapi3.WithStatus(ok, &openapi3.ResponseRef{Value: r}))
		for _, status := range append([]int{http.StatusUnauthorized}, problems...) {
			r := openapi3.NewResponse().WithDescription(demoProblems[status]).
				WithContent(openapi3.Content{"application/problem+json": openapi3.NewMediaType().WithSchemaRef(ref("Problem"))})
			if status == http.StatusUnauthorized {
				r.Headers = openapi3.Headers{"WWW-Authenticate": {Value: &openapi3.Header{Parameter: openapi3.Parameter{
					Description: "The header that names the caller: `" + AccountHeader + "`.",
					Schema:      str().WithEnum(AccountHeader).NewRef()}}}}
			}
			o.Responses.Set(strconv.Itoa(status), &openapi3.ResponseRef{Value: r})
		}
		return o
	}
	withID := func(o *openapi3.Operation) *openapi3.Operation {
		o.Parameters = openapi3.Parameters{{Value: openapi3.NewPathParameter("id").WithSchema(str())}}
		return o
	}
	listOf := func(name, item string) *openapi3.SchemaRef {
		return object(map[string]*openapi3.Schema{name: openapi3.NewArraySchema()}).WithPropertyRef(name,
			&openapi3.SchemaRef{Value: &openapi3.Schema{Type: &openapi3.Types{openapi3.TypeArray}, Items: ref(item)}}).NewRef()
	}

	orderIn := object(map[string]*openapi3.Schema{"item": str().WithMinLength(1), "quantity": integer(1)})
	paymentIn := object(map[string]*openapi3.Schema{"amount_cents": integer(1), "currency": str().WithPattern("^[A-Za-z]{3}$")})
	eventIn := object(map[string]*openapi3.Schema{"id": str(), "type": str()}).WithProperty("data", openapi3.NewObjectSchema())

	doc.AddOperation("/v1/orders", http.MethodPost, op("Create an order (atomic: the order and the key commit together)",
		body(orderIn), http.StatusCreated, ref("Order"), 400, 500, 503))
	doc.AddOperation("/v1/orders", http.MethodGet, op("The caller's orders, oldest first", nil, http.StatusOK, listOf("orders", "Order"), 500))
	doc.AddOperation("/v1/orders/{id}", http.MethodGet, withID(op("One order", nil, http.StatusOK, ref("Order"), 404, 500)))
	doc.AddOperation("/v1/payments", http.MethodPost, op("Pay (phased: the provider's charge, then the payment)",
		body(paymentIn), http.StatusCreated, ref("Payment"), 400, 500, 502, 503))
	doc.AddOperation("/v1/payments", http.MethodGet, op("The caller's payments, oldest first", nil, http.StatusOK, listOf("payments", "Payment"), 500))
	doc.AddOperation("/v1/payments/{id}", http.MethodGet, withID(op("One payment", nil, http.StatusOK, ref("Payment"), 404, 500)))
	doc.AddOperation("/v1/provider/charges", http.MethodGet, op("What the fake provider charged the caller", nil, http.StatusOK, listOf("charges", "Charge"), 500))
	doc.AddOperation("/v1/webhooks/provider", http.MethodPost, op("Receive a provider's event: its id is the idempotency key",
		body(eventIn), http.StatusOK, ref("Event"), 400, 500, 503))
	doc.AddOperation("/v1/webhooks/provider/events", http.MethodGet, op("The events applied, one entry per application", nil, http.StatusOK, listOf("events", "Event"), 500))

	self := openapi3.NewOperation()
	self.Summary, self.Security = "This document (no account needed)", &openapi3.SecurityRequirements{}
	self.Responses = openapi3.NewResponses(openapi3.WithStatus(http.StatusOK, &openapi3.ResponseRef{Value: openapi3.NewResponse().
		WithDescription("The OpenAPI 3 document").WithContent(openapi3.NewContentWithJSONSchema(openapi3.NewObjectSchema()))}))
	doc.AddOperation(OpenAPIPath, http.MethodGet, self)
	return doc
}

// demoProblems describes the demo's own problems by status (examples/README.md#problems).
var demoProblems = map[int]string{
	http.StatusBadRequest:          "[invalid-request](" + ProblemInvalidRequest + "): the body is not what the route takes. Recorded and replayed like a success.",
	http.StatusUnauthorized:        "[unauthenticated](" + ProblemUnauthenticated + "): no " + AccountHeader + " header, two, or not an account ID (1 to 64 characters of printable ASCII).",
	http.StatusNotFound:            "[not-found](" + ProblemNotFound + "): no such resource in the caller's account.",
	http.StatusInternalServerError: "[internal](" + ProblemInternal + "): the server failed; nothing was kept and the key was released.",
	http.StatusBadGateway:          "[provider-failed](" + ProblemProvider + "): the provider refused the charge; the key was released.",
	http.StatusServiceUnavailable:  "[unavailable](" + ProblemUnavailable + "): the database was busy; nothing was kept. Retry with the same key.",
}
