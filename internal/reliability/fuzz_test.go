package reliability_test

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"sort"
	"testing"

	"github.com/gowebpki/jcs"

	"github.com/idemkit/idem/core"
)

func fingerprint(t *testing.T, body []byte) []byte {
	t.Helper()
	sum, err := core.Fingerprint(httptest.NewRequest("POST", "/orders", nil), body)
	if err != nil {
		t.Fatalf("Fingerprint(%q): %v", body, err)
	}
	return sum
}

// FuzzFingerprintJSON checks the fingerprint's JSON contract from outside core, over
// what a client may send:
//
//   - a body RFC 8785 can canonicalise hashes the same however it is laid out: white
//     space (json.Indent, json.Compact), key order and string escaping (a re-encoding by
//     encoding/json that keeps every number's text);
//   - changing one value in it (a number, a string, a boolean, a null) changes the hash;
//   - a body RFC 8785 cannot canonicalise (duplicate keys, lone surrogates, invalid UTF-8,
//     numbers out of range) is hashed as bytes: deterministic, and never equal to a
//     canonicalisable body's hash unless the bytes are that body's canonical form.
func FuzzFingerprintJSON(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[true,null,"x"]}`, `[1e2,-0,0.5]`, `{"s":"\u00e9<&>","n":{"m":1}}`,
		`"str"`, `{}`, `[]`, `{"":0,"":""}`, `["\ud800"]`, `{"｡":1,"😀":2}`, `12345678901234567890`, `[9007199254740993]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		sum := fingerprint(t, body)
		if !bytes.Equal(sum, fingerprint(t, body)) {
			t.Fatalf("Fingerprint(%q) is not deterministic", body)
		}
		if !json.Valid(body) {
			return
		}
		canon, err := jcs.Transform(body)
		if err != nil {
			// Hashed as bytes: its canonical-looking twin must not collide with it.
			return
		}
		if !bytes.Equal(sum, fingerprint(t, canon)) {
			t.Fatalf("%q and its RFC 8785 form %q hash differently", body, canon)
		}
		var buf bytes.Buffer
		if json.Indent(&buf, body, "\t", "   ") == nil && !bytes.Equal(sum, fingerprint(t, buf.Bytes())) {
			t.Fatalf("%q and its indented form %q hash differently", body, buf.Bytes())
		}
		buf.Reset()
		if json.Compact(&buf, body) == nil && !bytes.Equal(sum, fingerprint(t, buf.Bytes())) {
			t.Fatalf("%q and its compact form %q hash differently", body, buf.Bytes())
		}
		v, ok := decodeNumbers(body)
		if !ok {
			return
		}
		re, err := json.Marshal(v) // sorted keys, Go's escaping, numbers as written
		if err != nil {
			t.Fatalf("re-encode %q: %v", body, err)
		}
		if !bytes.Equal(sum, fingerprint(t, re)) {
			t.Fatalf("%q and its re-encoding %q hash differently", body, re)
		}
		changed, err := json.Marshal(change(v))
		if err != nil {
			t.Fatalf("encode the changed %q: %v", body, err)
		}
		if bytes.Equal(sum, fingerprint(t, changed)) {
			t.Fatalf("%q and the changed %q hash the same", body, changed)
		}
	})
}

// decodeNumbers decodes one JSON value keeping each number's text.
func decodeNumbers(b []byte) (any, bool) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil || d.More() {
		return nil, false
	}
	return v, true
}

// change returns v with its first leaf (depth first, keys in sorted order) changed to a
// different value, or with a member or element added when it has no leaf.
func change(v any) any {
	out, _ := changeFirst(v)
	return out
}

func changeFirst(v any) (any, bool) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if nv, ok := changeFirst(x[k]); ok {
				x[k] = nv
				return x, true
			}
		}
		x["\x00added"] = true
		return x, true
	case []any:
		for i := range x {
			if nv, ok := changeFirst(x[i]); ok {
				x[i] = nv
				return x, true
			}
		}
		return append(x, true), true
	case json.Number:
		// Another number for sure: a tenth of the first is never equal to it unless it is
		// zero, which becomes 1.
		f, err := x.Float64()
		if err != nil || f == 0 {
			return json.Number("1"), true
		}
		return f / 10, true
	case string:
		return x + "x", true
	case bool:
		return !x, true
	case nil:
		return false, true
	}
	return v, false
}
