package idemtest_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/core/policy"
	"github.com/idemkit/idem/ginidem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/adaptertest"
)

// app is a small API on ServeMux: POST /v1/orders is guarded by idem; POST /v1/login
// and DELETE /v1/orders/{id} are not; GET /v1/orders is safe. Every handler counts its
// runs.
type app struct {
	cfg  core.Config
	runs atomic.Int64
	// auth, when set, refuses requests without X-Account with 401, before idem.
	auth bool
}

func (a *app) routes() []idemtest.Route {
	return []idemtest.Route{
		{Method: "GET", Path: "/v1/orders"},
		{Method: "POST", Path: "/v1/orders"},
		{Method: "POST", Path: "/v1/login"},
		{Method: "DELETE", Path: "/v1/orders/{id}"},
	}
}

func (a *app) handler() http.Handler {
	ran := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.runs.Add(1)
		w.WriteHeader(http.StatusNoContent)
	})
	eng, err := core.New(a.cfg)
	if err != nil {
		panic(err) // the tests' configs are valid
	}
	mux := http.NewServeMux()
	mux.Handle("GET /v1/orders", ran)
	mux.Handle("POST /v1/orders", eng.Middleware(account)(ran))
	mux.Handle("POST /v1/login", ran)
	mux.Handle("DELETE /v1/orders/{id}", ran)
	if !a.auth {
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Account") == "" {
			http.Error(w, "who are you?", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func newApp() *app {
	return &app{cfg: core.Config{Store: memstore.New()}}
}

func (a *app) target(t *testing.T) idemtest.AuditTarget {
	eng, err := core.New(a.cfg)
	require.NoError(t, err)
	p := eng.Policy()
	return idemtest.AuditTarget{Handler: a.handler(), Routes: a.routes(), Header: http.Header{"X-Account": {"alice"}},
		Policies: map[string]policy.Policy{"POST /v1/orders": p}}
}

func verdicts(rep idemtest.AuditReport) map[string]idemtest.Verdict {
	m := map[string]idemtest.Verdict{}
	for _, r := range rep.Routes {
		m[r.Route.String()] = r.Verdict
	}
	return m
}

// One unguarded unsafe route, not on the allow-list: the audit fails the test there,
// and only there.
func TestAuditFailsOnAnUnguardedUnsafeRoute(t *testing.T) {
	a := newApp()
	tg := a.target(t)
	tg.Allow = []string{"POST /v1/login"}
	rec := &recorder{TB: t}
	rep := idemtest.Audit(rec, tg)

	require.Len(t, rec.errors, 1, "%q", rec.errors)
	assert.True(t, strings.HasPrefix(rec.errors[0], "idemtest: audit: DELETE /v1/orders/{id} is unguarded: DELETE /v1/orders/0 got 204"), rec.errors[0])
	assert.Contains(t, rec.errors[0], `put "DELETE /v1/orders/{id}" in AuditTarget.Allow`)
	assert.True(t, rep.Failed())
	assert.Equal(t, map[string]idemtest.Verdict{
		"POST /v1/orders":        idemtest.Guarded,
		"POST /v1/login":         idemtest.Allowed,
		"DELETE /v1/orders/{id}": idemtest.Unguarded,
	}, verdicts(rep))
	assert.Equal(t, 1, rep.Safe, "GET is not audited")
	assert.Equal(t, 3, rep.Requests, "one request per unsafe route")
	assert.Equal(t, int64(2), a.runs.Load(), "the unguarded routes ran; the guarded one did not")

	require.Len(t, rec.logs, 1, "the report is logged on failure")
	log := rec.logs[0]
	assert.Contains(t, log, "FAILED: 1 guarded, 1 unguarded, 0 unreached, 1 allowed; 3 requests")
	assert.Contains(t, log, "UNGUARDED  DELETE /v1/orders/{id}")
	assert.Contains(t, log, "### Idempotency for POST /v1/orders\n", "the guarded route's record")
	assert.Contains(t, log, "| 409 | [in-progress]")
}

func TestAuditPassesWhenEveryUnsafeRouteIsGuardedOrAllowed(t *testing.T) {
	a := newApp()
	tg := a.target(t)
	tg.Allow = []string{"POST /v1/login", "DELETE /v1/orders/{id}"}
	rep := idemtest.Audit(t, tg)
	assert.False(t, rep.Failed())
	assert.Equal(t, 1, rep.Count(idemtest.Guarded))
	assert.Equal(t, 2, rep.Count(idemtest.Allowed))
	var guarded idemtest.RouteAudit
	for _, r := range rep.Routes {
		if r.Verdict == idemtest.Guarded {
			guarded = r
		}
	}
	require.NotNil(t, guarded.Policy, "the policy of the guarded route")
	assert.Equal(t, "Idempotency-Key", guarded.Policy.Key.Name)
	assert.Contains(t, guarded.Got, "400")
}

// An allow-list entry that names no route fails: it would otherwise excuse a route
// added later under that name.
func TestAuditFailsOnAStaleAllowEntry(t *testing.T) {
	a := newApp()
	tg := a.target(t)
	tg.Allow = []string{"POST /v1/login", "DELETE /v1/orders/{id}", "POST /v1/logout"}
	rec := &recorder{TB: t}
	rep := idemtest.Audit(rec, tg)
	assert.Equal(t, []string{"POST /v1/logout"}, rep.UnusedAllow)
	require.Len(t, rec.errors, 1)
	assert.Contains(t, rec.errors[0], `"POST /v1/logout" names no audited route`)
}

// Authentication that refuses the audit's requests hides idem: the routes are
// unreached, not guarded, until Header authenticates.
func TestAuditWithoutCredentialsIsUnreached(t *testing.T) {
	a := newApp()
	a.auth = true
	tg := a.target(t)
	tg.Header = nil
	tg.Allow = []string{"POST /v1/login", "DELETE /v1/orders/{id}"}
	rep, err := idemtest.RunAudit(t.Context(), tg)
	require.NoError(t, err)
	assert.Equal(t, idemtest.Unreached, verdicts(rep)["POST /v1/orders"])
	assert.True(t, rep.Failed())

	tg.Header = http.Header{"X-Account": {"alice"}}
	rep, err = idemtest.RunAudit(t.Context(), tg)
	require.NoError(t, err)
	assert.Equal(t, idemtest.Guarded, verdicts(rep)["POST /v1/orders"])
	assert.False(t, rep.Failed())
}

// The audit never sends a key, even one in Header: a guarded route must refuse it.
func TestAuditSendsNoKey(t *testing.T) {
	a := newApp()
	tg := a.target(t)
	tg.Header.Set("Idempotency-Key", "from-the-header")
	tg.Allow = []string{"POST /v1/login", "DELETE /v1/orders/{id}"}
	rep, err := idemtest.RunAudit(t.Context(), tg)
	require.NoError(t, err)
	assert.Equal(t, idemtest.Guarded, verdicts(rep)["POST /v1/orders"])
}

func TestAuditOfAnUnreachableURL(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	rep, err := idemtest.RunAudit(t.Context(), idemtest.AuditTarget{URL: url, Routes: []idemtest.Route{{Method: "POST", Path: "/v1/orders"}}})
	require.NoError(t, err)
	require.Len(t, rep.Routes, 1)
	assert.Equal(t, idemtest.Unreached, rep.Routes[0].Verdict)
	assert.Contains(t, rep.Routes[0].Got, "connection refused")
}

func TestAuditFillsPathParameters(t *testing.T) {
	var got []string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.URL.Path)
		w.WriteHeader(http.StatusOK)
	})
	var routes []idemtest.Route
	for _, p := range []string{"/a/:id", "/b/{id}", "/c/*filepath", "/d/{path...}", "/e/{$}", "/f/{id:[0-9]+}/g", "/h/*", "/i"} {
		routes = append(routes, idemtest.Route{Method: "PUT", Path: p})
	}
	_, err := idemtest.RunAudit(t.Context(), idemtest.AuditTarget{Handler: h, Routes: routes, Placeholder: "7"})
	require.NoError(t, err)
	assert.Equal(t, []string{"/a/7", "/b/7", "/c/7", "/d/7", "/e/", "/f/7/g", "/h/7", "/i"}, got)
}

