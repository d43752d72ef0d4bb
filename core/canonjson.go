package core

import (
	"bytes"
	"cmp"
	"errors"
	"io"
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
//     exactly one I-JSON value, and writes its canonical text to s.text as it goes:
//     strings escaped the one way RFC 8785 allows, numbers and literals in canonical
//     form, no white space; object members in the order they come. As an object closes
//     its keys are compared, which is where a duplicate shows up; an object already in
//     key order needs nothing more, a small one out of order is rewritten in order, a
//     large one is kept (cjObject) with the places of its members in s.text, sorted.
//   - emit copies s.text to the output, writing the members of each kept object in key
//     order. A document whose objects are all in order is s.text as it stands.
//
// Both passes are linear in the size of the document however deeply out-of-order
// objects nest. The memory is the canonical text plus 12 bytes per member of an open
// object or a large one out of order (a 1 MiB body of tiny values once cost 100 MiB as
// a node per value: issue 34); nothing is kept per array element or scalar. The state is pooled with the fingerprint's,
// so a steady-state call allocates nothing.

const (
	maxJSONDepth     = 1000     // the deepest nesting of arrays and objects accepted
	maxPooledScratch = 64 << 10 // scratch state grown past this by a huge document is not pooled
	// maxJSONSize is the largest document canonicalised: its canonical text (at most
	// 5.25 times as long: "9e20," is written 100000000000000000000) fits the int32
	// offsets of cjMember. A larger body is hashed as bytes.
	maxJSONSize = 256 << 20
)

var (
	errJSONTooDeep  = errors.New("idem: canonical JSON: nested deeper than 1000 levels")
	errJSONTooLarge = errors.New("idem: canonical JSON: larger than 256 MiB")
)

// jsonError reports why a document is not exactly one valid I-JSON value. It carries an
// offset, never a fragment of the document: the document is a client's request body.
type jsonError struct {
	msg string
	off int
}

func (e *jsonError) Error() string {
	return "idem: canonical JSON: " + e.msg + " at offset " + strconv.Itoa(e.off)
}

// cjMember is one member of an object, by its place in canonScratch.text: the member
// `"key":value` is text[key:end], its key (quotes included) text[key:colon].
type cjMember struct{ key, colon, end int32 }

// cjObject is an object whose members came out of key order: text[start:end] (braces
// included), its members sorted[lo:hi] in key order.
type cjObject struct {
	start, end, lo, hi int32
}

// canonScratch is the reusable state of one canonicalisation.
type canonScratch struct {
	src     []byte // the document, while it is parsed
	pos     int    // the parser's position in src
	text    []byte // the canonical text, but for the order of members
	open    []cjMember
	sorted  []cjMember // the members of every object out of order, each object's sorted
	objects []cjObject // the objects out of order, as they closed (then as they start)
	tmp     []byte     // a small object's text while sortInPlace rewrites it
}

// parse reads src into the scratch, for emit to write its RFC 8785 canonical form. It
// returns an error for anything that is not exactly one valid I-JSON value (trailing
// data, invalid UTF-8, lone surrogates, duplicate object keys, numbers outside float64,
// nesting deeper than maxJSONDepth, more than maxJSONSize bytes).
func (s *canonScratch) parse(src []byte) error {
	if len(src) > maxJSONSize {
		return errJSONTooLarge
	}
	s.src, s.pos = src, 0
	s.text, s.open, s.sorted, s.objects = s.text[:0], s.open[:0], s.sorted[:0], s.objects[:0]
	if c := s.next(); c == '{' || c == '[' || c == '"' {
		// Its canonical text is about as long as the document (shorter by the white
		// space; only numbers can be longer, and number grows it then).
		s.text = grow(s.text, len(src)+32)
	}
	err := s.value(0)
	if s.next(); err == nil && s.pos < len(src) {
		err = s.fail("data after the JSON value")
	}
	s.src = nil // the pool must not keep a request body alive
	return err
}

// grow returns s with room for n more elements, its capacity at least doubled if it must
// grow: append grows a large slice by a quarter at a time, which allocates five times its
// final size in all, where doubling allocates twice.
func grow[T any](s []T, n int) []T {
	if len(s)+n <= cap(s) {
		return s
	}
	return append(make([]T, 0, max(2*cap(s), len(s)+n)), s...)
}

// poolable reports whether s is small enough to be kept for reuse: one huge document
// may have grown it.
func (s *canonScratch) poolable() bool {
	return cap(s.text)+cap(s.tmp) <= maxPooledScratch && cap(s.open)+cap(s.sorted)+cap(s.objects) <= maxPooledScratch/16
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
	start, members, kept := len(s.text), len(s.open), len(s.objects)
	s.text = append(s.text, open)
	end := open + 2 // ']' or '}'
	s.pos++
	if s.next() != end {
		for {
			key, colon := len(s.text), 0
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
				colon = len(s.text)
				s.text = append(s.text, ':')
			}
			if err := s.value(depth); err != nil {
				return err
			}
			if open == '{' {
				s.open = append(grow(s.open, 1), cjMember{int32(key), int32(colon), int32(len(s.text))})
			}
			if s.next() != ',' {
				break
			}
			s.text = append(s.text, ',')
			s.pos++
		}
		if s.next() != end {
			return s.fail("expected ',' or the end of the array or object")
		}
	}
	s.pos++
	s.text = append(s.text, end)
	if open == '{' {
		return s.closeObject(start, members, kept)
	}
	return nil
}

