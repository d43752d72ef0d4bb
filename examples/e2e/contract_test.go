package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/idemtest"
)

const (
	book    = `{"item":"book","quantity":2}`
	payment = `{"amount_cents":1250,"currency":"EUR"}`
)

// TestExamples starts each example on each storage and drives every row of the
// contract over HTTP, then stops it with SIGTERM (exit status 0).
func TestExamples(t *testing.T) {
	eachExample(t, func(t *testing.T, app string, st storage) {
		dir, env := st.setup(t)
		s := start(t, app, dir, env)
		if strings.HasPrefix(st.name, "sqlite") {
			if _, err := os.Stat(filepath.Join(dir, "orders.db")); err != nil {
				t.Fatalf("no orders.db in the working directory: %v", err)
			}
		}
		for _, c := range []struct {
			name string
			f    func(t *testing.T, s *server)
		}{
			{"OrderCreatedThenReplayed", testOrderReplay},
			{"KeyGrammar", testKeyGrammar},
			{"KeyRejected", testKeyRejected},
			{"Unauthenticated", testUnauthenticated},
			{"HostileClient", testHostileClient},
			{"InvalidBodyStoredAndReplayed", testInvalidBody},
			{"BodyTooLargeNotStored", testBodyTooLarge},
			{"PayloadMismatch", func(t *testing.T, s *server) { testPayloadMismatch(t, s, st.redis) }},
			{"Conformance", testConformance},
			{"CrossAccount", testCrossAccount},
			{"GetOrders", testGetOrders},
			{"Payments", testPayments},
			{"GetIgnoresKey", testGetIgnoresKey},
			{"Webhooks", testWebhooks},
			{"Metrics", testMetrics},
			{"PublishedPolicy", testPublishedPolicy},
			{"Audit", testAudit},
		} {
			if !t.Run(c.name, func(t *testing.T) { c.f(t, s) }) {
				break
			}
		}
		s.shutdown(t)
	})
}

// testOrderReplay: the first request runs (201, Location, the order), a retry gets it
// again byte for byte with Idempotent-Replayed, and GET returns the same fields.
func testOrderReplay(t *testing.T, s *server) {
	acct, key := newAccount(), newKey()
	first := s.post(t, "/v1/orders", acct, key, book)
	requireStatus(t, first, http.StatusCreated)
	requireFresh(t, first)
	id := str(t, first.Body, "id")
	if loc := first.Header.Get("Location"); loc != "/v1/orders/"+id {
		t.Fatalf("Location %q, want /v1/orders/%s", loc, id)
	}
	if ct := first.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("Content-Type %q", ct)
	}
	f := fields(t, first.Body)
	if string(f["item"]) != `"book"` || string(f["quantity"]) != `2` || len(f) != 4 {
		t.Fatalf("order %s, want id, item book, quantity 2, created_at", first.Body)
	}
	if _, err := time.Parse(time.RFC3339, str(t, first.Body, "created_at")); err != nil {
		t.Fatalf("created_at is not RFC 3339: %v", err)
	}

	requireReplay(t, first, s.post(t, "/v1/orders", acct, key, book))
	requireSameFields(t, s.get(t, "/v1/orders/"+id, acct).Body, first.Body)
	orders := list(t, s.get(t, "/v1/orders", acct), "orders")
	if len(orders) != 1 {
		t.Fatalf("%d orders, want 1", len(orders))
	}
	requireSameFields(t, orders[0], first.Body)
}

