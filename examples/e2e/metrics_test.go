package e2e

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// testMetrics: GET /metrics serves idem's metrics in the Prometheus text format, labelled
// by the route's pattern (not its path), and every request got one access line at Info
// naming its idempotency outcome.
func testMetrics(t *testing.T, s *server) {
	acct, key := newAccount(), newKey()
	first := s.post(t, "/v1/orders", acct, key, book)
	requireStatus(t, first, http.StatusCreated)
	requireStatus(t, s.post(t, "/v1/orders", acct, key, book), http.StatusCreated)
	requireStatus(t, s.get(t, first.Header.Get("Location"), acct), http.StatusOK)

	r := s.do(t, http.MethodGet, "/metrics", "")
	requireStatus(t, r, http.StatusOK)
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("/metrics Content-Type %q, want the text format", ct)
	}
	body := string(r.Body)
	for _, want := range []string{
		"# TYPE idem_requests_total counter",
		`idem_requests_total{outcome="completed",route="/v1/orders"}`,
		`idem_requests_total{outcome="replayed",route="/v1/orders"}`,
		`idem_store_seconds_count{op="claim"}`,
		`idem_request_seconds_count{outcome="replayed"}`,
		"go_goroutines",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	out := s.out.String()
	for _, outcome := range []string{"completed", "replayed"} {
		line := regexp.MustCompile(`level=INFO msg=request method=POST path=/v1/orders status=201 outcome=` + outcome + ` duration=\S+`)
		if !line.MatchString(out) {
			t.Errorf("no access line for a %s POST /v1/orders", outcome)
		}
	}
	if !regexp.MustCompile(`level=INFO msg=request method=GET path=/v1/orders/\S+ status=200 outcome=- `).MatchString(out) {
		t.Error("no access line for a GET, which the middleware lets through")
	}
}
