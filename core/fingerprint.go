package core

import (
	"crypto/sha256"
	"hash"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/gowebpki/jcs"
)

// FingerprintFunc computes the fingerprint of a request whose body the engine has already
// read (body is an exact copy; r.Body must not be read). The result is compared byte for
// byte with the stored one: the same key with a different fingerprint is answered 422.
type FingerprintFunc func(r *http.Request, body []byte) ([]byte, error)

var sha256Pool = sync.Pool{New: func() any { return sha256.New() }}

// Fingerprint is the default FingerprintFunc: SHA-256 over the method, the URL path, the
// query (parameters sorted, so their order does not matter) and the body. A JSON body
// (Content-Type application/json or any +json type) is canonicalised per RFC 8785 first,
// so key order and white space do not matter while values do; a body that does not parse
// as JSON, and every other body, is hashed as bytes.
func Fingerprint(r *http.Request, body []byte) ([]byte, error) {
	return fingerprint(r, body, nil)
}

// FingerprintWithHeaders returns a FingerprintFunc that also covers the named request
// headers (for example a tenant header that changes the meaning of the body).
func FingerprintWithHeaders(names ...string) FingerprintFunc {
	canon := make([]string, len(names))
	for i, n := range names {
		canon[i] = http.CanonicalHeaderKey(n)
	}
	return func(r *http.Request, body []byte) ([]byte, error) {
		return fingerprint(r, body, canon)
	}
}

func fingerprint(r *http.Request, body []byte, headers []string) ([]byte, error) {
	h := sha256Pool.Get().(hash.Hash)
	defer sha256Pool.Put(h)
	h.Reset()
	writeField(h, r.Method)
	writeField(h, r.URL.Path)
	if r.URL.RawQuery != "" {
		writeField(h, canonicalQuery(r.URL.RawQuery))
	} else {
		writeField(h, "")
	}
	for _, name := range headers {
		writeField(h, name)
		for _, v := range r.Header[name] {
			writeField(h, v)
		}
	}
	h.Write([]byte{0xff}) // end of the head; the body follows
	if isJSON(r.Header.Get("Content-Type")) && len(body) > 0 {
		if canon, err := jcs.Transform(body); err == nil {
			h.Write(canon)
			return h.Sum(nil), nil
		}
	}
	h.Write(body)
	return h.Sum(nil), nil
}

// writeField writes a length-prefixed field so that no two different requests hash the
// same sequence of bytes.
func writeField(h hash.Hash, s string) {
	n := len(s)
	h.Write([]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
	h.Write([]byte(s))
}

func canonicalQuery(raw string) string {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return raw
	}
	return q.Encode()
}

func isJSON(contentType string) bool {
	if contentType == "" {
		return false
	}
	if strings.HasPrefix(contentType, "application/json") && (len(contentType) == 16 || contentType[16] == ';' || contentType[16] == ' ') {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}
