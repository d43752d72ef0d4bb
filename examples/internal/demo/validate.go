package demo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// object parses body as one JSON object, or returns the 400 reply saying why not. It is
// stricter than encoding/json, which takes invalid UTF-8 and lone UTF-16 surrogates
// (stored as U+FFFD) and lets the last of two members with one name win: RFC 8259 §8.1
// asks for UTF-8 text, and a body whose two readers (a proxy, this server) may see
// different values is refused rather than guessed at. See strict.
func object(body []byte) (map[string]json.RawMessage, *Reply) {
	trimmed := bytes.TrimSpace(body)
	if !json.Valid(trimmed) {
		r := invalid("The body is not valid JSON.")
		return nil, &r
	}
	if len(trimmed) == 0 || trimmed[0] != '{' {
		r := invalid("The body must be a JSON object.")
		return nil, &r
	}
	if why := strict(trimmed); why != "" {
		r := invalid(why)
		return nil, &r
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &m); err != nil {
		r := invalid("The body is not valid JSON.")
		return nil, &r
	}
	return m, nil
}

// strict returns why doc, a valid JSON text (json.Valid), is not one the demo takes, or
// "" when it is: doc must be UTF-8, its \u escapes must not leave a UTF-16 surrogate
// unpaired, and no object may have two members of one name (compared after unescaping,
// so "a" and "\u0061" are one name).
//
// It is one pass over the bytes rather than a second JSON library: encoding/json/v2
// refuses all three by default but is still behind GOEXPERIMENT in Go 1.26, and
// go-json-experiment/json would add a dependency to the module for one check of a demo.
// Since doc is valid JSON, the scanner only follows strings and the nesting.
func strict(doc []byte) string {
	if !utf8.Valid(doc) {
		return "The body is not UTF-8 text."
	}
	type frame struct {
		names   map[string]bool // an object's member names so far; nil for an array
		wantKey bool            // the next string in this object is a member name
	}
	var stack []frame
	for i := 0; i < len(doc); i++ {
		switch doc[i] {
		case '{':
			stack = append(stack, frame{names: map[string]bool{}, wantKey: true})
		case '[':
			stack = append(stack, frame{})
		case '}', ']':
			stack = stack[:len(stack)-1]
		case ',':
			if top := &stack[len(stack)-1]; top.names != nil {
				top.wantKey = true
			}
		case '"':
			end, why := stringEnd(doc, i)
			if why != "" {
				return why
			}
			if top := len(stack) - 1; top >= 0 && stack[top].wantKey {
				var name string
				_ = json.Unmarshal(doc[i:end], &name) // valid JSON: a string decodes
				if stack[top].names[name] {
					return "The body has two members named " + quoteID(clip(name)) + " in one object."
				}
				stack[top].names[name] = true
				stack[top].wantKey = false
			}
			i = end - 1
		}
	}
	return ""
}

// stringEnd returns the end of the JSON string that starts at doc[start] (just past its
// closing quote), or why it is refused: a \u escape of a UTF-16 surrogate that is not
// part of a pair (a high one followed by a low one) is no character.
func stringEnd(doc []byte, start int) (int, string) {
	const lone = "The body has a \\u escape of a lone UTF-16 surrogate, which is no character."
	for i := start + 1; i < len(doc); i++ {
		switch doc[i] {
		case '"':
			return i + 1, ""
		case '\\':
			if doc[i+1] != 'u' {
				i++ // \" \\ \/ \b \f \n \r \t
				continue
			}
			r := hex4(doc[i+2 : i+6])
			i += 5
			switch {
			case utf16.IsSurrogate(r) && r >= 0xdc00: // a low surrogate first
				return 0, lone
			case utf16.IsSurrogate(r):
				if i+6 >= len(doc) || doc[i+1] != '\\' || doc[i+2] != 'u' {
					return 0, lone
				}
				if low := hex4(doc[i+3 : i+7]); low < 0xdc00 || low > 0xdfff {
					return 0, lone
				}
				i += 6
			}
		}
	}
	return len(doc), "" // unreachable for valid JSON
}

