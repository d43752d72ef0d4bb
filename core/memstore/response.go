package memstore

import (
	"encoding/binary"
	"net/http"

	"github.com/idemkit/idem/core/storage"
)

// A completed response is kept as one byte slab, so that a key that is never replayed
// costs one pointer-free allocation for it, whatever its header. The slab is:
//
//	the body:    count(len(body)), then its bytes
//	the header:  count(number of names), uvarint(number of values), then per name:
//	             text(name), count(its number of values), text(each value)
//
// where text(s) is uvarint(len(s)) followed by s, and count(n) is uvarint(n+1), with 0
// standing for nil: so a nil header, a nil value slice and a nil body come back nil, and
// empty ones empty. The body comes first, so that the header's text is the slab's tail.

// newResponse returns the slab of h and body, in an allocation of its exact size. It is
// never empty.
func newResponse(h http.Header, body []byte) []byte {
	values := 0
	size := countSize(len(body)) + len(body) + countSize(len(h))
	for name, vs := range h {
		values += len(vs)
		size += textSize(name) + countSize(len(vs))
		for _, v := range vs {
			size += textSize(v)
		}
	}
	size += uvarintSize(uint64(values))

	b := make([]byte, 0, size)
	b = appendCount(b, len(body), body == nil)
	b = append(b, body...)
	b = appendCount(b, len(h), h == nil)
	b = binary.AppendUvarint(b, uint64(values))
	for name, vs := range h {
		b = appendText(b, name)
		b = appendCount(b, len(vs), vs == nil)
		for _, v := range vs {
			b = appendText(b, v)
		}
	}
	return b
}

func uvarintSize(x uint64) int {
	var room [binary.MaxVarintLen64]byte
	return len(binary.AppendUvarint(room[:0], x))
}

func countSize(n int) int   { return uvarintSize(uint64(n) + 1) }
func textSize(s string) int { return uvarintSize(uint64(len(s))) + len(s) }

func appendCount(b []byte, n int, isNil bool) []byte {
	if isNil {
		return append(b, 0)
	}
	return binary.AppendUvarint(b, uint64(n)+1)
}

func appendText(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// readResponse returns the response of status and slab b (newResponse). Its body is b's own bytes;
// its header's names and values share one copy of the header's text, and its value
// slices one backing array, each capped so that a reader's append cannot reach the next
// name's values.
func readResponse(status int, b []byte) storage.Response {
	resp := storage.Response{Status: status}
	rd := reader{b: b}
	if n, isNil := rd.count(); !isNil {
		resp.Body = b[rd.at : rd.at+n : rd.at+n]
		rd.at += n
	}
	rd.text = string(b[rd.at:])
	rd.b = b[rd.at:]
	rd.at = 0
	names, isNil := rd.count()
	values := rd.uvarint()
	if isNil {
		return resp
	}
	all := make([]string, 0, values)
	resp.Header = make(http.Header, names)
	for range names {
		name := rd.string()
		n, isNil := rd.count()
		if isNil {
			resp.Header[name] = nil
			continue
		}
		from := len(all)
		for range n {
			all = append(all, rd.string())
		}
		resp.Header[name] = all[from:len(all):len(all)]
	}
	return resp
}

// reader reads a slab written by newResponse.
type reader struct {
	b    []byte
	text string // b as a string, for the strings read
	at   int    // the offset in b, and in text
}

func (rd *reader) uvarint() uint64 {
	v, n := binary.Uvarint(rd.b[rd.at:])
	rd.at += n
	return v
}

func (rd *reader) count() (n int, isNil bool) {
	v := rd.uvarint()
	if v == 0 {
		return 0, true
	}
	return int(v - 1), false
}

func (rd *reader) string() string {
	n := int(rd.uvarint())
	s := rd.text[rd.at : rd.at+n]
	rd.at += n
	return s
}
