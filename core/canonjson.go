package core

import (
	"bytes"
	"cmp"
	"errors"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// This file canonicalises a JSON text per RFC 8785 (JSON Canonicalization Scheme) for
// the fingerprint, in two passes:
//
//   - the parser (value and what it calls) reads the document once, checks that it is
//     exactly one I-JSON value, and appends one node per value and object key, in
//     document order: a string's decoded text, a number's or a literal's canonical text,
//     and for an array or an object the index of the node after its contents. An
//     object's keys are sorted as it closes, which is where a duplicate key shows up.
//   - emit walks the nodes from the root and writes the canonical text: members in key
//     order, strings escaped the one way RFC 8785 allows, no white space.
//
// Nothing is moved once written, so both passes are linear in the size of the document
// (plus sorting each object's keys) however deeply out-of-order objects nest. The state
// is pooled with the fingerprint's, so a steady-state call allocates nothing.

const (
	maxJSONDepth     = 1000     // the deepest nesting of arrays and objects accepted
	maxPooledScratch = 64 << 10 // scratch state grown past this by a huge document is not pooled
)

// errJSONTooDeep is returned for a document nested deeper than maxJSONDepth.
var errJSONTooDeep = errors.New("idem: canonical JSON: nested deeper than 1000 levels")

// jsonError reports why a document is not exactly one valid I-JSON value. It carries an
// offset, never a fragment of the document: the document is a client's request body.
type jsonError struct {
	msg string
	off int
}

func (e *jsonError) Error() string {
	return "idem: canonical JSON: " + e.msg + " at offset " + strconv.Itoa(e.off)
}

// The kinds of node.
const (
	nodeObject  = '{'
	nodeArray   = '['
	nodeString  = '"'  // a string or an object key; its text is the string decoded
	nodeEscaped = '\\' // the same, holding a character that must be escaped
	nodeOther   = '0'  // a number or a literal; its text is its canonical form
)

// cjNode is one value or object key of the document. An object's members are its key
// nodes, each followed by its value's nodes.
type cjNode struct {
	kind byte
	// A string's or other scalar's text is canonScratch.text[lo:hi]; an object's keys,
	// sorted, are canonScratch.keys[lo:hi] (indexes of their nodes).
	lo, hi int
	next   int // the index of the node after this one and everything inside it
}

// canonScratch is the reusable state of one canonicalisation.
type canonScratch struct {
	src   []byte // the document, while it is parsed
	pos   int    // the parser's position in src
	text  []byte // the text of every scalar node
	nodes []cjNode
	keys  []int // the key nodes of every object, each object's sorted
}

// canonicalise appends the RFC 8785 canonical form of the JSON text src to dst. It
// returns an error for anything that is not exactly one valid I-JSON value (trailing
// data, invalid UTF-8, lone surrogates, duplicate object keys, numbers outside float64,
// nesting deeper than maxJSONDepth), and then dst as it was.
func (s *canonScratch) canonicalise(dst, src []byte) ([]byte, error) {
	s.src, s.pos = src, 0
	s.text, s.nodes, s.keys = s.text[:0], s.nodes[:0], s.keys[:0]
	err := s.value(0)
	if s.next(); err == nil && s.pos < len(src) {
		err = s.fail("data after the JSON value")
	}
	s.src = nil // the pool must not keep a request body alive
	if err != nil {
		return dst, err
	}
	return s.emit(dst, 0), nil
}

// poolable reports whether s is small enough to be kept for reuse: one huge document
// may have grown it.
func (s *canonScratch) poolable() bool {
	return cap(s.text) <= maxPooledScratch && cap(s.nodes)+cap(s.keys) <= maxPooledScratch/8
}

func (s *canonScratch) fail(msg string) error { return &jsonError{msg: msg, off: s.pos} }

// next moves the parser past white space and returns the byte it is then at, or 0 at
// the end of the input.
func (s *canonScratch) next() byte {
	for ; s.pos < len(s.src); s.pos++ {
		if c := s.src[s.pos]; c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return c
		}
	}
	return 0
}

// addScalar adds a node of the given kind whose text starts at s.text[lo].
func (s *canonScratch) addScalar(kind byte, lo int) {
	s.nodes = append(s.nodes, cjNode{kind: kind, lo: lo, hi: len(s.text), next: len(s.nodes) + 1})
}

// value parses the value at the parser's position, after any white space, inside depth
// open arrays and objects.
func (s *canonScratch) value(depth int) error {
	switch c := s.next(); c {
	case '{', '[':
		if depth == maxJSONDepth {
			return errJSONTooDeep
		}
		return s.container(c, depth+1)
	case '"':
		return s.str()
	case 't', 'f', 'n':
		return s.literal()
	}
	return s.number()
}

