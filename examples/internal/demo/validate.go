package demo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// object parses body as one JSON object, or returns the 400 reply saying why not.
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
	var m map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &m); err != nil {
		r := invalid("The body is not valid JSON.")
		return nil, &r
	}
	return m, nil
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
