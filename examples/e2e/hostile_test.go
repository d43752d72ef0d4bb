package e2e

import (
	"net/http"
	"strings"
	"testing"
)

// testHostileClient: what a client alone sends never makes the server answer 500 or log
// an ERROR line, and creates nothing it should not. An account ID the demo would not
// issue (over 64 bytes, a byte outside printable ASCII, two X-Account-ID fields) is a
// 401 on every route, reads included (on PostgreSQL a 0xFF byte used to reach the
// queries: 500); a JSON body that is not UTF-8, escapes a lone UTF-16 surrogate or names
// a member twice is a 400 and creates nothing; a 100 KB path is logged clipped.
func testHostileClient(t *testing.T, s *server) {
	logged := len(s.out.String())
	routes := []struct{ method, path, body string }{
		{http.MethodGet, "/v1/orders", ""},
		{http.MethodGet, "/v1/orders/1", ""},
		{http.MethodPost, "/v1/orders", book},
		{http.MethodGet, "/v1/payments", ""},
		{http.MethodGet, "/v1/payments/1", ""},
		{http.MethodPost, "/v1/payments", payment},
		{http.MethodGet, "/v1/provider/charges", ""},
		{http.MethodPost, webhookPath, `{"id":"` + newKey() + `","type":"charge.succeeded"}`},
		{http.MethodGet, webhookPath + "/events", ""},
	}
	key := newKey()
	for name, accounts := range map[string][]string{
		"256 bytes":  {strings.Repeat("a", 256)},
		"65 bytes":   {strings.Repeat("a", 65)},
		"0xFF":       {"acct-\xff"},
		"non-ASCII":  {"acct-é"},
		"tab":        {"acct-\tx"},
		"two fields": {newAccount(), newAccount()},
	} {
		for _, c := range routes {
			h := []string{"Content-Type", "application/json", "Idempotency-Key", key}
			for _, a := range accounts {
				h = append(h, "X-Account-ID", a)
			}
			r := s.do(t, c.method, c.path, c.body, h...)
			if r.Status != http.StatusUnauthorized {
				t.Errorf("%s %s with the account %s: status %d, want 401: %s", c.method, c.path, name, r.Status, r)
				continue
			}
			requireProblem(t, r, http.StatusUnauthorized)
			requireFresh(t, r)
			if got := r.Header.Get("WWW-Authenticate"); got != "X-Account-ID" {
				t.Errorf("%s %s with the account %s: WWW-Authenticate %q", c.method, c.path, name, got)
			}
		}
	}
	// The longest account the demo issues works; nothing was stored under the key.
	long := newAccount() + strings.Repeat("z", 64)
	long = long[:64]
	r := s.post(t, "/v1/orders", long, key, book)
	requireStatus(t, r, http.StatusCreated)
	requireFresh(t, r)
	requireReplay(t, r, s.post(t, "/v1/orders", long, key, book))

	acct := newAccount()
	for _, c := range []struct{ path, body string }{
		{"/v1/orders", `{"item":"b` + "\xff" + `","quantity":1}`},
		{"/v1/orders", `{"item":"\ud800","quantity":1}`},
		{"/v1/orders", `{"item":"\udc00x","quantity":1}`},
		{"/v1/orders", `{"item":"b","quantity":1,"quantity":2}`},
		{"/v1/orders", `{"item":"b","item":"c","quantity":1}`},
		{"/v1/payments", `{"amount_cents":1,"currency":"EUR","amount_cents":100000}`},
		{"/v1/payments", `{"amount_cents":1,"currency":"EUR","note":"` + "\xc3" + `"}`},
		{"/v1/payments", `{"amount_cents":1,"currency":"EUR","note":"\uDBFF"}`},
		{webhookPath, `{"id":"` + newKey() + `","type":"a` + "\xfe" + `"}`},
		{webhookPath, `{"id":"` + newKey() + `","type":"\ud800"}`},
		{webhookPath, `{"id":"` + newKey() + `","type":"a","type":"b"}`},
	} {
		k := newKey()
		first := s.post(t, c.path, acct, k, c.body)
		if first.Status != http.StatusBadRequest {
			t.Errorf("%s %q: status %d, want 400: %s", c.path, c.body, first.Status, first)
			continue
		}
		requireProblem(t, first, http.StatusBadRequest)
	}
	for _, l := range []struct{ path, name string }{{"/v1/orders", "orders"}, {"/v1/payments", "payments"},
		{"/v1/provider/charges", "charges"}, {webhookPath + "/events", "events"}} {
		if n := len(list(t, s.get(t, l.path, acct), l.name)); n != 0 {
			t.Errorf("%d %s after bodies that were refused, want 0", n, l.name)
		}
	}

	long100k := "/v1/" + strings.Repeat("p", 100<<10)
	requireStatus(t, s.do(t, http.MethodGet, long100k, "", "X-Account-ID", acct), http.StatusNotFound)

	out := s.out.String()[logged:]
	for line := range strings.Lines(out) {
		if strings.Contains(line, "level=ERROR") {
			t.Errorf("a client's request logged an ERROR line: %s", line)
		}
		if len(line) > 1000 {
			t.Errorf("a log line of %d bytes: %.200s…", len(line), line)
		}
	}
}