func TestInvalidAuditTargets(t *testing.T) {
	routes := []idemtest.Route{{Method: "POST", Path: "/v1/orders"}}
	for name, tg := range map[string]idemtest.AuditTarget{
		"no handler or URL": {Routes: routes},
		"both":              {Handler: http.NotFoundHandler(), URL: "http://x", Routes: routes},
		"bad URL":           {URL: "localhost:8080", Routes: routes},
		"no routes":         {Handler: http.NotFoundHandler()},
		"relative path":     {Handler: http.NotFoundHandler(), Routes: []idemtest.Route{{Method: "POST", Path: "v1"}}},
	} {
		_, err := idemtest.RunAudit(t.Context(), tg)
		assert.ErrorContains(t, err, "idemtest: invalid AuditTarget", name)
	}
}

// RoutesOf reads Gin's and Echo's route tables: the one-line adaptation the docs show.
func TestRoutesOfGinAndEcho(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.POST("/v1/orders", func(*gin.Context) {})
	r.DELETE("/v1/orders/:id", func(*gin.Context) {})
	assert.ElementsMatch(t, []idemtest.Route{{Method: "POST", Path: "/v1/orders"}, {Method: "DELETE", Path: "/v1/orders/:id"}},
		idemtest.RoutesOf(r.Routes()))

	e := echo.New()
	v1 := e.Group("/v1", func(next echo.HandlerFunc) echo.HandlerFunc { return next }) // registers not-found pseudo-routes
	v1.POST("/orders", func(echo.Context) error { return nil })
	v1.PUT("/orders/:id", func(echo.Context) error { return nil })
	assert.ElementsMatch(t, []idemtest.Route{{Method: "POST", Path: "/v1/orders"}, {Method: "PUT", Path: "/v1/orders/:id"}},
		idemtest.RoutesOf(e.Routes()))

	assert.Panics(t, func() { idemtest.RoutesOf("POST /v1/orders") })
	assert.Panics(t, func() { idemtest.RoutesOf([]struct{ Verb string }{{"POST"}}) })
}

