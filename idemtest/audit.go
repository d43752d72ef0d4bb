package idemtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/policy"
)

// Route is one route of an app: its method and its pattern as the router spells it
// ("/v1/orders/:id", "/v1/orders/{id}", "/files/*path").
type Route struct {
	Method string `json:"method"`
	Path   string `json:"path"`
}

// String is "METHOD /path", the form AuditTarget.Allow and AuditTarget.Policies use.
func (r Route) String() string { return r.Method + " " + r.Path }

// RoutesOf returns the routes of a router's route table: a slice whose elements are
// structs, or pointers to structs, with string fields Method and Path. That is what
// gin.Engine.Routes and echo.Echo.Routes return, so each adapts in one line, and
// idemtest needs neither framework:
//
//	idemtest.RoutesOf(r.Routes()) // *gin.Engine
//	idemtest.RoutesOf(e.Routes()) // *echo.Echo
//
// Echo's pseudo-routes (method "echo_route_not_found", which a group with middleware
// registers) are left out. For another router, list the []Route yourself. RoutesOf
// panics when table is not such a slice (a programming error).
func RoutesOf(table any) []Route {
	v := reflect.ValueOf(table)
	if v.Kind() != reflect.Slice {
		panic(fmt.Sprintf("idemtest.RoutesOf: %T is not a slice of routes", table))
	}
	routes := make([]Route, 0, v.Len())
	for i := range v.Len() {
		e := v.Index(i)
		if e.Kind() == reflect.Pointer {
			if e.IsNil() {
				continue
			}
			e = e.Elem()
		}
		if e.Kind() != reflect.Struct {
			panic(fmt.Sprintf("idemtest.RoutesOf: %T: elements are not structs", table))
		}
		m, p := e.FieldByName("Method"), e.FieldByName("Path")
		if m.Kind() != reflect.String || p.Kind() != reflect.String {
			panic(fmt.Sprintf("idemtest.RoutesOf: %T: elements have no string fields Method and Path", table))
		}
		if strings.HasPrefix(m.String(), "echo_route_") {
			continue // not a method: Echo's RouteNotFound handlers
		}
		routes = append(routes, Route{Method: m.String(), Path: p.String()})
	}
	return routes
}

// Defaults of the AuditTarget fields.
const (
	// DefaultPlaceholder fills a route's path parameters.
	DefaultPlaceholder = "0"
	// DefaultAuditTimeout bounds a whole audit.
	DefaultAuditTimeout = 60 * time.Second
)

// DefaultUnsafeMethods returns the methods an audit sends requests to: POST, PUT, PATCH
// and DELETE, in a new slice each call.
func DefaultUnsafeMethods() []string {
	return []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}
}

// AuditTarget is an app to audit, its routes and how to reach them: exactly one of
// Handler and URL.
type AuditTarget struct {
	// Handler serves the app in-process (Run serves it on a loopback httptest.Server for
	// the length of the audit).
	Handler http.Handler

	// URL is the base URL of a running app ("http://127.0.0.1:8080").
	URL string

	// Client sends the requests. Default: a client of its own, with RequestTimeout.
	Client *http.Client

	// Routes are the app's routes, from its router (see RoutesOf). Those with an unsafe
	// method (Methods) are audited; the others are counted and left alone. Required.
	Routes []Route

	// Header is sent with every request: authentication and the caller's account, so
	// that the request gets past the middleware that runs before idem.
	Header http.Header

	// Allow lists the unsafe routes that may run without a key, as "METHOD /path"
	// spelled as in Routes: a login, a logout, a search by POST. Each must name an
	// audited route, so that the list does not outlive the routes it excuses.
	Allow []string

	// Policies holds the policy of each keyed route (core.Engine.Policy), by "METHOD
	// /path" in the router's spelling or as an OpenAPI template ("/v1/orders/{id}"): the
	// report prints each guarded route's record. Default: none (no records).
	Policies map[string]policy.Policy

	// Methods are the unsafe methods audited. Default: DefaultUnsafeMethods (POST, PUT,
	// PATCH, DELETE).
	Methods []string

	// Placeholder is the value given to every path parameter (":id", "{id}", "*path",
	// "{path...}"). Default: DefaultPlaceholder ("0"), which a numeric constraint
	// accepts and which is rarely a real id.
	Placeholder string

	// KeyHeader names the key's header, which the audit never sends (it is removed from
	// Header). Default: core.DefaultHeaderName.
	KeyHeader string

	// Timeout bounds the whole audit. Default: DefaultAuditTimeout (60s).
	Timeout time.Duration

	// RequestTimeout bounds each request. Default: DefaultRequestTimeout (10s).
	RequestTimeout time.Duration
}