// testKeyGrammar: a quoted key (with parameters, surrounding spaces) is its content, and
// JSON key order and white space do not change the payload, with or without a JSON
// Content-Type.
func testKeyGrammar(t *testing.T, s *server) {
	acct, key := newAccount(), newKey()
	first := s.post(t, "/v1/orders", acct, key, book)
	requireStatus(t, first, http.StatusCreated)
	for _, k := range []string{`"` + key + `"`, `"` + key + `";a=1;b`, "  " + key + "  "} {
		requireReplay(t, first, s.post(t, "/v1/orders", acct, k, book))
	}
	reordered := " {\n  \"quantity\" : 2 ,\t\"item\":\"book\" } "
	requireReplay(t, first, s.post(t, "/v1/orders", acct, key, reordered))
	// as curl -d sends it: no JSON Content-Type
	requireReplay(t, first, s.do(t, http.MethodPost, "/v1/orders", reordered,
		"Content-Type", "application/x-www-form-urlencoded", "X-Account-ID", acct, "Idempotency-Key", key))

	// a quoted key may hold what a bare one may not
	quoted := `"` + newKey() + ` with, comma and \"quote\""`
	r := s.post(t, "/v1/orders", acct, quoted, book)
	requireStatus(t, r, http.StatusCreated)
	requireReplay(t, r, s.post(t, "/v1/orders", acct, quoted, book))

	// 255 characters is the longest key
	long := newKey() + strings.Repeat("x", 255)
	long = long[:255]
	r = s.post(t, "/v1/orders", acct, long, book)
	requireStatus(t, r, http.StatusCreated)
	requireFresh(t, r)
	requireReplay(t, r, s.post(t, "/v1/orders", acct, long, book))
}

// testKeyRejected: a missing or malformed key is a 400 problem on both keyed routes, and
// a rejected request is never stored under any key.
func testKeyRejected(t *testing.T, s *server) {
	acct := newAccount()
	for _, path := range []string{"/v1/orders", "/v1/payments"} {
		body := book
		if path == "/v1/payments" {
			body = payment
		}
		requireProblem(t, s.post(t, path, acct, "", body), http.StatusBadRequest) // missing
		for _, values := range map[string][]string{
			"empty":           {""},
			"empty quoted":    {`""`},
			"256 characters":  {strings.Repeat("k", 256)},
			"256 quoted":      {`"` + strings.Repeat("k", 256) + `"`},
			"control":         {"a\tb"},
			"non-ASCII":       {"clé-ключ"},
			"bare comma":      {"a,b"},
			"bare space":      {"a b"},
			"two fields":      {newKey(), newKey()},
			"unterminated":    {`"abc`},
			"bad escape":      {`"a\x"`},
			"quoted non-text": {`"caf` + "\u00e9" + `"`},
		} {
			h := []string{"Content-Type", "application/json", "X-Account-ID", acct}
			for _, v := range values {
				h = append(h, "Idempotency-Key", v)
			}
			r := s.do(t, http.MethodPost, path, body, h...)
			if r.Status != http.StatusBadRequest {
				t.Errorf("%s: key %q: status %d, want 400: %s", path, values, r.Status, r)
				continue
			}
			requireProblem(t, r, http.StatusBadRequest)
		}
		// Two fields with the same valid key are still ambiguous, and nothing is stored:
		// the key then runs fresh.
		key := newKey()
		requireProblem(t, s.do(t, http.MethodPost, path, body, "Content-Type", "application/json", "X-Account-ID", acct,
			"Idempotency-Key", key, "Idempotency-Key", key), http.StatusBadRequest)
		r := s.post(t, path, acct, key, body)
		requireStatus(t, r, http.StatusCreated)
		requireFresh(t, r)
	}
	if n := len(list(t, s.get(t, "/v1/orders", acct), "orders")); n != 1 {
		t.Fatalf("%d orders after the rejections, want 1", n)
	}
}

// testUnauthenticated: every /v1 route answers 401 without an account, and a keyed
// request rejected so is not stored.
func testUnauthenticated(t *testing.T, s *server) {
	key := newKey()
	for _, c := range []struct{ method, path, body string }{
		{http.MethodGet, "/v1/orders", ""},
		{http.MethodGet, "/v1/orders/1", ""},
		{http.MethodPost, "/v1/orders", book},
		{http.MethodGet, "/v1/payments", ""},
		{http.MethodGet, "/v1/payments/1", ""},
		{http.MethodPost, "/v1/payments", payment},
		{http.MethodGet, "/v1/provider/charges", ""},
	} {
		for _, acct := range [][]string{nil, {"X-Account-ID", ""}} {
			h := append([]string{"Content-Type", "application/json", "Idempotency-Key", key}, acct...)
			requireProblem(t, s.do(t, c.method, c.path, c.body, h...), http.StatusUnauthorized)
		}
	}
	r := s.post(t, "/v1/orders", newAccount(), key, book)
	requireStatus(t, r, http.StatusCreated)
	requireFresh(t, r)
}

