package core

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// KeySource says where the engine finds a request's idempotency key (Config.Key). The
// zero value is the Config.HeaderName header (Idempotency-Key by default) with parseKey's
// grammar. A webhook receiver, whose provider sends no Idempotency-Key but names every
// delivery and re-sends it until it gets a 2xx, takes the key from the delivery instead:
//
//   - KeyFromHeader: a delivery header, such as GitHub's X-GitHub-Delivery;
//   - KeyFromJSON: an event ID in the JSON body, such as the "id" of a Stripe event;
//   - KeyFromFunc: a function of your own.
//
// Whatever the source, the key is held to the key contract: 1–255 characters of
// printable ASCII and at least Config.MinKeyLength. A missing key is a 400 key-missing
// problem (or, with Config.KeyOptional, passes through untouched); a malformed one is a
// 400 key-invalid problem. The header sources never read the body to find the key; the
// body sources read it once, bounded by Config.MaxRequestBody, before looking for the key
// (over it: 413), and the fingerprint and the handler get that same copy.
type KeySource struct {
	kind   keyKind
	header string   // canonical header name, for keyHeader
	name   string   // the header name as the caller spelled it, for problem details
	path   []string // JSON member names, for keyJSON
	fn     KeyFunc  // for keyFunc
	err    error    // a construction error, reported by New
}

type keyKind uint8

const (
	keyIdempotencyHeader keyKind = iota // the zero KeySource: Config.HeaderName, parseKey
	keyHeader                           // KeyFromHeader
	keyJSON                             // KeyFromJSON
	keyFunc                             // KeyFromFunc
)

// KeyFunc finds the key of a request for KeyFromFunc. body is the whole request body,
// already read (r.Body must not be read); it is valid only during the call. KeyFunc
// reports present=false when the request carries no key, and an error for a malformed
// one (the engine wraps it in ErrInvalidKey if it does not already).
type KeyFunc func(r *http.Request, body []byte) (key string, present bool, err error)

// KeyFromHeader takes the key from the header name, such as a webhook provider's
// delivery ID (X-GitHub-Delivery, X-Shopify-Webhook-Id, svix-id). The value is the key
// as it stands once surrounding spaces and tabs are trimmed: unlike Idempotency-Key it is
// not an RFC 8941 string, so quotes are part of it. More than one field of that header
// is ambiguous, and so malformed. It does not read the body.
func KeyFromHeader(name string) KeySource {
	ks := KeySource{kind: keyHeader, header: http.CanonicalHeaderKey(name), name: name}
	if !httpguts.ValidHeaderFieldName(name) {
		ks.err = fmt.Errorf("KeyFromHeader: %q is not a valid header name", name)
	}
	return ks
}

// KeyFromJSON takes the key from a member of the JSON body: KeyFromJSON("id") for
// {"id":"evt_1",…}, KeyFromJSON("data", "id") for {"data":{"id":…}}. The member must be
// a string (the key is its content) or a number (the key is its literal text, so 42 and
// 42.0 are two keys). A missing member, or one that is null, means the request has no
// key; an empty body, too. A body that is not a JSON object, a path through a value that
// is not an object, or a member of another type makes the key malformed.
func KeyFromJSON(path ...string) KeySource {
	ks := KeySource{kind: keyJSON, path: append([]string(nil), path...)}
	if len(path) == 0 {
		ks.err = errors.New("KeyFromJSON: no member name")
	}
	return ks
}

// KeyFromFunc takes the key from fn, which sees the request and its body. The engine
// reads the body before calling fn, and holds what fn returns to the key contract.
func KeyFromFunc(fn KeyFunc) KeySource {
	ks := KeySource{kind: keyFunc, fn: fn}
	if fn == nil {
		ks.err = errors.New("KeyFromFunc: nil function")
	}
	return ks
}

// readsBody reports whether the key is looked for in the body, which must then be read
// first.
func (ks *KeySource) readsBody() bool { return ks.kind == keyJSON || ks.kind == keyFunc }

// find returns the key of r. body is nil unless readsBody. minLen is Config.MinKeyLength
// and header the canonical Config.HeaderName, for the zero KeySource.
func (ks *KeySource) find(r *http.Request, body []byte, header string, minLen int) (key string, present bool, err error) {
	switch ks.kind {
	case keyIdempotencyHeader:
		return parseKey(r.Header[header], minLen)
	case keyHeader:
		vs := r.Header[ks.header]
		switch len(vs) {
		case 0:
			return "", false, nil
		case 1:
			key, present = strings.Trim(vs[0], " \t"), true
		default:
			return "", true, fmt.Errorf("%w: %d header fields, want one", ErrInvalidKey, len(vs))
		}
	case keyJSON:
		key, present, err = jsonKey(body, ks.path)
	case keyFunc:
		key, present, err = ks.fn(r, body)
		if err != nil && !errors.Is(err, ErrInvalidKey) {
			err = fmt.Errorf("%w: %w", ErrInvalidKey, err)
		}
	}
	if err != nil || !present {
		return "", present, err
	}
	if err := checkKey(key, minLen); err != nil {
		return "", true, err
	}
	return key, true, nil
}

// names says how problem details name the key (header is Config.HeaderName): noun in
// "This <noun> was first used…", what in "The <what> is malformed", where in "<method>
// <path> requires <where>".
func (ks *KeySource) names(header string) (noun, what, where string) {
	switch ks.kind {
	case keyIdempotencyHeader, keyHeader:
		if ks.kind == keyHeader {
			header = ks.name
		}
		return header, header + " header", "an " + header + " header"
	case keyJSON:
		member := strconv.Quote(strings.Join(ks.path, "."))
		return "key (JSON member " + member + ")", "JSON member " + member, "a JSON body with the member " + member
	}
	return "key", "idempotency key", "an idempotency key"
}

// noun is names' noun.
func (ks *KeySource) noun(header string) string {
	noun, _, _ := ks.names(header)
	return noun
}

// jsonKey walks body along path and returns the string or number found there.
func jsonKey(body []byte, path []string) (string, bool, error) {
	raw := bytes.TrimSpace(body)
	if len(raw) == 0 {
		return "", false, nil
	}
	for i, name := range path {
		if raw[0] != '{' {
			if i == 0 {
				return "", true, fmt.Errorf("%w: the body is not a JSON object", ErrInvalidKey)
			}
			return "", true, fmt.Errorf("%w: %q is a JSON %s, not an object", ErrInvalidKey, strings.Join(path[:i], "."), jsonKind(raw[0]))
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return "", true, fmt.Errorf("%w: the body is not valid JSON: %w", ErrInvalidKey, err)
		}
		v, ok := obj[name]
		if !ok {
			return "", false, nil
		}
		raw = bytes.TrimSpace(v)
		if string(raw) == "null" {
			return "", false, nil
		}
	}
	switch c := raw[0]; {
	case c == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", true, fmt.Errorf("%w: %w", ErrInvalidKey, err)
		}
		return s, true, nil
	case c == '-' || (c >= '0' && c <= '9'):
		return string(raw), true, nil
	default:
		return "", true, fmt.Errorf("%w: a JSON %s, want a string or a number", ErrInvalidKey, jsonKind(c))
	}
}

// jsonKind names the type of the JSON value starting with c.
func jsonKind(c byte) string {
	switch c {
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case '"':
		return "string"
	default:
		return "number"
	}
}
