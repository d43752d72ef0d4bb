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

// TestObjectIsStrict: a body that is not UTF-8 text, that escapes a lone UTF-16 surrogate
// or that names one member twice in an object is a 400, where encoding/json would take
// it (replacing the bytes with U+FFFD, or keeping the last member).
func TestObjectIsStrict(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"item":"b` + "\xff" + `","quantity":1}`,         // not UTF-8
		`{"item":"b` + "\xed\xa0\x80" + `","quantity":1}`, // a surrogate encoded in UTF-8
		`{"item":"b","quantity":1,"x` + "\xc3" + `":1}`,   // a cut sequence in a name
		`{"item":"\ud800","quantity":1}`,                  // a lone high surrogate
		`{"item":"\ud800x","quantity":1}`,
		`{"item":"\ud800\u0041","quantity":1}`, // high then not low
		`{"item":"\ud800\n","quantity":1}`,
		`{"item":"\udc00","quantity":1}`,       // a lone low surrogate
		`{"item":"\udc00\ud800","quantity":1}`, // the pair reversed
		`{"item":"b","quantity":1,"note":"\uDBFF"}`,
		`{"item":"b","quantity":1,"quantity":2}`,      // a duplicate member
		`{"item":"b","quantity":1,"\u0071uantity":1}`, // the same name, escaped
		`{"item":"b","quantity":1,"x":{"a":1,"a":1}}`, // nested
		`{"item":"b","quantity":1,"x":[{"a":1},{"a":1,"b":[],"b":2}]}`,
	} {
		_, bad := parseOrder([]byte(body))
		if bad == nil {
			t.Errorf("parseOrder(%q) accepted it; want 400", body)
			continue
		}
		checkInvalid(t, body, bad)
	}
	for body, want := range map[string]orderInput{
		`{"item":"\ud83d\ude00","quantity":1}`:                              {"😀", 1}, // a pair
		`{"item":"\\ud800","quantity":1}`:                                   {`\ud800`, 1},
		`{"item":"\"\\","quantity":1,"x":{"item":1},"y":[{"a":1},{"a":2}]}`: {`"\`, 1}, // one name in two objects
		`{"item":"b","quantity":1,"it\u0065m2":"c"}`:                        {"b", 1},
	} {
		got, bad := parseOrder([]byte(body))
		if bad != nil || got != want {
			t.Errorf("parseOrder(%s) = %+v, %v; want %+v", body, got, bad, want)
		}
	}
}