// testInvalidBody: a body that breaks the rules is a 400 problem, stored and replayed
// like a success; the key then refuses another body (422).
func testInvalidBody(t *testing.T, s *server) {
	acct := newAccount()
	for _, c := range []struct{ path, bad, good string }{
		{"/v1/orders", `{"item":"","quantity":1}`, book},
		{"/v1/orders", `{"item":"book","quantity":0}`, book},
		{"/v1/orders", `{"item":"book","quantity":1.5}`, book},
		{"/v1/orders", `{"item":"book"}`, book},
		{"/v1/orders", `not json`, book},
		{"/v1/orders", `[1,2]`, book},
		{"/v1/payments", `{"amount_cents":0,"currency":"EUR"}`, payment},
		{"/v1/payments", `{"amount_cents":100,"currency":"EURO"}`, payment},
		{"/v1/payments", `{"amount_cents":"100","currency":"EUR"}`, payment},
		{"/v1/payments", `{"amount_cents":9007199254740993,"currency":"EUR"}`, payment},
		{"/v1/orders", `{"item":"book","quantity":9007199254740992}`, book},
		{"/v1/payments", `{`, payment},
	} {
		key := newKey()
		first := s.post(t, c.path, acct, key, c.bad)
		requireProblem(t, first, http.StatusBadRequest)
		requireFresh(t, first)
		requireReplay(t, first, s.post(t, c.path, acct, key, c.bad))
		requireProblem(t, s.post(t, c.path, acct, key, c.good), http.StatusUnprocessableEntity)
	}
	// Past 2^53 two amounts are one double, so one fingerprint: the retry of one with the
	// other gets the first's answer, and that must be the refusal, never a payment.
	key := newKey()
	first := s.post(t, "/v1/payments", acct, key, `{"amount_cents":9007199254740992,"currency":"EUR"}`)
	requireProblem(t, first, http.StatusBadRequest)
	requireReplay(t, first, s.post(t, "/v1/payments", acct, key, `{"amount_cents":9007199254740993,"currency":"EUR"}`))
	for _, name := range []string{"orders", "payments"} {
		if n := len(list(t, s.get(t, "/v1/"+name, acct), name)); n != 0 {
			t.Fatalf("%d %s after invalid bodies, want 0", n, name)
		}
	}
	if n := len(list(t, s.get(t, "/v1/provider/charges", acct), "charges")); n != 0 {
		t.Fatalf("%d provider charges after invalid bodies, want 0", n)
	}
}

// testBodyTooLarge: an oversize body is refused before it runs and never stored.
func testBodyTooLarge(t *testing.T, s *server) {
	acct, key := newAccount(), newKey()
	huge := `{"item":"` + strings.Repeat("x", 1<<20) + `","quantity":1}`
	requireProblem(t, s.post(t, "/v1/orders", acct, key, huge), http.StatusRequestEntityTooLarge)
	r := s.post(t, "/v1/orders", acct, key, book)
	requireStatus(t, r, http.StatusCreated)
	requireFresh(t, r)
}

// testPayloadMismatch: the same key with another body, or on the other route, is 422 —
// except across the routes when the payments' keys are in Redis (redis): there orders
// and payments are two key spaces, in two stores, and a key used on both runs on both.
func testPayloadMismatch(t *testing.T, s *server, redis bool) {
	acct, key, pkey := newAccount(), newKey(), newKey()
	first := s.post(t, "/v1/orders", acct, key, book)
	requireStatus(t, first, http.StatusCreated)
	requireProblem(t, s.post(t, "/v1/orders", acct, key, `{"item":"book","quantity":3}`), http.StatusUnprocessableEntity)

	pay := s.post(t, "/v1/payments", acct, pkey, payment)
	requireStatus(t, pay, http.StatusCreated)
	requireProblem(t, s.post(t, "/v1/payments", acct, pkey, `{"amount_cents":1251,"currency":"EUR"}`), http.StatusUnprocessableEntity)

	orders, payments := 1, 1
	if redis {
		requireStatus(t, s.post(t, "/v1/payments", acct, key, payment), http.StatusCreated)
		requireStatus(t, s.post(t, "/v1/orders", acct, pkey, book), http.StatusCreated)
		orders, payments = 2, 2
	} else {
		requireProblem(t, s.post(t, "/v1/payments", acct, key, payment), http.StatusUnprocessableEntity)
		requireProblem(t, s.post(t, "/v1/orders", acct, pkey, book), http.StatusUnprocessableEntity)
	}

	requireReplay(t, first, s.post(t, "/v1/orders", acct, key, book))
	requireReplay(t, pay, s.post(t, "/v1/payments", acct, pkey, payment))
	if n := len(list(t, s.get(t, "/v1/orders", acct), "orders")); n != orders {
		t.Fatalf("%d orders, want %d", n, orders)
	}
	if n := len(list(t, s.get(t, "/v1/payments", acct), "payments")); n != payments {
		t.Fatalf("%d payments, want %d", n, payments)
	}
}

