package demo

import (
	"encoding/json"
	"net/http"
	"testing"
)

func TestParseOrder(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]orderInput{
		`{"item":"book","quantity":2}`:                 {"book", 2},
		` {"quantity":1, "item":"é", "note":"x"} `:     {"é", 1},
		`{"item":"b","quantity":3.0}`:                  {"b", 3},
		`{"item":"b","quantity":2e1}`:                  {"b", 20},
		`{"item":"b","quantity":9007199254740991}`:     {"b", 1<<53 - 1},
		`{"item":"b","quantity":9.007199254740991e15}`: {"b", 1<<53 - 1},
	} {
		got, bad := parseOrder([]byte(body))
		if bad != nil || got != want {
			t.Errorf("parseOrder(%s) = %+v, %v; want %+v", body, got, bad, want)
		}
	}
	for _, body := range []string{``, `{`, `null`, `[]`, `"x"`, `{} {}`, `{"item":"b"}`, `{"quantity":1}`,
		`{"item":"","quantity":1}`, `{"item":null,"quantity":1}`, `{"item":1,"quantity":1}`, `{"item":"a\u0000b","quantity":1}`,
		`{"item":"b","quantity":0}`, `{"item":"b","quantity":-1}`, `{"item":"b","quantity":1.5}`, `{"item":"b","quantity":"1"}`,
		`{"item":"b","quantity":null}`, `{"item":"b","quantity":1e300}`, `{"item":"b","quantity":99999999999999999999}`,
		// Over 2^53 - 1 a double no longer tells n from n+1, and neither would the fingerprint.
		`{"item":"b","quantity":9007199254740992}`, `{"item":"b","quantity":9007199254740993}`,
		`{"item":"b","quantity":9007199254740993.0}`, `{"item":"b","quantity":9.007199254740992e15}`} {
		_, bad := parseOrder([]byte(body))
		if bad == nil {
			t.Errorf("parseOrder(%s) accepted it; want 400", body)
			continue
		}
		checkInvalid(t, body, bad)
	}
}

func TestParsePayment(t *testing.T) {
	t.Parallel()
	got, bad := parsePayment([]byte(`{"currency":"eur","amount_cents":1}`))
	if bad != nil || got != (paymentInput{1, "eur"}) {
		t.Errorf("parsePayment = %+v, %v", got, bad)
	}
	for _, body := range []string{`{}`, `{"amount_cents":1}`, `{"amount_cents":0,"currency":"EUR"}`, `{"amount_cents":1,"currency":"EU"}`,
		`{"amount_cents":9007199254740992,"currency":"EUR"}`, `{"amount_cents":9007199254740993,"currency":"EUR"}`,
		`{"amount_cents":1,"currency":"EURO"}`, `{"amount_cents":1,"currency":"E1R"}`, `{"amount_cents":1,"currency":"€UR"}`, `[1]`} {
		_, bad := parsePayment([]byte(body))
		if bad == nil {
			t.Errorf("parsePayment(%s) accepted it; want 400", body)
			continue
		}
		checkInvalid(t, body, bad)
	}
}

// checkInvalid requires a 400 problem of the demo's invalid-request type.
func checkInvalid(t *testing.T, body string, r *Reply) {
	t.Helper()
	var p struct {
		Type, Title, Detail string
		Status              int
	}
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("%s: problem body %q: %v", body, r.Body, err)
	}
	if r.Status != http.StatusBadRequest || p.Status != r.Status || p.Type != ProblemInvalidRequest || p.Title == "" || p.Detail == "" ||
		r.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("%s: got %d %v %+v, want a 400 invalid-request problem", body, r.Status, r.Header, p)
	}
}

func TestDollars(t *testing.T) {
	t.Parallel()
	if got := dollars(`INSERT INTO t (a, b) VALUES (?, ?)`); got != `INSERT INTO t (a, b) VALUES ($1, $2)` {
		t.Errorf("dollars: %s", got)
	}
}

func TestParseID(t *testing.T) {
	t.Parallel()
	for id, ok := range map[string]bool{"1": true, "42": true, "0": false, "01": false, "-1": false, "+1": false, "x": false, "": false,
		"99999999999999999999": false} {
		if _, got := parseID(id); got != ok {
			t.Errorf("parseID(%q) ok = %v, want %v", id, got, ok)
		}
	}
}