// Audit and the Gin adapter together: the routes straight from gin.Engine.Routes.
func TestAuditOfAGinApp(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	api := r.Group("/v1", func(c *gin.Context) { c.Set("account", c.GetHeader("X-Account")) })
	mw := ginidem.New(adaptertest.Engine(core.Config{Store: memstore.New()}), ginidem.Config{Scope: func(c *gin.Context) string { return c.GetString("account") }})
	api.POST("/orders", mw, func(c *gin.Context) { c.Status(http.StatusCreated) })
	api.POST("/orders/:id/cancel", func(c *gin.Context) { c.Status(http.StatusOK) })
	rec := &recorder{TB: t}
	rep := idemtest.Audit(rec, idemtest.AuditTarget{Handler: r, Routes: idemtest.RoutesOf(r.Routes()), Header: http.Header{"X-Account": {"alice"}}})
	assert.Equal(t, map[string]idemtest.Verdict{"POST /v1/orders": idemtest.Guarded, "POST /v1/orders/:id/cancel": idemtest.Unguarded}, verdicts(rep))
	require.Len(t, rec.errors, 1)
	assert.Contains(t, rec.errors[0], "POST /v1/orders/:id/cancel is unguarded: POST /v1/orders/0/cancel got 200")
}

// TestDefaultUnsafeMethodsIsAFreshCopy: changing a returned slice changes no later audit.
func TestDefaultUnsafeMethodsIsAFreshCopy(t *testing.T) {
	t.Parallel()
	idemtest.DefaultUnsafeMethods()[0] = "GET"
	assert.Equal(t, []string{"POST", "PUT", "PATCH", "DELETE"}, idemtest.DefaultUnsafeMethods())
}

// TestAuditTextCountsInEnglish: "1 unsafe route", "2 unsafe routes", "1 request".
func TestAuditTextCountsInEnglish(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		routes, requests int
		want             []string
	}{
		{1, 1, []string{": 1 unsafe route audited,", "; 1 request in "}},
		{2, 3, []string{": 2 unsafe routes audited,", "; 3 requests in "}},
		{0, 0, []string{": 0 unsafe routes audited,", "; 0 requests in "}},
	} {
		rep := idemtest.AuditReport{Target: "app", Routes: make([]idemtest.RouteAudit, c.routes), Requests: c.requests}
		for i := range rep.Routes {
			rep.Routes[i].Verdict = idemtest.Allowed
		}
		var b strings.Builder
		require.NoError(t, rep.WriteText(&b))
		for _, w := range c.want {
			assert.Contains(t, b.String(), w)
		}
	}
}