// closeObject checks the keys of the object text[start:], which has just closed and
// whose members are s.open[members:]. Members out of order are put in order: at once if
// the object is small and holds no object kept (sortInPlace), else by keeping the object
// for emit, with its members sorted.
func (s *canonScratch) closeObject(start, members, kept int) error {
	m := s.open[members:]
	s.open = s.open[:members]
	inOrder, err := s.sortMembers(m)
	if inOrder || err != nil {
		return err
	}
	if len(s.text)-start <= maxSortInPlace && len(s.objects) == kept {
		s.sortInPlace(start, m)
		return nil
	}
	lo := len(s.sorted)
	s.sorted = append(grow(s.sorted, len(m)), m...)
	s.objects = append(grow(s.objects, 1), cjObject{int32(start), int32(len(s.text)), int32(lo), int32(len(s.sorted))})
	return nil
}

// sortMembers sorts m by key and reports whether it was in order already, or an error
// for a duplicate key. The few members of a usual object are sorted by insertion, which
// finds a duplicate as it goes, in one comparison per member when they are in order;
// more are sorted in O(n log n).
func (s *canonScratch) sortMembers(m []cjMember) (bool, error) {
	if len(m) > 12 {
		if slices.IsSortedFunc(m, s.compareMembers) {
			return true, s.checkDuplicates(m)
		}
		slices.SortFunc(m, s.compareMembers)
		return false, s.checkDuplicates(m)
	}
	inOrder := true
	for j := 1; j < len(m); j++ {
		x, i := m[j], j
		for ; i > 0; i-- {
			c := s.compareMembers(m[i-1], x)
			if c == 0 {
				return false, s.duplicateKey()
			}
			if c < 0 {
				break
			}
			m[i] = m[i-1]
		}
		m[i] = x
		inOrder = inOrder && i == j
	}
	return inOrder, nil
}

// checkDuplicates returns an error when two neighbours of m, sorted, have one key.
func (s *canonScratch) checkDuplicates(m []cjMember) error {
	for j := 1; j < len(m); j++ {
		if s.compareMembers(m[j-1], m[j]) == 0 {
			return s.duplicateKey()
		}
	}
	return nil
}

// maxSortInPlace is the largest object sortInPlace rewrites. Keeping no record of the
// small objects out of order bounds the state to the canonical text plus 12 bytes per
// member of an object larger than this: a body of many small objects (a list of line
// items) costs its size once. A byte is rewritten once per enclosing small object out of
// order, at most 21 of them (each adds at least `{"b":0,"a":` and `}`).
const maxSortInPlace = 256

// sortInPlace writes the members m of the object text[start:], all in the text, in
// their sorted order.
func (s *canonScratch) sortInPlace(start int, m []cjMember) {
	s.tmp = append(s.tmp[:0], s.text[start:]...)
	w := start + 1
	for j, mb := range m {
		if j > 0 {
			s.text[w] = ','
			w++
		}
		w += copy(s.text[w:], s.tmp[int(mb.key)-start:int(mb.end)-start])
	}
}

func (s *canonScratch) duplicateKey() error {
	return &jsonError{msg: "duplicate object key in the object closed", off: s.pos - 1}
}

// compareMembers orders two members by their keys' UTF-16 code units, as RFC 8785
// §3.2.3 sorts members. The keys are in canonical form: up to the first byte in which
// they differ they are spelled alike, so when no escape starts there, that byte decides.
func (s *canonScratch) compareMembers(a, b cjMember) int {
	ka, kb := s.text[a.key+1:a.colon-1], s.text[b.key+1:b.colon-1]
	n := min(len(ka), len(kb))
	i := 0
	for i < n && ka[i] == kb[i] {
		i++
	}
	switch {
	case bytes.IndexByte(ka[:i], '\\') >= 0, i < len(ka) && ka[i] == '\\', i < len(kb) && kb[i] == '\\':
		return compareEscapedKeys(ka, kb)
	case i == n:
		return cmp.Compare(len(ka), len(kb))
	}
	return compareKeyBytes(ka[i], kb[i])
}

// compareKeyBytes orders two keys by the first byte in which their decoded text
// differs. UTF-8's byte order is code point order, which is UTF-16's but for one case:
// a character from U+10000 (in UTF-8 lead byte F0–F4) is a surrogate pair in UTF-16,
// whose first unit (D800–DBFF) sorts before U+E000–U+FFFF (lead byte EE or EF).
func compareKeyBytes(ca, cb byte) int {
	// ca and cb both start a character, or are both inside characters that start alike
	// (and so are in the same range).
	if ca >= 0xEE && cb >= 0xEE && (ca >= 0xF0) != (cb >= 0xF0) {
		return cmp.Compare(cb, ca)
	}
	return cmp.Compare(ca, cb)
}

