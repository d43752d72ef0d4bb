package idemopenapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/idemkit/idem/core/policy"
)

// ProblemSchema is the name of the RFC 9457 problem schema Add puts in the document's
// components.
const ProblemSchema = "IdempotencyProblem"

// Extension is the operation extension holding the policy as JSON.
const Extension = "x-idempotency"

const (
	problemJSON    = "application/problem+json"
	problemRef     = "#/components/schemas/" + ProblemSchema
	replayedHeader = "Idempotent-Replayed"
	retryAfter     = "Retry-After"
)

// ErrNoOperation is wrapped by Add's error for a policy naming an operation the
// document does not have.
var ErrNoOperation = errors.New("idemopenapi: no such operation in the document")

// Add adds each policy's contract to the operation its key names ("POST /v1/orders"):
// the key's parameter, the Idempotent-Replayed and Retry-After headers, the problem
// responses and the x-idempotency extension (see the package doc). It fails, changing
// nothing, when a key is malformed or names an operation doc does not have.
func Add(doc *openapi3.T, policies map[string]policy.Policy) error {
	type target struct {
		name string
		op   *openapi3.Operation
		p    policy.Policy
		ext  any // p as JSON
	}
	var targets []target
	for name, p := range policies {
		method, route, ok := strings.Cut(strings.TrimSpace(name), " ")
		if !ok || method == "" || !strings.HasPrefix(route, "/") {
			return fmt.Errorf("idemopenapi: %q: want \"METHOD /path\"", name)
		}
		var op *openapi3.Operation
		if doc.Paths != nil {
			if item := doc.Paths.Value(PathTemplate(route)); item != nil {
				op = item.GetOperation(strings.ToUpper(method))
			}
		}
		if op == nil {
			return fmt.Errorf("%w: %s %s", ErrNoOperation, strings.ToUpper(method), PathTemplate(route))
		}
		ext, err := policyValue(p)
		if err != nil {
			return fmt.Errorf("idemopenapi: %s: %w", name, err)
		}
		targets = append(targets, target{name, op, p, ext})
	}
	slices.SortFunc(targets, func(a, b target) int { return strings.Compare(a.name, b.name) })

	if doc.Components == nil {
		doc.Components = &openapi3.Components{}
	}
	if doc.Components.Schemas == nil {
		doc.Components.Schemas = openapi3.Schemas{}
	}
	for _, t := range targets {
		schema := &openapi3.SchemaRef{Value: problemSchema(docsOf(t.p))}
		doc.Components.Schemas[ProblemSchema] = schema
		addTo(t.op, t.p, t.ext, schema.Value)
	}
	return nil
}

// PathTemplate turns a router's pattern into an OpenAPI path template: Gin's and
// Echo's ":id" and "*path", and ServeMux's "{path...}", become "{id}" and "{path}"; a
// template stays as it is. ServeMux's "{$}" is dropped.
func PathTemplate(route string) string {
	segs := strings.Split(route, "/")
	for i, s := range segs {
		switch {
		case strings.HasPrefix(s, ":") && len(s) > 1:
			segs[i] = "{" + s[1:] + "}"
		case strings.HasPrefix(s, "*") && len(s) > 1:
			segs[i] = "{" + s[1:] + "}"
		case s == "{$}":
			segs[i] = ""
		case strings.HasPrefix(s, "{") && strings.HasSuffix(s, "...}"):
			segs[i] = strings.TrimSuffix(s, "...}") + "}"
		}
	}
	return strings.Join(segs, "/")
}