// container parses the array or object at the parser's position, the depth-th open one.
func (s *canonScratch) container(open byte, depth int) error {
	at := len(s.nodes)
	s.nodes = append(s.nodes, cjNode{kind: open})
	end := open + 2 // ']' or '}'
	s.pos++
	if s.next() != end {
		for {
			if open == '{' {
				if s.next() != '"' {
					return s.fail("expected a string key")
				}
				if err := s.str(); err != nil {
					return err
				}
				if s.next() != ':' {
					return s.fail("expected ':'")
				}
				s.pos++
			}
			if err := s.value(depth); err != nil {
				return err
			}
			if s.next() != ',' {
				break
			}
			s.pos++
		}
		if s.next() != end {
			return s.fail("expected ',' or the end of the array or object")
		}
	}
	s.pos++
	s.nodes[at].next = len(s.nodes)
	if open == '{' {
		return s.sortKeys(at)
	}
	return nil
}

// sortKeys sorts the keys of the object at node at, which has just closed, into s.keys,
// and fails if two are equal.
func (s *canonScratch) sortKeys(at int) error {
	lo := len(s.keys)
	for k := at + 1; k < len(s.nodes); k = s.nodes[k+1].next {
		s.keys = append(s.keys, k)
	}
	keys := s.keys[lo:]
	slices.SortFunc(keys, func(a, b int) int { return compareKeys(s.textOf(a), s.textOf(b)) })
	for j := 1; j < len(keys); j++ {
		if bytes.Equal(s.textOf(keys[j-1]), s.textOf(keys[j])) {
			return &jsonError{msg: "duplicate object key in the object closed", off: s.pos - 1}
		}
	}
	s.nodes[at].lo, s.nodes[at].hi = lo, len(s.keys)
	return nil
}

func (s *canonScratch) textOf(node int) []byte { return s.text[s.nodes[node].lo:s.nodes[node].hi] }

// compareKeys orders two decoded keys by their UTF-16 code units, as RFC 8785 §3.2.3
// sorts members. UTF-8's byte order is code point order, which is UTF-16's but for one
// case: a character from U+10000 (in UTF-8 lead byte F0–F4) is a surrogate pair in
// UTF-16, whose first unit (D800–DBFF) sorts before U+E000–U+FFFF (lead byte EE or EF).
func compareKeys(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		return cmp.Compare(len(a), len(b))
	}
	// a[i] and b[i] both start a character, or are both inside characters that start
	// alike (and so are in the same range).
	if ca, cb := a[i], b[i]; ca >= 0xEE && cb >= 0xEE && (ca >= 0xF0) != (cb >= 0xF0) {
		return cmp.Compare(cb, ca)
	}
	return cmp.Compare(a[i], b[i])
}

// plainStringByte marks the bytes a string holds as they are: printable ASCII but '"'
// and '\\'.
var plainStringByte = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str parses the string at the parser's position and adds it as a node, decoded.
func (s *canonScratch) str() error {
	lo, kind := len(s.text), byte(nodeString)
	src, i := s.src, s.pos+1
	for {
		start := i
		for i < len(src) && plainStringByte[src[i]] {
			i++
		}
		s.text = append(s.text, src[start:i]...)
		if i == len(src) {
			return &jsonError{msg: "unterminated string", off: i}
		}
		switch c := src[i]; {
		case c == '"':
			s.pos = i + 1
			s.addScalar(kind, lo)
			return nil
		case c == '\\':
			r, n := unescape(src[i:])
			if n == 0 {
				return &jsonError{msg: "invalid escape", off: i}
			}
			if r < 0x20 || r == '"' || r == '\\' {
				kind = nodeEscaped
			}
			s.text = utf8.AppendRune(s.text, r)
			i += n
		case c < 0x20:
			return &jsonError{msg: "control character in string", off: i}
		default:
			r, n := utf8.DecodeRune(src[i:])
			if r == utf8.RuneError && n == 1 {
				return &jsonError{msg: "invalid UTF-8", off: i}
			}
			s.text = append(s.text, src[i:i+n]...)
			i += n
		}
	}
}

// unescape decodes the escape sequence at the start of b (a '\\'). It returns the
// character and the escape's length, or a length of 0 for an invalid escape (a lone
// surrogate included).
func unescape(b []byte) (rune, int) {
	if len(b) < 2 {
		return 0, 0
	}
	if k := strings.IndexByte(`"\/bfnrt`, b[1]); k >= 0 {
		return rune("\"\\/\b\f\n\r\t"[k]), 2
	}
	r := hex4(b[2:])
	switch {
	case b[1] != 'u' || r < 0:
		return 0, 0
	case !utf16.IsSurrogate(r):
		return r, 6
	}
	// A surrogate must be the first of a pair whose second is escaped right after it.
	if len(b) >= 12 && b[6] == '\\' && b[7] == 'u' {
		if r = utf16.DecodeRune(r, hex4(b[8:])); r != utf8.RuneError {
			return r, 12
		}
	}
	return 0, 0
}

// hex4 returns the value of the four hex digits that start b, or -1.
func hex4(b []byte) rune {
	if len(b) >= 4 {
		if v, err := strconv.ParseUint(string(b[:4]), 16, 16); err == nil {
			return rune(v)
		}
	}
	return -1
}