// hex4 decodes the four hex digits of a \u escape (valid JSON: they are hex digits).
func hex4(b []byte) rune {
	n, _ := strconv.ParseUint(string(b), 16, 16)
	return rune(n)
}

// maxSafeInt is the largest integer the fields take: 2^53 - 1, the largest n for which
// n and n+1 are distinct doubles. The request fingerprint compares JSON numbers as
// doubles (RFC 8785), so 9007199254740993 and 9007199254740992 are one payload there: an
// API that took both would replay the payment of one for a retry of the other.
const maxSafeInt = 1<<53 - 1

// positiveInt reads field as an integer from 1 to maxSafeInt. A number with an integral
// value (2.0, 2e0) counts, since the request fingerprint treats it as the same value.
func positiveInt(m map[string]json.RawMessage, field string) (int64, *Reply) {
	fail := func(detail string) (int64, *Reply) {
		r := invalid(detail)
		return 0, &r
	}
	raw, ok := m[field]
	if !ok {
		return fail(fmt.Sprintf("%q is required: an integer from 1 to %d.", field, maxSafeInt))
	}
	wrong := func() (int64, *Reply) {
		return fail(fmt.Sprintf("%q must be an integer from 1 to %d.", field, maxSafeInt))
	}
	s := string(raw)
	if s == "" || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) {
		return wrong()
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || f != math.Trunc(f) || math.Abs(f) > maxSafeInt {
			return wrong()
		}
		n = int64(f)
	}
	if n < 1 || n > maxSafeInt {
		return wrong()
	}
	return n, nil
}

// str reads field as a JSON string.
func str(m map[string]json.RawMessage, field, want string) (string, *Reply) {
	raw, ok := m[field]
	var s string
	if !ok || len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		r := invalid(fmt.Sprintf("%q is required: %s.", field, want))
		return "", &r
	}
	return s, nil
}

type orderInput struct {
	Item     string
	Quantity int64
}

// parseOrder validates {"item": "<non-empty string>", "quantity": <integer 1…2^53-1>}.
// Other fields are ignored.
func parseOrder(body []byte) (orderInput, *Reply) {
	m, bad := object(body)
	if bad != nil {
		return orderInput{}, bad
	}
	item, bad := str(m, "item", "a non-empty string")
	if bad != nil {
		return orderInput{}, bad
	}
	switch {
	case item == "":
		r := invalid(`"item" must be a non-empty string.`)
		return orderInput{}, &r
	case strings.ContainsRune(item, 0):
		// PostgreSQL text cannot hold NUL: refused the same way on every database.
		r := invalid(`"item" must not contain the NUL character.`)
		return orderInput{}, &r
	}
	qty, bad := positiveInt(m, "quantity")
	if bad != nil {
		return orderInput{}, bad
	}
	return orderInput{Item: item, Quantity: qty}, nil
}

type paymentInput struct {
	AmountCents int64
	Currency    string
}

// parsePayment validates {"amount_cents": <integer 1…2^53-1>, "currency": "<3 letters>"}.
// Other fields are ignored; the currency is kept as sent.
func parsePayment(body []byte) (paymentInput, *Reply) {
	m, bad := object(body)
	if bad != nil {
		return paymentInput{}, bad
	}
	amount, bad := positiveInt(m, "amount_cents")
	if bad != nil {
		return paymentInput{}, bad
	}
	cur, bad := str(m, "currency", "3 letters")
	if bad != nil {
		return paymentInput{}, bad
	}
	if len(cur) != 3 || !isLetter(cur[0]) || !isLetter(cur[1]) || !isLetter(cur[2]) {
		r := invalid(`"currency" must be 3 letters, such as "EUR".`)
		return paymentInput{}, &r
	}
	return paymentInput{AmountCents: amount, Currency: cur}, nil
}

func isLetter(c byte) bool { return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' }
