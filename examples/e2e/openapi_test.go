package e2e

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/idemkit/idem/idemtest"
)

// openAPI fetches GET /openapi.json (no account) and loads and validates it.
func (s *server) openAPI(t *testing.T) *openapi3.T {
	t.Helper()
	r := s.do(t, http.MethodGet, "/openapi.json", "")
	requireStatus(t, r, http.StatusOK)
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json", ct)
	}
	doc, err := openapi3.NewLoader().LoadFromData(r.Body)
	if err != nil {
		t.Fatalf("loading the document: %v", err)
	}
	if err := doc.Validate(t.Context()); err != nil {
		t.Fatalf("the published document is not valid OpenAPI: %v", err)
	}
	return doc
}

// testPublishedPolicy: GET /openapi.json is a valid OpenAPI 3 document whose keyed
// operations document the key (required, 1–255, with the store's retention), the replay
// header, and the 409 (with Retry-After) and 422 problems.
func testPublishedPolicy(t *testing.T, s *server) {
	doc := s.openAPI(t)
	for _, path := range []string{"/v1/orders", "/v1/payments", webhookPath} {
		item := doc.Paths.Value(path)
		if item == nil || item.Post == nil {
			t.Fatalf("POST %s is not in the document", path)
		}
		op := item.Post
		policy, ok := op.Extensions["x-idempotency"].(map[string]any)
		if !ok {
			t.Fatalf("POST %s: no x-idempotency policy", path)
		}
		if policy["retention_seconds"] != float64(86400) {
			t.Errorf("POST %s: retention_seconds %v, want 86400 (the stores' default)", path, policy["retention_seconds"])
		}
		key := op.Parameters.GetByInAndName("header", "Idempotency-Key")
		if path == webhookPath {
			if key != nil {
				t.Errorf("POST %s takes its key from the body, yet documents an Idempotency-Key header", path)
			}
			if !strings.Contains(op.Description, "member `id`") {
				t.Errorf("POST %s: the description does not say the key is the body's id: %q", path, op.Description)
			}
		} else {
			switch {
			case key == nil:
				t.Fatalf("POST %s: no Idempotency-Key header parameter", path)
			case !key.Required:
				t.Errorf("POST %s: Idempotency-Key is not required", path)
			case key.Schema.Value.MinLength != 1 || key.Schema.Value.MaxLength == nil || *key.Schema.Value.MaxLength != 255:
				t.Errorf("POST %s: Idempotency-Key length %d..%v, want 1..255", path, key.Schema.Value.MinLength, key.Schema.Value.MaxLength)
			case !strings.Contains(key.Description, "24 hours (86400 seconds)"):
				t.Errorf("POST %s: the key's description does not state the retention: %q", path, key.Description)
			}
		}
		ok2xx := op.Responses.Status(http.StatusCreated)
		if path == webhookPath {
			ok2xx = op.Responses.Status(http.StatusOK)
		}
		if ok2xx == nil || ok2xx.Value.Headers["Idempotent-Replayed"] == nil {
			t.Errorf("POST %s: the success response does not document Idempotent-Replayed", path)
		}
		for status, kind := range map[int]string{http.StatusConflict: "in-progress", http.StatusUnprocessableEntity: "key-reused", http.StatusBadRequest: "key-missing"} {
			r := op.Responses.Status(status)
			switch {
			case r == nil:
				t.Errorf("POST %s: no %d response", path, status)
			case r.Value.Content["application/problem+json"] == nil:
				t.Errorf("POST %s: %d is not documented as application/problem+json", path, status)
			case !strings.Contains(*r.Value.Description, "docs/problems.md#"+kind):
				t.Errorf("POST %s: %d does not link the %s problem: %q", path, status, kind, *r.Value.Description)
			case status == http.StatusConflict && r.Value.Headers["Retry-After"] == nil:
				t.Errorf("POST %s: 409 does not document Retry-After", path)
			}
		}
	}
	if op := doc.Paths.Value("/v1/orders").Get; op == nil || op.Extensions["x-idempotency"] != nil {
		t.Errorf("GET /v1/orders: missing, or documented as keyed")
	}
	testDocumentSaysWhatTheServerDoes(t, doc)
}

// testDocumentSaysWhatTheServerDoes: the 401 of every operation carries WWW-Authenticate
// and never Idempotent-Replayed (authentication answers before the key is looked at);
// every integer field stops at 2^53 - 1, where the fingerprint's doubles stop telling
// integers apart; only the phased route lists cannot-resume among its answers.
func testDocumentSaysWhatTheServerDoes(t *testing.T, doc *openapi3.T) {
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if path == "/openapi.json" {
				continue
			}
			r := op.Responses.Status(http.StatusUnauthorized)
			switch {
			case r == nil:
				t.Errorf("%s %s: no 401", method, path)
			case r.Value.Headers["WWW-Authenticate"] == nil:
				t.Errorf("%s %s: the 401 does not document WWW-Authenticate", method, path)
			case r.Value.Headers["Idempotent-Replayed"] != nil:
				t.Errorf("%s %s: the 401 documents Idempotent-Replayed, which it never carries", method, path)
			}
		}
	}
	integers := map[string]*openapi3.Schema{}
	for name, s := range doc.Components.Schemas {
		for field, f := range s.Value.Properties {
			integers[name+"."+field] = f.Value
		}
	}
	for _, path := range []string{"/v1/orders", "/v1/payments"} {
		for field, f := range doc.Paths.Value(path).Post.RequestBody.Value.Content["application/json"].Schema.Value.Properties {
			integers["POST "+path+" "+field] = f.Value
		}
	}
	n := 0
	for name, s := range integers {
		if !s.Type.Is("integer") || strings.HasSuffix(name, "Problem.status") { // an HTTP status, 100-599
			continue
		}
		n++
		switch {
		case s.Max == nil:
			t.Errorf("%s: no maximum, want 9007199254740991 (2^53 - 1)", name)
		case *s.Max != 9007199254740991:
			t.Errorf("%s: maximum %v, want 9007199254740991 (2^53 - 1)", name, *s.Max)
		}
	}
	if n != 5 { // quantity, amount_cents twice each (schema and request), the charge's amount_cents
		t.Errorf("%d integer fields checked, want 5", n)
	}
	for path, phased := range map[string]bool{"/v1/orders": false, "/v1/payments": true, webhookPath: false} {
		answers, _ := doc.Paths.Value(path).Post.Extensions["x-idempotency"].(map[string]any)["answers"].([]any)
		listed := false
		for _, a := range answers {
			if a.(map[string]any)["name"] == "cannot-resume" {
				listed = true
			}
		}
		if listed != phased {
			t.Errorf("POST %s lists cannot-resume: %v, want %v (only phased mode resumes)", path, listed, phased)
		}
	}
}

// testAudit: idemtest.Audit over the routes the server publishes finds every unsafe
// route guarded. (The servers' own tests check, in-process, that the document lists
// every route of their router.)
func testAudit(t *testing.T, s *server) {
	var routes []idemtest.Route
	for path, item := range s.openAPI(t).Paths.Map() {
		for method := range item.Operations() {
			routes = append(routes, idemtest.Route{Method: method, Path: path})
		}
	}
	slices.SortFunc(routes, func(a, b idemtest.Route) int { return strings.Compare(a.String(), b.String()) })
	rep := idemtest.Audit(t, idemtest.AuditTarget{URL: s.url, Routes: routes, Header: http.Header{"X-Account-ID": {newAccount()}}})
	if got := rep.Count(idemtest.Guarded); got != 3 {
		t.Errorf("%d guarded routes, want 3 (orders, payments, webhooks)", got)
	}
}