// compareEscapedKeys orders two keys in canonical form by the bytes they stand for,
// escapes decoded.
func compareEscapedKeys(a, b []byte) int {
	for len(a) > 0 && len(b) > 0 {
		ca, na := unescapeCanonical(a)
		cb, nb := unescapeCanonical(b)
		if ca != cb {
			return compareKeyBytes(ca, cb)
		}
		a, b = a[na:], b[nb:]
	}
	return cmp.Compare(len(a), len(b))
}

// unescapeCanonical returns the byte that starts b, a string in canonical form, and
// how many bytes of b spell it: one, or an escape that appendEscaped writes.
func unescapeCanonical(b []byte) (byte, int) {
	if b[0] != '\\' {
		return b[0], 1
	}
	if b[1] == 'u' { // \u00xx
		v, _ := strconv.ParseUint(string(b[4:6]), 16, 8)
		return byte(v), 6
	}
	if k := strings.IndexByte(`bfnrt`, b[1]); k >= 0 {
		return "\b\f\n\r\t"[k], 2
	}
	return b[1], 2 // \" or \\
}

// plainStringByte marks the bytes a string holds as they are: printable ASCII but '"'
// and '\\'.
var plainStringByte = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str parses the string at the parser's position and writes it in canonical form.
func (s *canonScratch) str() error {
	s.text = append(s.text, '"')
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
			s.text = append(s.text, '"')
			return nil
		case c == '\\':
			r, n := unescape(src[i:])
			if n == 0 {
				return &jsonError{msg: "invalid escape", off: i}
			}
			if r < 0x20 || r == '"' || r == '\\' {
				s.text = appendEscaped(s.text, byte(r))
			} else {
				s.text = utf8.AppendRune(s.text, r)
			}
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

// appendEscaped appends c, '"', '\\' or a control character, as RFC 8785 §3.2.2.2
// escapes it: \" \\ \b \t \n \f \r, the others as \u00xx in lower case.
func appendEscaped(out []byte, c byte) []byte {
	const hexDigits = "0123456789abcdef"
	if k := strings.IndexByte("\"\\\b\f\n\r\t", c); k >= 0 {
		return append(out, '\\', `"\bfnrt`[k])
	}
	return append(out, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
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
			s.text = append(s.text, lit...)
			s.pos += len(lit)
			return nil
		}
	}
	return s.fail("invalid literal")
}

// number parses the number at the parser's position and writes its canonical form: the
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
	num := src[s.pos:i]
	if len(s.text)+24 > cap(s.text) { // the longest canonical number, "-1.2345678901234567e-308"
		// Only numbers grow the text past the document's length, "9e20" 4.4 times:
		// make room for the rest at the rate it has grown so far, not by doubling.
		rate := float64(len(s.text)+1) / float64(s.pos+1)
		s.text = grow(s.text, int(rate*float64(len(src)-s.pos))+24)
	}
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

// emitChunk is how much canonical text emit gathers before it writes it to its writer.
const emitChunk = 32 << 10

// emit appends the canonical text of the document parsed to out. With a writer, it
// writes out to w instead whenever out would grow past emitChunk, and returns what is
// left to write: a large document is hashed in pieces, never copied whole.
func (s *canonScratch) emit(out []byte, w io.Writer) []byte {
	if len(s.objects) == 0 {
		return s.write(out, w, s.text)
	}
	slices.SortFunc(s.objects, func(a, b cjObject) int { return cmp.Compare(a.start, b.start) })
	return s.emitRange(out, w, 0, int32(len(s.text)))
}

// emitRange writes text[lo:hi], each object out of order in it with its members sorted.
func (s *canonScratch) emitRange(out []byte, w io.Writer, lo, hi int32) []byte {
	k := s.objectFrom(0, lo)
	for k < len(s.objects) && s.objects[k].start < hi {
		o := s.objects[k]
		out = append(s.write(out, w, s.text[lo:o.start]), '{')
		for j, m := range s.sorted[o.lo:o.hi] {
			if j > 0 {
				out = append(out, ',')
			}
			out = s.emitRange(out, w, m.key, m.end)
		}
		out = append(out, '}')
		lo = o.end
		k = s.objectFrom(k+1, lo) // past the objects inside o
	}
	return s.write(out, w, s.text[lo:hi])
}

// objectFrom returns the index of the first object out of order, from s.objects[k] on,
// that starts at or after text[at].
func (s *canonScratch) objectFrom(k int, at int32) int {
	i, _ := slices.BinarySearchFunc(s.objects[k:], at, func(o cjObject, at int32) int { return cmp.Compare(o.start, at) })
	return k + i
}

// write appends b to out, or writes both to w if that would take out past emitChunk.
func (s *canonScratch) write(out []byte, w io.Writer, b []byte) []byte {
	if w == nil || len(out)+len(b) <= emitChunk {
		return append(out, b...)
	}
	w.Write(out) //nolint:errcheck // w is a hash, which never fails
	w.Write(b)   //nolint:errcheck
	return out[:0]
}
