package core

import (
	"crypto/sha256"
	"hash"
	"net/http"
	"net/url"
	"reflect"
	"strings"
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

// hasherPool keeps the fingerprint's buffers and the canonicaliser's state: without it a
// Gin + memstore first request takes 6 allocations and 45% more time, a replay 86% more
// (the measurement of bufferPool's comment).
var hasherPool = sync.Pool{New: func() any { return &hasher{buf: make([]byte, 0, 1024), h: sha256.New()} }}

// Fingerprint is the default FingerprintFunc: SHA-256 over the method, the URL path, the
// query (parameters sorted, so their order does not matter) and the body, each part
// length-prefixed so that none can bleed into the next. The path is the decoded one, plus
// the path as sent when its escaping differs from the default (so /files/a%2Fb and
// /files/a/b differ, as they do to a router matching escaped segments), in RFC 3986's
// normal form (so /v1/%6Frders is /v1/orders, and %c3%a9 is %C3%A9). A body that is
// one valid JSON value (of at most 256 MiB) is canonicalised per RFC 8785 first, whatever its Content-Type
// (clients such as curl -d send JSON as a form), so key order and white space do not
// matter while values do; any other body is hashed as bytes. As RFC 8785 prescribes,
// numbers compare as IEEE 754 doubles: integers beyond 2^53 that round to the same double
// (9007199254740993 and 9007199254740992) are the same payload.
func Fingerprint(r *http.Request, body []byte) ([]byte, error) {
	return appendFingerprint(make([]byte, 0, sha256.Size), r, body, nil), nil
}

// isFingerprint reports whether f is Fingerprint.
func isFingerprint(f FingerprintFunc) bool {
	return reflect.ValueOf(f).Pointer() == reflect.ValueOf(Fingerprint).Pointer()
}

// FingerprintWithHeaders returns a FingerprintFunc that also covers the named request
// headers (for example a tenant header that changes the meaning of the body): each name,
// its number of values and each value, length-prefixed, so a value can never pass for a
// name or for another header's value ({X-A: "X-B"} and {X-B: "X-B"} differ). A header
// absent and a header sent empty differ too.
func FingerprintWithHeaders(names ...string) FingerprintFunc {
	canon := make([]string, len(names))
	for i, n := range names {
		canon[i] = http.CanonicalHeaderKey(n)
	}
	return func(r *http.Request, body []byte) ([]byte, error) {
		return appendFingerprint(make([]byte, 0, sha256.Size), r, body, canon), nil
	}
}

// appendFingerprint appends the fingerprint of r with body, covering headers too, to fp.
func appendFingerprint(fp []byte, r *http.Request, body []byte, headers []string) []byte {
	st := hasherPool.Get().(*hasher)
	b := appendField(st.buf[:0], r.Method)
	b = appendField(b, r.URL.Path)
	if r.URL.RawQuery != "" {
		b = appendField(b, canonicalQuery(r.URL.RawQuery))
	} else {
		b = appendField(b, "")
	}
	if raw := r.URL.RawPath; raw != "" && r.URL.EscapedPath() == raw {
		// The path as sent, when its escaping carries what Path lost (an escaped '/'). The
		// field is tagged and absent otherwise, so the fingerprint of every other request
		// is unchanged (stored keys keep matching). A length prefix never starts with the
		// tag: its first byte is 0 for any field shorter than 16 MiB.
		if raw = normalisePath(raw); raw != (&url.URL{Path: r.URL.Path}).EscapedPath() {
			b = append(b, rawPathTag)
			b = appendField(b, raw)
		}
	}
	for _, name := range headers {
		b = appendField(b, name)
		vs := r.Header[name]
		b = appendCount(b, len(vs))
		for _, v := range vs {
			b = appendField(b, v)
		}
	}
	b = append(b, headEnd) // the body follows
	switch {
	case len(body) == 0 || st.canon.parse(body) != nil:
		// Not JSON (or empty): the raw body is streamed in rather than copied.
		st.h.Reset()
		st.h.Write(b)
		st.h.Write(body)
		fp = st.h.Sum(fp)
	case len(b)+len(st.canon.text) <= emitChunk:
		// The common case: head and canonical body in one buffer, hashed in one call
		// with the digest on the stack.
		b = st.canon.emit(b, nil)
		sum := sha256.Sum256(b)
		fp = append(fp, sum[:]...)
	default:
		// A large document is hashed as emit writes it, never copied whole.
		st.h.Reset()
		b = st.canon.emit(b, st.h)
		st.h.Write(b)
		fp = st.h.Sum(fp)
	}
	if cap(b) <= maxPooledScratch && st.canon.poolable() {
		st.buf = b[:0]
		hasherPool.Put(st)
	}
	return fp
}

// normalisePath returns a valid escaped path in the normal form of RFC 3986 §6.2.2, so
// that spellings a router takes for the same path (/v1/%6Frders and /v1/orders) are the
// same request: an escaped unreserved character decoded (§6.2.2.2), every other escape,
// reserved ones included, kept with its hex digits in upper case (§6.2.2.1).
func normalisePath(raw string) string {
	if !strings.Contains(raw, "%") {
		return raw
	}
	const upperHex = "0123456789ABCDEF"
	b := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		if raw[i] != '%' || i+2 >= len(raw) {
			b = append(b, raw[i])
			continue
		}
		c := unhex(raw[i+1])<<4 | unhex(raw[i+2])
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b = append(b, c)
		} else {
			b = append(b, '%', upperHex[c>>4], upperHex[c&0xF])
		}
		i += 2
	}
	return string(b)
}

// unhex returns the value of the hex digit c.
func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// Markers in the head of the hashed bytes, where a length prefix could otherwise start.
const (
	rawPathTag = 0xfe // the escaped path follows
	headEnd    = 0xff // the head ends; the body follows
)

// appendField appends a length-prefixed field, so that a field's bytes cannot pass for
// the next field's.
func appendField(b []byte, s string) []byte {
	return append(appendCount(b, len(s)), s...)
}

// appendCount appends n as 4 bytes, big-endian.
func appendCount(b []byte, n int) []byte {
	return append(b, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

func canonicalQuery(raw string) string {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return raw
	}
	return q.Encode()
}