// Verdict is what the audit concluded about one unsafe route.
type Verdict string

// The verdicts.
const (
	// Guarded: the request without a key was answered 400 with a key-missing problem,
	// so idem guards the route and nothing ran.
	Guarded Verdict = "guarded"
	// Unguarded: the request without a key got another answer: it ran, or something
	// before idem refused it (see Audit). A failure unless the route is allowed.
	Unguarded Verdict = "unguarded"
	// Unreached: the request failed, or was refused as unauthenticated (401, 403), so
	// whether idem guards the route is unknown: fix Header. A failure unless allowed.
	Unreached Verdict = "unreached"
	// Allowed: not guarded, and on the allow-list.
	Allowed Verdict = "allowed"
)

// RouteAudit is what the audit found for one unsafe route.
type RouteAudit struct {
	// Route is the route audited.
	Route Route `json:"route"`
	// Sent is the path requested, its parameters filled with the placeholder.
	Sent string `json:"sent"`
	// Verdict is guarded, unguarded, unreached or allowed.
	Verdict Verdict `json:"verdict"`
	// Got is the answer (status, headers that matter, start of the body) or the error.
	Got string `json:"got"`
	// Note says what a verdict other than guarded may mean.
	Note string `json:"note,omitempty"`
	// Policy is the guarded route's policy, when AuditTarget.Policies has it.
	Policy *policy.Policy `json:"policy,omitempty"`
}

// AuditReport is what an audit found.
type AuditReport struct {
	// Target names what was audited: "the app at http://127.0.0.1:8080".
	Target string `json:"target"`
	// Routes, one per unsafe route, in the order of AuditTarget.Routes.
	Routes []RouteAudit `json:"routes"`
	// Safe counts the routes left alone: their method is not an audited one.
	Safe int `json:"safe"`
	// UnusedAllow lists the allow-list entries that name no audited route.
	UnusedAllow []string `json:"unused_allow,omitempty"`
	// Requests is how many requests the audit sent.
	Requests int `json:"requests"`
	// Duration is how long it took.
	Duration time.Duration `json:"duration_ns"`
	// Err is set when the audit stopped early (its deadline passed); the routes it did
	// not reach are missing from Routes.
	Err string `json:"error,omitempty"`
}

// Failed reports whether an unsafe route is neither guarded nor allowed, an allow-list
// entry names no audited route, or the audit stopped early.
func (r AuditReport) Failed() bool {
	return r.Err != "" || len(r.UnusedAllow) > 0 || slices.ContainsFunc(r.Routes, func(a RouteAudit) bool {
		return a.Verdict == Unguarded || a.Verdict == Unreached
	})
}

// Count reports how many routes got v.
func (r AuditReport) Count(v Verdict) int {
	n := 0
	for _, a := range r.Routes {
		if a.Verdict == v {
			n++
		}
	}
	return n
}

