package core

import (
	"crypto/sha256"
	"hash"
	"net/http"
	"net/url"
	"sync"
)

// FingerprintFunc computes the fingerprint of a request whose body the engine has already
// read (body is an exact copy; r.Body must not be read). The result is compared byte for
// byte with the stored one: the same key with a different fingerprint is answered 422.
type FingerprintFunc func(r *http.Request, body []byte) ([]byte, error)

// hasher is the pooled state of one fingerprint computation.
type hasher struct {
	buf   []byte // length-prefixed method, path, query and headers, then the canonical body
	h     hash.Hash
	canon canonScratch // the canonicaliser's own, so that one pool round trip serves both
}

var hasherPool = sync.Pool{New: func() any { return &hasher{buf: make([]byte, 0, 1024), h: sha256.New()} }}

// Fingerprint is the default FingerprintFunc: SHA-256 over the method, the URL path, the
// query (parameters sorted, so their order does not matter) and the body. A body that is
// one valid JSON value is canonicalised per RFC 8785 first, whatever its Content-Type
// (clients such as curl -d send JSON as a form), so key order and white space do not
// matter while values do; any other body is hashed as bytes. As RFC 8785 prescribes,
// numbers compare as IEEE 754 doubles: integers beyond 2^53 that round to the same double
// (9007199254740993 and 9007199254740992) are the same payload.
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
	st := hasherPool.Get().(*hasher)
	b := appendField(st.buf[:0], r.Method)
	b = appendField(b, r.URL.Path)
	if r.URL.RawQuery != "" {
		b = appendField(b, canonicalQuery(r.URL.RawQuery))
	} else {
		b = appendField(b, "")
	}
	for _, name := range headers {
		b = appendField(b, name)
		for _, v := range r.Header[name] {
			b = appendField(b, v)
		}
	}
	b = append(b, 0xff) // end of the head; the body follows
	fp := make([]byte, 0, sha256.Size)
	if cb, ok := st.canonicalBody(b, body); ok {
		// The common case: head and canonical body in one buffer, hashed in one call
		// with the digest on the stack.
		b = cb
		sum := sha256.Sum256(b)
		fp = append(fp, sum[:]...)
	} else {
		// Not JSON (or empty): the same byte stream, with the raw body streamed in
		// rather than copied.
		st.h.Reset()
		st.h.Write(b)
		st.h.Write(body)
		fp = st.h.Sum(fp)
	}
	if cap(b) <= maxPooledScratch && st.canon.poolable() {
		st.buf = b[:0]
		hasherPool.Put(st)
	}
	return fp, nil
}

// canonicalBody appends the canonical form of body to b when body is one JSON value.
func (st *hasher) canonicalBody(b, body []byte) ([]byte, bool) {
	if len(body) == 0 {
		return b, false
	}
	cb, err := st.canon.canonicalise(b, body)
	return cb, err == nil
}

// appendField appends a length-prefixed field, so that no two different requests hash
// the same sequence of bytes.
func appendField(b []byte, s string) []byte {
	n := len(s)
	b = append(b, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	return append(b, s...)
}

func canonicalQuery(raw string) string {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return raw
	}
	return q.Encode()
}