// addTo adds p's contract, and ext (p as JSON), to op; schema is the problem schema.
func addTo(op *openapi3.Operation, p policy.Policy, ext any, schema *openapi3.Schema) {
	if op.Extensions == nil {
		op.Extensions = map[string]any{}
	}
	op.Extensions[Extension] = ext

	if p.Key.In == "header" {
		param := keyParameter(p)
		op.Parameters = slices.DeleteFunc(op.Parameters, func(r *openapi3.ParameterRef) bool {
			return r != nil && r.Value != nil && r.Value.In == openapi3.ParameterInHeader && strings.EqualFold(r.Value.Name, param.Name)
		})
		op.Parameters = append(op.Parameters, &openapi3.ParameterRef{Value: param})
	}
	op.Description = withParagraph(op.Description, summary(p))

	if op.Responses == nil {
		op.Responses = openapi3.NewResponses()
	}
	for code, ref := range op.Responses.Map() {
		// A 401 is authentication's answer, and authentication runs before the key is
		// looked at (the key's scope is the caller it names): it is never a replay.
		if ref == nil || ref.Ref != "" || ref.Value == nil || code == "401" || !stored(p.Stored, code) || onlyProblems(ref.Value) {
			continue
		}
		setHeader(ref.Value, replayedHeader, &openapi3.Header{Parameter: openapi3.Parameter{
			Description: "`true` when this is the recorded response of an earlier request with the same key, sent again; absent on the response of a request that ran.",
			Schema:      openapi3.NewStringSchema().WithEnum("true").NewRef(),
		}})
	}

	byStatus := map[int][]policy.Answer{}
	for _, a := range p.Answers {
		if a.Problem != "" {
			byStatus[a.Status] = append(byStatus[a.Status], a)
		}
	}
	for status, answers := range byStatus {
		code := strconv.Itoa(status)
		ref := op.Responses.Value(code)
		if ref != nil && ref.Ref != "" {
			continue // shared with other operations
		}
		if ref == nil || ref.Value == nil {
			ref = &openapi3.ResponseRef{Value: &openapi3.Response{}}
			op.Responses.Set(code, ref)
		}
		addProblems(ref.Value, answers, p, schema)
	}
}

// keyParameter is the header parameter of p's key.
func keyParameter(p policy.Policy) *openapi3.Parameter {
	s := openapi3.NewStringSchema().WithMinLength(int64(p.Key.MinLength)).WithMaxLength(int64(p.Key.MaxLength))
	param := openapi3.NewHeaderParameter(p.Key.Name).WithRequired(p.Key.Required).WithSchema(s)
	var b strings.Builder
	fmt.Fprintf(&b, "The operation's idempotency key: a value unique to the operation (a random UUID), sent again with every retry of it. ")
	fmt.Fprintf(&b, "Within %s of its first use, a retry with the same key and request gets the first outcome, sent again with `Idempotent-Replayed: true`, and does not run again; ", duration(p.Retention))
	fmt.Fprintf(&b, "after that the key is forgotten and a request with it runs anew. ")
	fmt.Fprintf(&b, "Keys belong to %s and never collide across scopes. ", p.Scope)
	fmt.Fprintf(&b, "%d–%d characters of printable ASCII: %s. ", p.Key.MinLength, p.Key.MaxLength, p.Key.Format)
	if !p.Key.Required {
		b.WriteString("Optional: a request without it runs unprotected.")
	} else {
		b.WriteString("Required: a request without it is refused (400, key-missing).")
	}
	param.Description = b.String()
	return param
}

// summary is the paragraph Add appends to the operation's description.
func summary(p policy.Policy) string {
	var where string
	switch p.Key.In {
	case "header":
		where = "the `" + p.Key.Name + "` header"
	case "body":
		where = "the JSON body's member `" + p.Key.Name + "`, " + p.Key.Format
	default:
		where = "the request, as the server's key function finds it"
	}
	return fmt.Sprintf("**Idempotent** (%s mode): the key is %s; keys are kept %s. "+
		"A retry with the same key and request gets the first outcome with `Idempotent-Replayed: true`; "+
		"the same key with another request is refused (422); a retry while the first still runs gets 409 with `Retry-After`. "+
		"The full policy is in `%s`.", p.Mode, where, duration(p.Retention), Extension)
}

// withParagraph appends paragraph to description, replacing the one an earlier Add put there.
func withParagraph(description, paragraph string) string {
	if i := strings.Index(description, "**Idempotent** ("); i >= 0 {
		description = strings.TrimRight(description[:i], "\n")
	}
	if description == "" {
		return paragraph
	}
	return description + "\n\n" + paragraph
}