// WriteText writes the report for people: a line per unsafe route, a summary, then the
// record (policy.Policy.Markdown) of each guarded route whose policy is known.
func (r AuditReport) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "idem audit: %s: %s audited, %d of other methods not\n", r.Target, plural(len(r.Routes), "unsafe route"), r.Safe)
	for _, a := range r.Routes {
		fmt.Fprintf(&b, "  %-9s  %-6s %s\n", strings.ToUpper(string(a.Verdict)), a.Route.Method, a.Route.Path)
		if a.Verdict != Guarded {
			fmt.Fprintf(&b, "             %s %s: %s\n", a.Route.Method, a.Sent, a.Got)
			if a.Note != "" {
				fmt.Fprintf(&b, "             (%s)\n", a.Note)
			}
		}
	}
	for _, e := range r.UnusedAllow {
		fmt.Fprintf(&b, "  allow-list entry %q names no audited route\n", e)
	}
	if r.Err != "" {
		fmt.Fprintf(&b, "  stopped early: %s\n", r.Err)
	}
	verdict := "ok"
	if r.Failed() {
		verdict = "FAILED"
	}
	fmt.Fprintf(&b, "%s: %d guarded, %d unguarded, %d unreached, %d allowed; %s in %s\n", verdict,
		r.Count(Guarded), r.Count(Unguarded), r.Count(Unreached), r.Count(Allowed), plural(r.Requests, "request"), r.Duration.Round(time.Millisecond))
	for _, a := range r.Routes {
		if a.Verdict == Guarded && a.Policy != nil {
			b.WriteString("\n")
			b.WriteString(a.Policy.Markdown(a.Route.String()))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// plural is n and noun, with an s unless n is 1: "1 unsafe route", "2 unsafe routes".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

var errAuditTarget = errors.New("idemtest: invalid AuditTarget")

// RunAudit sends each unsafe route of a.Routes one request without an idempotency key,
// with a.Header and an empty body, and reports whether idem guards it: a guarded route
// answers 400 with a key-missing problem and runs nothing. An unguarded route's handler
// does run, with that request: audit a test instance.
//
// What the audit cannot see: a route whose chain refuses the request before idem runs
// (authentication without a.Header's credentials, a validator, a rate limiter, a
// router's 404 for a placeholder its constraint rejects) is reported unguarded or
// unreached with what it answered, even if idem guards it further on; and a route whose
// key is optional (core.Config.KeyOptional) runs without one, so it is reported
// unguarded: put it on the allow-list. The error is for an invalid AuditTarget only.
func RunAudit(ctx context.Context, a AuditTarget) (AuditReport, error) {
	a, err := a.withDefaults()
	if err != nil {
		return AuditReport{}, err
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, a.Timeout)
	defer cancel()

	rep := AuditReport{Target: "the app at " + a.URL}
	base := a.URL
	if a.Handler != nil {
		srv := httptest.NewServer(a.Handler)
		defer srv.Close()
		base, rep.Target = srv.URL, "an in-process handler"
	}
	header := a.Header.Clone()
	if header == nil {
		header = http.Header{}
	}
	header.Del(a.KeyHeader)
	s := &sender{t: Target{Header: header, KeyHeader: a.KeyHeader, RequestTimeout: a.RequestTimeout}, bases: []string{base}, c: a.Client}
	if s.c == nil {
		s.c = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(), Timeout: a.RequestTimeout}
	}
	defer s.c.CloseIdleConnections()

	allowed := map[string]bool{}
	for _, e := range a.Allow {
		allowed[e] = false
	}
	for _, route := range a.Routes {
		method := strings.ToUpper(route.Method)
		if !slices.Contains(a.Methods, method) {
			rep.Safe++
			continue
		}
		if err := ctx.Err(); err != nil {
			rep.Err = fmt.Sprintf("after %s: %v", time.Since(began).Round(time.Millisecond), context.Cause(ctx))
			break
		}
		ra := RouteAudit{Route: route, Sent: fill(route.Path, a.Placeholder)}
		resp, err := s.do(ctx, request{method: method, path: ra.Sent})
		switch {
		case err != nil:
			ra.Verdict, ra.Got = Unreached, err.Error()
		case problemFailure(resp, core.ProblemKeyMissing) == "":
			ra.Verdict, ra.Got = Guarded, resp.String()
			if p, ok := policyOf(a.Policies, route, a.Placeholder); ok {
				ra.Policy = &p
			}
		case resp.Status == http.StatusUnauthorized || resp.Status == http.StatusForbidden:
			ra.Verdict, ra.Got = Unreached, resp.String()
			ra.Note = "refused as unauthenticated before idem could answer: give AuditTarget.Header the credentials"
		default:
			ra.Verdict, ra.Got = Unguarded, resp.String()
			ra.Note = "a request without a key was not refused with a key-missing problem: it ran unprotected, or something before idem refused it"
			if resp.Status == http.StatusNotFound || resp.Status == http.StatusMethodNotAllowed {
				ra.Note += "; a 404 or 405 may also be the router's, for a placeholder the route's pattern rejects (set Placeholder)"
			}
		}
		if _, ok := allowed[route.String()]; ok {
			allowed[route.String()] = true
			if ra.Verdict != Guarded {
				ra.Verdict, ra.Note = Allowed, ""
			}
		}
		rep.Routes = append(rep.Routes, ra)
	}
	if rep.Err == "" {
		for _, e := range a.Allow {
			if !allowed[e] {
				rep.UnusedAllow = append(rep.UnusedAllow, e)
			}
		}
	}
	rep.Requests = int(s.sent.Load())
	rep.Duration = time.Since(began)
	return rep, nil
}

// Audit runs RunAudit from a test and reports each unsafe route that is neither
// guarded nor allowed, and each allow-list entry that names no audited route, with
// t.Errorf. The whole report, with the guarded routes' records, is logged when anything
// failed or the test runs with -v. An invalid AuditTarget is fatal. It returns the report.
//
//	idemtest.Audit(t, idemtest.AuditTarget{Handler: r, Routes: idemtest.RoutesOf(r.Routes()),
//		Header: http.Header{"Authorization": {"Bearer test"}}, Allow: []string{"POST /login"}})
func Audit(t testing.TB, a AuditTarget) AuditReport {
	t.Helper()
	rep, err := RunAudit(t.Context(), a)
	if err != nil {
		t.Fatal(err)
	}
	for _, ra := range rep.Routes {
		if ra.Verdict == Unguarded || ra.Verdict == Unreached {
			t.Errorf("idemtest: audit: %s is %s: %s %s got %s (%s); guard it with idem, or put %q in AuditTarget.Allow",
				ra.Route, ra.Verdict, ra.Route.Method, ra.Sent, ra.Got, ra.Note, ra.Route.String())
		}
	}
	for _, e := range rep.UnusedAllow {
		t.Errorf("idemtest: audit: the allow-list entry %q names no audited route", e)
	}
	if rep.Err != "" {
		t.Errorf("idemtest: audit stopped early: %s", rep.Err)
	}
	if rep.Failed() || testing.Verbose() {
		var b strings.Builder
		_ = rep.WriteText(&b)
		t.Log("\n" + b.String())
	}
	return rep
}

func (a AuditTarget) withDefaults() (AuditTarget, error) {
	switch {
	case a.Handler == nil && a.URL == "":
		return a, fmt.Errorf("%w: Handler or URL: one is required", errAuditTarget)
	case a.Handler != nil && a.URL != "":
		return a, fmt.Errorf("%w: Handler and URL: set one, not both", errAuditTarget)
	case len(a.Routes) == 0:
		return a, fmt.Errorf("%w: Routes: none", errAuditTarget)
	}
	if a.URL != "" {
		if u, err := url.Parse(a.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return a, fmt.Errorf("%w: URL %q: want http:// or https:// and a host", errAuditTarget, a.URL)
		}
	}
	for _, r := range a.Routes {
		if r.Method == "" || !strings.HasPrefix(r.Path, "/") {
			return a, fmt.Errorf("%w: Routes: %q: want a method and a path starting with /", errAuditTarget, r.String())
		}
	}
	if a.Methods == nil {
		a.Methods = DefaultUnsafeMethods()
	}
	a.Methods = slices.Clone(a.Methods)
	for i, m := range a.Methods {
		a.Methods[i] = strings.ToUpper(m)
	}
	if a.Placeholder == "" {
		a.Placeholder = DefaultPlaceholder
	}
	if a.KeyHeader == "" {
		a.KeyHeader = core.DefaultHeaderName
	}
	if a.Timeout <= 0 {
		a.Timeout = DefaultAuditTimeout
	}
	if a.RequestTimeout <= 0 {
		a.RequestTimeout = DefaultRequestTimeout
	}
	return a, nil
}

// fill gives each path parameter of pattern the value v: ":id", "*path", "{id}",
// "{path...}" and "{id:[0-9]+}" become v; ServeMux's "{$}" is dropped.
func fill(pattern, v string) string {
	segs := strings.Split(pattern, "/")
	for i, s := range segs {
		switch {
		case s == "{$}":
			segs[i] = ""
		case len(s) > 1 && (s[0] == ':' || s[0] == '*'), s == "*":
			segs[i] = v
		case strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}"):
			segs[i] = v
		}
	}
	return strings.Join(segs, "/")
}

// policyOf finds route's policy: by "METHOD /path" as spelled, or by any key whose
// method matches and whose path fills to the same path (":id" and "{id}" alike).
func policyOf(policies map[string]policy.Policy, route Route, v string) (policy.Policy, bool) {
	if p, ok := policies[route.String()]; ok {
		return p, true
	}
	want := fill(route.Path, v)
	for k, p := range policies {
		method, path, _ := strings.Cut(k, " ")
		if strings.EqualFold(method, route.Method) && fill(path, v) == want {
			return p, true
		}
	}
	return policy.Policy{}, false
}