// testConformance runs idemtest's verification list on both keyed routes, counting the
// side effect through the API (the orders, the provider's charges): missing and
// malformed keys, replay, changed body, 20 concurrent duplicates making one order or one
// charge, GET untouched.
func testConformance(t *testing.T, s *server) {
	for _, c := range []struct{ path, body, count, list string }{
		{"/v1/orders", book, "/v1/orders", "orders"},
		{"/v1/payments", payment, "/v1/provider/charges", "charges"},
	} {
		acct := newAccount()
		idemtest.Check(t, idemtest.Target{
			URLs:        []string{s.url},
			Client:      s.client,
			Path:        c.path,
			GetPath:     c.path,
			Header:      http.Header{"X-Account-Id": {acct}},
			Body:        func(int) []byte { return []byte(c.body) },
			SideEffects: func() int { return len(list(t, s.get(t, c.count, acct), c.list)) },
		})
	}
}

// testCrossAccount: keys are per account; accounts see only their own rows.
func testCrossAccount(t *testing.T, s *server) {
	a, b, key := newAccount(), newAccount(), newKey()
	ra := s.post(t, "/v1/orders", a, key, book)
	requireStatus(t, ra, http.StatusCreated)
	rb := s.post(t, "/v1/orders", b, key, book)
	requireStatus(t, rb, http.StatusCreated)
	requireFresh(t, rb)
	idA, idB := str(t, ra.Body, "id"), str(t, rb.Body, "id")
	if idA == idB {
		t.Fatalf("two accounts got one order %s", idA)
	}
	for _, c := range []struct{ acct, own, other string }{{a, idA, idB}, {b, idB, idA}} {
		orders := list(t, s.get(t, "/v1/orders", c.acct), "orders")
		if len(orders) != 1 || str(t, orders[0], "id") != c.own {
			t.Fatalf("account %s sees %s, want only order %s", c.acct, orders, c.own)
		}
		requireProblem(t, s.get(t, "/v1/orders/"+c.other, c.acct), http.StatusNotFound)
	}

	pa := s.post(t, "/v1/payments", a, key+"-pay", payment)
	requireStatus(t, pa, http.StatusCreated)
	pb := s.post(t, "/v1/payments", b, key+"-pay", payment)
	requireStatus(t, pb, http.StatusCreated)
	requireFresh(t, pb)
	requireProblem(t, s.get(t, "/v1/payments/"+str(t, pa.Body, "id"), b), http.StatusNotFound)
	requireProblem(t, s.get(t, "/v1/payments/"+str(t, pb.Body, "id"), a), http.StatusNotFound)
	// the provider keys charges per account too: the same derived key is two charges
	ca := list(t, s.get(t, "/v1/provider/charges", a), "charges")
	cb := list(t, s.get(t, "/v1/provider/charges", b), "charges")
	if len(ca) != 1 || len(cb) != 1 {
		t.Fatalf("charges: %d for a, %d for b; want 1 each", len(ca), len(cb))
	}
	if str(t, ca[0], "id") == str(t, cb[0], "id") || str(t, ca[0], "idempotency_key") != key+"-pay:charge" ||
		str(t, cb[0], "idempotency_key") != key+"-pay:charge" {
		t.Fatalf("charges %s and %s, want two charges with the derived key %s-pay:charge", ca[0], cb[0], key)
	}
}

