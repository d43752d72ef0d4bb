package core

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/dunglas/httpsfv"
)

// MaxKeyLength is the longest key accepted, in characters after unquoting.
const MaxKeyLength = 255

// parseKey parses the values of the Idempotency-Key header fields of one request, as
// http.Header.Values returns them. It reports ok=false when there is no field at all.
//
// The grammar (docs/problems.md, "key-invalid"): surrounding spaces and tabs are trimmed; a
// value starting with '"' is an RFC 8941 sf-string (escapes \" and \\ only; parameters
// after it are ignored) whose content is the key; any other value is the key itself and
// may not contain a space or a comma (HTTP joins repeated fields with commas, so such a
// value is ambiguous). After unquoting the key is minLen–255 characters of printable ASCII
// (0x20–0x7E). More than one field is ambiguous too. Every rejection wraps ErrInvalidKey.
func parseKey(values []string, minLen int) (key string, ok bool, err error) {
	switch len(values) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", true, fmt.Errorf("%w: %d header fields, want one", ErrInvalidKey, len(values))
	}
	if key := values[0]; isPlainKey(key) && len(key) <= MaxKeyLength && len(key) >= minLen {
		return key, true, nil // the common case, which parseKeyValue accepts as it is
	}
	return parseKeyValue(values[0], minLen)
}

// parseKeyValue is parseKey's general path, for the value of the one field.
func parseKeyValue(value string, minLen int) (key string, ok bool, err error) {
	v := strings.Trim(value, " \t")
	if strings.HasPrefix(v, `"`) {
		item, perr := httpsfv.UnmarshalItem([]string{v})
		if perr != nil {
			return "", true, fmt.Errorf("%w: malformed quoted key: %w", ErrInvalidKey, perr)
		}
		s, isString := item.Value.(string)
		if !isString {
			return "", true, fmt.Errorf("%w: quoted key is not an sf-string", ErrInvalidKey)
		}
		key = s
	} else {
		if strings.ContainsAny(v, " ,") {
			return "", true, fmt.Errorf("%w: a bare key may not contain a space or a comma (quote it)", ErrInvalidKey)
		}
		key = v
	}
	if err := checkKey(key, minLen); err != nil {
		return "", true, err
	}
	return key, true, nil
}

// isPlainKey reports whether v is a bare key that needs no trimming, unquoting or other
// check but its length: one or more bytes of printable ASCII other than space, comma
// and '"'.
func isPlainKey(v string) bool {
	i := 0
	for ; i+8 <= len(v); i += 8 { // 8 bytes at a time: a UUID key is 4 words and 4 bytes
		const ones, highs = 0x0101010101010101, 0x8080808080808080
		x := binary.LittleEndian.Uint64([]byte(v[i : i+8]))
		comma, quote := x^(ones*','), x^(ones*'"')
		// Some byte below '!', above '~', or equal to ',' or '"' (each test may flag a
		// byte after a real hit falsely, never miss one).
		if ((x-ones*'!')&^x|(x+ones)|x|(comma-ones)&^comma|(quote-ones)&^quote)&highs != 0 {
			return false
		}
	}
	for ; i < len(v); i++ {
		if !plainKeyByte[v[i]] {
			return false
		}
	}
	return len(v) > 0
}

var plainKeyByte = func() (t [256]bool) {
	for c := '!'; c <= '~'; c++ {
		t[c] = c != ',' && c != '"'
	}
	return t
}()

// checkKey holds a key found anywhere (a header, a JSON field, a message ID) to the key
// contract: minLen–255 characters of printable ASCII. Every rejection wraps ErrInvalidKey.
func checkKey(key string, minLen int) error {
	if len(key) == 0 {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if len(key) > MaxKeyLength {
		return fmt.Errorf("%w: %d characters, at most %d", ErrInvalidKey, len(key), MaxKeyLength)
	}
	if len(key) < minLen {
		return fmt.Errorf("%w: %d characters, at least %d", ErrInvalidKey, len(key), minLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%w: byte 0x%02x at %d is not printable ASCII", ErrInvalidKey, c, i)
		}
	}
	return nil
}
