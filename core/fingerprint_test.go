package core_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
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

// TestFingerprintNormalisesThePath: spellings of a path that RFC 3986 §6.2.2 makes
// equivalent, and a router serves as one route, are one request; an escaped reserved
// character is not its unescaped self.
func TestFingerprintNormalisesThePath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ a, b string }{
		{"/v1/orders", "/v1/%6Frders"},
		{"/v1/orders", "/v1/%6frders"},
		{"/v1/orders", "/%76%31/%6F%72%64%65%72%73"},
		{"/v1/a-b.c_d~e", "/v1/a%2Db%2Ec%5Fd%7Ee"},
		{"/v1/caf%C3%A9", "/v1/caf%c3%a9"},
		{"/v1/café", "/v1/caf%c3%a9"},
		{"/files/a%2Fb", "/files/a%2fb"},
		{"/files/a%2Fb", "/files/%61%2Fb"},
		{"/v1/a%3Bb", "/v1/%61%3bb"},
	} {
		assert.Equal(t, fp(t, "POST", tc.a, "", ""), fp(t, "POST", tc.b, "", ""), "%s and %s", tc.a, tc.b)
	}
	for _, tc := range []struct{ a, b string }{
		{"/v1/orders%2F1", "/v1/orders/1"},
		{"/v1/a%3Bb", "/v1/a;b"},
		{"/v1/a%25", "/v1/a%2525"},
		{"/v1/a%2561", "/v1/aa"},
	} {
		assert.NotEqual(t, fp(t, "POST", tc.a, "", ""), fp(t, "POST", tc.b, "", ""), "%s and %s", tc.a, tc.b)
	}
}

// TestEquivalentPathSpellingsReplay: through the middleware, the key of a /v1/orders
// request sent again to /v1/%6Frders (the route the router serves) replays the
// response, not 422; /v1/orders%2F1 and /v1/orders/1 stay two requests.
func TestEquivalentPathSpellingsReplay(t *testing.T) {
	t.Parallel()
	hs := newHarness(t, core.Config{}, nil)
	send := func(target, key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", target, strings.NewReader(orderJSON))
		r.Header.Set("X-Account-ID", "acct-path")
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		hs.handler.ServeHTTP(w, r)
		return w
	}
	first := send("/v1/orders", "path-1")
	require.Equal(t, http.StatusCreated, first.Code, first.Body.String())
	for _, target := range []string{"/v1/%6Frders", "/v1/%6frders", "/v1/ord%65rs"} {
		again := send(target, "path-1")
		require.Equal(t, http.StatusCreated, again.Code, "%s: %s", target, again.Body)
		assert.Equal(t, "true", again.Header().Get("Idempotent-Replayed"), target)
		assert.Equal(t, first.Body.String(), again.Body.String(), target)
	}
	assert.EqualValues(t, 1, hs.runs.Load(), "the handler ran once")

	require.Equal(t, http.StatusCreated, send("/v1/orders%2F1", "path-2").Code)
	assertProblem(t, send("/v1/orders/1", "path-2"), http.StatusUnprocessableEntity, core.ProblemKeyReused)
	assert.EqualValues(t, 2, hs.runs.Load())
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

// TestFingerprintValuesAreStable pins the fingerprint of a few requests. Stored keys
// carry these values: a change to the bytes hashed would answer every retry that spans an
// upgrade with 422, so it must be deliberate (and this test changed with it). The
// FingerprintWithHeaders values changed once, when each header's number of values joined
// its framing; the default fingerprint's have not changed.
func TestFingerprintValuesAreStable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body, plain, withHeader string
	}{
		{`{"b":[{"z":1,"a":2}],"a":{"y":"x","c":null}}`,
			"2fdc1ac89605f4a88982400e719fc1d07befe6f95ae5348be747ed0f6408a4be", "89fa28aab10d4cbdb9d878d82d5fbaa275370f8c17141fe3895a531cf8d1d37d"},
		{`not json`, "380cbea440833384987dddd24d53fc6095cf00b872276fc428bd5aed9b81d653", "6a6c0ec36b04bd464649518c1ec2e008735725ab1d855ae12bd673afc59545d1"},
		{``, "fbf7d18e1beff6d7b5a19c4d1058f364c8cefe2f82ffd6c47253add9ae0a820e", "a6ef6f449cfc7b062437ed815765f1fca6d9fb0f1c5ef262cf6b7c549ed922c7"},
		{`{"a" : 1}`, "6924dd1c8802467c1d69ae8572655ebffcebca98a116ed6009321088be7c0a6d", "c56104f99b31cff5389bf9116b5881e6fd066475fd802b2ba14b0c039e8fe813"},
	} {
		r := httptest.NewRequest(http.MethodPost, "/v1/orders?b=2&a=1", nil)
		r.Header.Set("X-T", "t")
		fp, err := core.Fingerprint(r, []byte(tc.body))
		require.NoError(t, err)
		assert.Equal(t, tc.plain, hex.EncodeToString(fp), "default fingerprint of %q", tc.body)
		fp, err = core.FingerprintWithHeaders("X-T")(r, []byte(tc.body))
		require.NoError(t, err)
		assert.Equal(t, tc.withHeader, hex.EncodeToString(fp), "fingerprint with X-T of %q", tc.body)
	}
	// A path whose escaping differs from the default adds the path as sent.
	r := httptest.NewRequest(http.MethodPost, "/v1/files/a%2Fb?b=2&a=1", nil)
	fp, err := core.Fingerprint(r, []byte(`{"a":1}`))
	require.NoError(t, err)
	assert.Equal(t, "6ec201722a478314d61fd01aaad95ea4c88bd5dc8a77fd32808e22bf65e77e2c", hex.EncodeToString(fp))
}

