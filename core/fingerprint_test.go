package core_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
)

func fp(t testing.TB, method, target, contentType, body string) []byte {
	t.Helper()
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	sum, err := core.Fingerprint(r, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(sum) != 32 {
		t.Fatalf("fingerprint is %d bytes, want 32", len(sum))
	}
	return sum
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	const js = "application/json"
	base := fp(t, "POST", "/v1/orders", js, `{"item":"book","quantity":2}`)
	same := map[string][]byte{
		"key order and white space": fp(t, "POST", "/v1/orders", js, "{ \"quantity\": 2,\n \"item\": \"book\" }"),
		"charset parameter":         fp(t, "POST", "/v1/orders", "application/json; charset=utf-8", `{"quantity":2,"item":"book"}`),
		"number spelling":           fp(t, "POST", "/v1/orders", js, `{"item":"book","quantity":2.0}`),
		"escaped string":            fp(t, "POST", "/v1/orders", js, `{"item":"b\u006fok","quantity":2}`),
		"sent as a form (curl -d)":  fp(t, "POST", "/v1/orders", "application/x-www-form-urlencoded", "{ \"quantity\": 2, \"item\": \"book\" }"),
		"no Content-Type":           fp(t, "POST", "/v1/orders", "", `{"quantity":2,"item":"book"}`),
	}
	for name, got := range same {
		if !bytes.Equal(got, base) {
			t.Errorf("%s: fingerprint differs, want equal", name)
		}
	}
	differ := map[string][]byte{
		"value":       fp(t, "POST", "/v1/orders", js, `{"item":"book","quantity":3}`),
		"method":      fp(t, "PATCH", "/v1/orders", js, `{"item":"book","quantity":2}`),
		"path":        fp(t, "POST", "/v1/payments", js, `{"item":"book","quantity":2}`),
		"query":       fp(t, "POST", "/v1/orders?dry_run=1", js, `{"item":"book","quantity":2}`),
		"extra field": fp(t, "POST", "/v1/orders", js, `{"item":"book","quantity":2,"x":null}`),
	}
	for name, got := range differ {
		if bytes.Equal(got, base) {
			t.Errorf("%s: fingerprint equal, want different", name)
		}
	}
	if !bytes.Equal(fp(t, "POST", "/x?b=2&a=1", "", ""), fp(t, "POST", "/x?a=1&b=2", "", "")) {
		t.Error("query parameter order changed the fingerprint")
	}
	if !bytes.Equal(fp(t, "POST", "/x", js, "{not json"), fp(t, "POST", "/x", js, "{not json")) {
		t.Error("invalid JSON is not hashed deterministically")
	}
	if bytes.Equal(fp(t, "POST", "/x", "text/plain", "a b"), fp(t, "POST", "/x", "text/plain", "a  b")) {
		t.Error("a non-JSON body must be hashed as bytes")
	}
	if bytes.Equal(fp(t, "POST", "/x", js, "{not json"), fp(t, "POST", "/x", js, "{not  json")) {
		t.Error("invalid JSON must be hashed as bytes")
	}
}

func TestFingerprintWithHeaders(t *testing.T) {
	t.Parallel()
	f := core.FingerprintWithHeaders("x-tenant")
	sum := func(tenant string) []byte {
		r := httptest.NewRequest("POST", "/x", nil)
		r.Header.Set("X-Tenant", tenant)
		b, err := f(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if bytes.Equal(sum("a"), sum("b")) {
		t.Fatal("a listed header did not change the fingerprint")
	}
	if !bytes.Equal(sum("a"), sum("a")) {
		t.Fatal("fingerprint not deterministic")
	}
}

// FuzzFingerprint: re-encoding a JSON body (other key order, other white space) keeps
// the fingerprint; changing a value changes it.
func FuzzFingerprint(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[true,null,"x"]}`, `[1,2,3]`, `{"n":1e3,"s":"\u00e9"}`, `"str"`, `{}`, `{"z":{"y":{"x":0.1}}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var v any
		if json.Unmarshal([]byte(body), &v) != nil {
			return
		}
		if _, err := jcs.Transform([]byte(body)); err != nil {
			return // not I-JSON (duplicate keys, lone surrogates…): hashed as bytes, by design
		}
		pretty, err := json.MarshalIndent(v, " ", "   ")
		if err != nil {
			return
		}
		a := fp(t, "POST", "/f", "application/json", body)
		b := fp(t, "POST", "/f", "application/json", string(pretty))
		if !bytes.Equal(a, b) {
			t.Fatalf("equivalent JSON hashed differently:\n%s\n%s", body, pretty)
		}
		changed, err := json.Marshal([]any{v, "changed"})
		if err != nil {
			return
		}
		if bytes.Equal(a, fp(t, "POST", "/f", "application/json", string(changed))) {
			t.Fatalf("changed JSON hashed the same: %s", changed)
		}
	})
}

// TestFingerprintValuesAreStable pins the default fingerprint of a few requests. Stored
// keys carry these values: a change to the bytes hashed would answer every retry that
// spans an upgrade with 422, so it must be deliberate (and this test changed with it).
func TestFingerprintValuesAreStable(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"b":[{"z":1,"a":2}],"a":{"y":"x","c":null}}`: "94adfab686514becaf6ed45bc2db2ac34f7d57fdbcf6dee01294d6ce170e5489",
		`not json`:  "22ad594eacc9b9326acc3df68163f186b961c917affa94f965af05b08352304c",
		``:          "f91ed94772df3f6c667829ca179a35bd5d86ddd6b507768ea2f2be6e62aee78f",
		`{"a" : 1}`: "a8d93c94cb6c780101f2f493a9d82aab42565405c04d8f6ae4f3885eb16f9cb3",
	} {
		r := httptest.NewRequest(http.MethodPost, "/v1/orders?b=2&a=1", nil)
		r.Header.Set("X-T", "t")
		fp, err := core.FingerprintWithHeaders("X-T")(r, []byte(body))
		require.NoError(t, err)
		assert.Equal(t, want, hex.EncodeToString(fp), "fingerprint of %q", body)
	}
}

// BenchmarkFingerprint splits the fingerprint of internal/peerbench's request (230
// bytes of JSON, three levels, every one out of order) into its two costs: the whole
// default fingerprint (canonicalisation and SHA-256), and SHA-256 alone over as many
// bytes as it hashes.
func BenchmarkFingerprint(b *testing.B) {
	body := []byte(`{"customer":{"id":"cus_8e03978e","email":"ada@example.com","address":{"city":"London","zip":"N1 9GU"}},` +
		`"items":[{"sku":"book-1","quantity":2,"price_cents":1299},{"sku":"pen-7","quantity":1,"price_cents":250}],"currency":"GBP"}`)
	r := httptest.NewRequest(http.MethodPost, "/v1/orders", nil)
	b.Run("nested", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := core.Fingerprint(r, body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sha256-only", func(b *testing.B) {
		// 27 bytes of head (method, path, query, each length-prefixed, and a marker)
		// before the canonical body, which is as long as this compact body.
		in := append(make([]byte, 27), body...)
		b.ReportAllocs()
		for b.Loop() {
			_ = sha256.Sum256(in)
		}
	})
}