// addProblems documents answers, idem's problems of one status, on r.
func addProblems(r *openapi3.Response, answers []policy.Answer, p policy.Policy, schema *openapi3.Schema) {
	var lines []string
	examples := openapi3.Examples{}
	retry := false
	for _, a := range answers {
		lines = append(lines, fmt.Sprintf("- [%s](%s) (%s): %s", a.Problem, a.Type, a.Title, a.Case))
		examples[string(a.Problem)] = &openapi3.ExampleRef{Value: &openapi3.Example{
			Summary: a.Title,
			Value:   map[string]any{"type": a.Type, "title": a.Title, "status": a.Status, "detail": a.Case},
		}}
		retry = retry || slices.Contains(a.Headers, retryAfter)
	}
	text := "Idempotency problems (RFC 9457):\n\n" + strings.Join(lines, "\n")
	desc := ""
	if r.Description != nil {
		desc = *r.Description
		if i := strings.Index(desc, "Idempotency problems (RFC 9457):"); i >= 0 {
			desc = strings.TrimRight(desc[:i], "\n")
		}
	}
	if desc != "" {
		text = desc + "\n\n" + text
	}
	r.Description = &text

	if r.Content == nil {
		r.Content = openapi3.Content{}
	}
	mt := r.Content[problemJSON]
	if mt == nil {
		mt = &openapi3.MediaType{Schema: openapi3.NewSchemaRef(problemRef, schema)}
		r.Content[problemJSON] = mt
	}
	if mt.Examples == nil {
		mt.Examples = openapi3.Examples{}
	}
	for k, v := range examples {
		mt.Examples[k] = v
	}
	if retry {
		secs := int64(p.RetryAfter / time.Second)
		setHeader(r, retryAfter, &openapi3.Header{Parameter: openapi3.Parameter{
			Description: fmt.Sprintf("Seconds to wait before retrying with the same key (%d); sent with the problems that say to retry.", secs),
			Schema:      openapi3.NewIntegerSchema().WithMin(1).NewRef(),
		}})
	}
}

// onlyProblems reports whether r documents idem's problems only (Add made it): such a
// response is never a replay.
func onlyProblems(r *openapi3.Response) bool {
	if len(r.Content) != 1 {
		return false
	}
	mt := r.Content[problemJSON]
	return mt != nil && mt.Schema != nil && mt.Schema.Ref == problemRef
}

func setHeader(r *openapi3.Response, name string, h *openapi3.Header) {
	if r.Headers == nil {
		r.Headers = openapi3.Headers{}
	}
	r.Headers[name] = &openapi3.HeaderRef{Value: h}
}

// problemSchema is the RFC 9457 problem idem sends, docs its documentation's URL.
func problemSchema(docs string) *openapi3.Schema {
	s := openapi3.NewObjectSchema().
		WithProperty("type", openapi3.NewStringSchema().WithFormat("uri")).
		WithProperty("title", openapi3.NewStringSchema()).
		WithProperty("status", openapi3.NewIntegerSchema().WithMin(100).WithMax(599)).
		WithProperty("detail", openapi3.NewStringSchema())
	s.Required = []string{"type", "title", "status", "detail"}
	s.Title = "Problem detail (RFC 9457)"
	s.Description = "An idempotency problem. `type` names its kind and links to what happened and what to do; " +
		"`title` and `status` are fixed per kind; `detail` describes this occurrence and may change between versions: switch on `type`."
	if docs != "" {
		s.ExternalDocs = &openapi3.ExternalDocs{Description: "The idempotency problems", URL: docs}
	}
	return s
}

// docsOf is the URL of the page documenting p's problems: their type URIs without the
// kind and the fragment.
func docsOf(p policy.Policy) string {
	for _, a := range p.Answers {
		if a.Problem != "" {
			base := strings.TrimSuffix(a.Type, string(a.Problem))
			base, _, _ = strings.Cut(base, "#")
			return base
		}
	}
	return ""
}

// stored reports whether a response documented under code ("201", "4XX", "default")
// may be a replay.
func stored(set policy.Statuses, code string) bool {
	if code == "default" {
		return true
	}
	if n, err := strconv.Atoi(code); err == nil {
		return set.Has(n)
	}
	if len(code) == 3 && strings.EqualFold(code[1:], "XX") && code[0] >= '1' && code[0] <= '5' {
		class := int(code[0]-'0') * 100
		for s := class; s < class+100; s++ {
			if set.Has(s) {
				return true
			}
		}
	}
	return false
}

// policyValue is p as the generic JSON value an extension holds, so that the document
// marshals the same in JSON and YAML.
func policyValue(p policy.Policy) (any, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return v, nil
}

// duration writes d for people: "24 hours (86400 seconds)".
func duration(d time.Duration) string {
	secs := plural(int64(d/time.Second), "second")
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return plural(int64(d/time.Hour), "hour") + " (" + secs + ")"
	case d >= time.Minute && d%time.Minute == 0:
		return plural(int64(d/time.Minute), "minute") + " (" + secs + ")"
	}
	return secs
}

func plural(n int64, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return strconv.FormatInt(n, 10) + " " + unit + "s"
}
