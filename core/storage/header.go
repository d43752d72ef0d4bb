package storage

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
)

// EncodeHeader serialises a Response's headers for a store's column, as lines of
// "Name: value\n": names in no particular order, the values of one name in their order.
// Values holding CR or LF cannot be sent on the wire and are dropped. Stores save the
// result as bytes or text and give it back to DecodeHeader.
func EncodeHeader(h http.Header) []byte {
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 3
		}
	}
	if n == 0 {
		return nil
	}
	b := make([]byte, 0, n)
	for k, vs := range h {
		for _, v := range vs {
			if strings.ContainsAny(v, "\r\n") || strings.ContainsAny(k, "\r\n:") {
				continue
			}
			b = append(b, k...)
			b = append(b, ':', ' ')
			b = append(b, v...)
			b = append(b, '\n')
		}
	}
	return b
}

// DecodeHeader parses what EncodeHeader produced. Empty input gives an empty header.
func DecodeHeader(b []byte) (http.Header, error) {
	h := make(http.Header, bytes.Count(b, []byte{'\n'}))
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		i := bytes.Index(line, []byte(": "))
		if i <= 0 {
			return nil, fmt.Errorf("storage: stored header line %q: missing \": \"", line)
		}
		k := string(line[:i])
		h[k] = append(h[k], string(line[i+2:]))
	}
	return h, nil
}