// request is a request as a fingerprint sees it: built by hand, so that a case can put
// any bytes in any part (a method "POS" and a path "T/x" included).
func request(method, path, rawPath, query string, header http.Header) *http.Request {
	return &http.Request{Method: method, URL: &url.URL{Path: path, RawPath: rawPath, RawQuery: query}, Header: header}
}

// TestFingerprintPartsDoNotBleed: pairs of requests whose parts, run together, spell the
// same bytes, and which must still hash differently: every part is framed.
func TestFingerprintPartsDoNotBleed(t *testing.T) {
	t.Parallel()
	type side struct {
		r    *http.Request
		body string
	}
	target := func(method, target, body string) side {
		return side{httptest.NewRequest(method, target, nil), body}
	}
	for _, tc := range []struct {
		name string
		a, b side
	}{
		{"method into path", side{request("POST", "/x", "", "", nil), ""}, side{request("POS", "T/x", "", "", nil), ""}},
		{"path into query", side{request("POST", "/x", "", "a=1", nil), ""}, side{request("POST", "/xa=1", "", "", nil), ""}},
		{"escaped ? in the path", target("POST", "/x%3Fa=1", ""), target("POST", "/x?a=1", "")},
		{"query into body", target("POST", "/x?a=1", ""), target("POST", "/x", "a=1")},
		{"path into body", target("POST", "/xa", ""), target("POST", "/x", "a")},
		{"method into body", side{request("POSTX", "/x", "", "", nil), ""}, side{request("POST", "/x", "", "", nil), "X"}},
		{"escaped & in a query value", target("POST", "/x?a=1%26b%3D2", ""), target("POST", "/x?a=1&b=2", "")},
		{"escaped / in the path", target("POST", "/files/a%2Fb", ""), target("POST", "/files/a/b", "")},
		{"escaped / and an escaped %", target("POST", "/files/a%2Fb", ""), target("POST", "/files/a%252Fb", "")},
		{"JSON and the same bytes as a form", target("POST", "/x", `{"a":1}`), target("POST", "/x", `a=1`)},
	} {
		fa, err := core.Fingerprint(tc.a.r, []byte(tc.a.body))
		require.NoError(t, err)
		fb, err := core.Fingerprint(tc.b.r, []byte(tc.b.body))
		require.NoError(t, err)
		assert.NotEqual(t, fa, fb, "%s: two different requests hash the same", tc.name)
	}
}

// TestFingerprintWithHeadersFramesNamesAndValues: a header's value cannot pass for a
// listed name, nor values move between headers, nor an empty header pass for an absent one.
func TestFingerprintWithHeadersFramesNamesAndValues(t *testing.T) {
	t.Parallel()
	f := core.FingerprintWithHeaders("x-a", "X-B")
	for _, tc := range []struct {
		name string
		a, b http.Header
	}{
		{"a value naming the next header", http.Header{"X-A": {"X-B"}}, http.Header{"X-B": {"X-B"}}},
		{"a value moved to the next header", http.Header{"X-A": {"v"}}, http.Header{"X-B": {"v"}}},
		{"two values and one", http.Header{"X-A": {"a", "b"}}, http.Header{"X-A": {"a"}, "X-B": {"b"}}},
		{"absent and empty", http.Header{}, http.Header{"X-A": {""}}},
		{"values in another order", http.Header{"X-A": {"a", "b"}}, http.Header{"X-A": {"b", "a"}}},
		{"two fields and one joined", http.Header{"X-A": {"a", "b"}}, http.Header{"X-A": {"a,b"}}},
	} {
		fa, err := f(request("POST", "/x", "", "", tc.a), nil)
		require.NoError(t, err)
		fb, err := f(request("POST", "/x", "", "", tc.b), nil)
		require.NoError(t, err)
		assert.NotEqual(t, fa, fb, "%s: two different requests hash the same", tc.name)
	}
	unlisted := func(v string) []byte {
		fp, err := f(request("POST", "/x", "", "", http.Header{"X-A": {"a"}, "X-C": {v}}), nil)
		require.NoError(t, err)
		return fp
	}
	assert.Equal(t, unlisted("1"), unlisted("2"), "a header not listed must not change the fingerprint")
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