// testGetOrders: lists are [] when empty, oldest first, with the fields the 201s
// returned byte for byte; unknown ids are 404 problems.
func testGetOrders(t *testing.T, s *server) {
	acct := newAccount()
	for _, name := range []string{"orders", "payments"} {
		if n := len(list(t, s.get(t, "/v1/"+name, acct), name)); n != 0 {
			t.Fatalf("%d %s for a new account", n, name)
		}
	}
	if n := len(list(t, s.get(t, "/v1/provider/charges", acct), "charges")); n != 0 {
		t.Fatalf("%d charges for a new account", n)
	}
	var created []*response
	for _, body := range []string{`{"item":"a","quantity":1}`, `{"item":"Ünïcödé <&> \"q\"","quantity":7}`, `{"item":"c","quantity":3}`} {
		r := s.post(t, "/v1/orders", acct, newKey(), body)
		requireStatus(t, r, http.StatusCreated)
		created = append(created, r)
	}
	orders := list(t, s.get(t, "/v1/orders", acct), "orders")
	if len(orders) != len(created) {
		t.Fatalf("%d orders, want %d", len(orders), len(created))
	}
	for i, r := range created {
		requireSameFields(t, orders[i], r.Body) // oldest first
		one := s.get(t, r.Header.Get("Location"), acct)
		requireStatus(t, one, http.StatusOK)
		requireSameFields(t, one.Body, r.Body)
	}
	for _, id := range []string{"999999999", "0", "abc", "01"} {
		requireProblem(t, s.get(t, "/v1/orders/"+id, acct), http.StatusNotFound)
		requireProblem(t, s.get(t, "/v1/payments/"+id, acct), http.StatusNotFound)
	}
}

// testPayments: a payment runs once, with one provider charge under the derived key;
// retries replay it; GET returns its fields byte for byte.
func testPayments(t *testing.T, s *server) {
	acct, key := newAccount(), newKey()
	first := s.post(t, "/v1/payments", acct, key, payment)
	requireStatus(t, first, http.StatusCreated)
	requireFresh(t, first)
	id, chargeID := str(t, first.Body, "id"), str(t, first.Body, "charge_id")
	if loc := first.Header.Get("Location"); loc != "/v1/payments/"+id {
		t.Fatalf("Location %q, want /v1/payments/%s", loc, id)
	}
	f := fields(t, first.Body)
	if string(f["amount_cents"]) != "1250" || string(f["currency"]) != `"EUR"` || len(f) != 5 {
		t.Fatalf("payment %s", first.Body)
	}
	if _, err := time.Parse(time.RFC3339, str(t, first.Body, "created_at")); err != nil {
		t.Fatalf("created_at is not RFC 3339: %v", err)
	}
	for range 2 {
		requireReplay(t, first, s.post(t, "/v1/payments", acct, key, payment))
	}
	requireSameFields(t, withoutReceipt(t, s.get(t, "/v1/payments/"+id, acct).Body), first.Body)
	payments := list(t, s.get(t, "/v1/payments", acct), "payments")
	if len(payments) != 1 {
		t.Fatalf("%d payments, want 1", len(payments))
	}
	requireSameFields(t, payments[0], first.Body)
	requireOneCharge(t, s, acct, key, chargeID, 1250)
}

// requireOneCharge fails unless the provider holds exactly one charge for acct: id, for
// the derived key <key>:charge and amount.
func requireOneCharge(t *testing.T, s *server, acct, key, id string, amount int) {
	t.Helper()
	charges := list(t, s.get(t, "/v1/provider/charges", acct), "charges")
	if len(charges) != 1 {
		t.Fatalf("%d provider charges, want 1: %s", len(charges), charges)
	}
	c := fields(t, charges[0])
	if string(c["amount_cents"]) != strconv.Itoa(amount) || str(t, charges[0], "idempotency_key") != key+":charge" ||
		(id != "" && str(t, charges[0], "id") != id) {
		t.Fatalf("charge %s, want id %s, idempotency_key %s:charge, amount_cents %d", charges[0], id, key, amount)
	}
}

// testGetIgnoresKey: GET takes no part in the protocol, whatever key it carries.
func testGetIgnoresKey(t *testing.T, s *server) {
	acct := newAccount()
	r := s.do(t, http.MethodGet, "/v1/orders", "", "X-Account-ID", acct, "Idempotency-Key", "a,b", "Idempotency-Key", "c")
	requireStatus(t, r, http.StatusOK)
	requireFresh(t, r)
}