// literal parses the true, false or null at the parser's position.
func (s *canonScratch) literal() error {
	for _, lit := range []string{"true", "false", "null"} {
		if bytes.HasPrefix(s.src[s.pos:], []byte(lit)) {
			lo := len(s.text)
			s.text = append(s.text, lit...)
			s.pos += len(lit)
			s.addScalar(nodeOther, lo)
			return nil
		}
	}
	return s.fail("invalid literal")
}

// number parses the number at the parser's position and adds its canonical form: the
// ECMAScript Number-to-string form of the nearest float64.
func (s *canonScratch) number() error {
	src, i := s.src, s.pos
	if i < len(src) && src[i] == '-' {
		i++
	}
	intStart, ok := i, true
	if i < len(src) && src[i] == '0' {
		i++
	} else if i, ok = skipDigits(src, i); !ok {
		return s.fail("invalid value")
	}
	intEnd := i
	if i < len(src) && src[i] == '.' {
		i, ok = skipDigits(src, i+1)
	}
	if ok && i < len(src) && (src[i] == 'e' || src[i] == 'E') {
		if i++; i < len(src) && (src[i] == '+' || src[i] == '-') {
			i++
		}
		i, ok = skipDigits(src, i)
	}
	if !ok {
		return &jsonError{msg: "invalid number", off: i}
	}
	num, lo := src[s.pos:i], len(s.text)
	switch {
	case string(num) == "-0":
		s.text = append(s.text, '0')
	case i == intEnd && intEnd-intStart <= 15:
		// An integer of at most 15 digits is exactly a float64, which ECMAScript
		// writes digit for digit.
		s.text = append(s.text, num...)
	default:
		f, err := strconv.ParseFloat(string(num), 64)
		if err != nil { // the syntax is checked, so the number is beyond float64's range
			return s.fail("number out of range")
		}
		s.text = appendESNumber(s.text, f)
	}
	s.pos = i
	s.addScalar(nodeOther, lo)
	return nil
}

// skipDigits returns the index of the first byte from b[i] on that is not a digit, and
// whether there was at least one digit.
func skipDigits(b []byte, i int) (int, bool) {
	j := i
	for j < len(b) && '0' <= b[j] && b[j] <= '9' {
		j++
	}
	return j, j > i
}

// appendESNumber appends f as ECMAScript's Number.prototype.toString writes it
// (ECMA-262 Number::toString; RFC 8785 §3.2.2.3): shortest round-trip digits, plain
// decimal notation for 1e-6 <= |f| < 1e21, otherwise exponential with no leading zero in
// the exponent. f must be finite.
func appendESNumber(out []byte, f float64) []byte {
	if f == 0 {
		return append(out, '0') // -0 as well
	}
	if f < 0 {
		out = append(out, '-')
		f = -f
	}
	if f >= 1e-6 && f < 1e21 {
		return strconv.AppendFloat(out, f, 'f', -1, 64)
	}
	out = strconv.AppendFloat(out, f, 'e', -1, 64)
	// Go writes at least two exponent digits ("1e-07"), ECMAScript as few as needed.
	if n := len(out); out[n-2] == '0' && (out[n-3] == '+' || out[n-3] == '-') {
		out[n-2] = out[n-1]
		out = out[:n-1]
	}
	return out
}

// emit appends the canonical text of node i and everything inside it.
func (s *canonScratch) emit(out []byte, i int) []byte {
	n := s.nodes[i]
	switch n.kind {
	case nodeString:
		return append(append(append(out, '"'), s.text[n.lo:n.hi]...), '"')
	case nodeEscaped:
		return appendJSONString(out, s.text[n.lo:n.hi])
	case nodeOther:
		return append(out, s.text[n.lo:n.hi]...)
	case nodeArray:
		out = append(out, '[')
		for j := i + 1; j < n.next; j = s.nodes[j].next {
			if j > i+1 {
				out = append(out, ',')
			}
			out = s.emit(out, j)
		}
		return append(out, ']')
	}
	out = append(out, '{')
	for j, k := range s.keys[n.lo:n.hi] {
		if j > 0 {
			out = append(out, ',')
		}
		out = append(s.emit(out, k), ':')
		out = s.emit(out, k+1)
	}
	return append(out, '}')
}

// appendJSONString appends the decoded string str as RFC 8785 §3.2.2.2 writes it: in
// quotes, with '"', '\\' and the control characters escaped (\b \t \n \f \r, the others
// as \u00xx in lower case), and nothing else.
func appendJSONString(out, str []byte) []byte {
	const hexDigits = "0123456789abcdef"
	out = append(out, '"')
	for {
		i := 0
		for i < len(str) && str[i] >= 0x20 && str[i] != '"' && str[i] != '\\' {
			i++
		}
		out = append(out, str[:i]...)
		if i == len(str) {
			return append(out, '"')
		}
		c := str[i]
		if k := strings.IndexByte("\"\\\b\f\n\r\t", c); k >= 0 {
			out = append(out, '\\', `"\bfnrt`[k])
		} else {
			out = append(out, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		}
		str = str[i+1:]
	}
}
