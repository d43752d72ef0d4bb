package core

import (
	"encoding/binary"
	"errors"
	"io"
	"math/bits"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"
)

// This file is the canonicaliser as it stood before issue 15's fast paths (main at
// d489f0d), every top-level name prefixed with "ref". It is kept, test-only, as a second
// oracle beside jcs: the differential tests check that the tuned canonjson.go writes the
// same bytes and rejects the same documents, including those jcs does not judge (depth).
//
// This file is an RFC 8785 (JSON Canonicalization Scheme) canonicaliser built for the
// fingerprint hot path: one pass over the input that writes the canonical text straight
// into the caller's buffer, with no tree and no per-value allocation.
//
// Objects are the only values whose canonical text is not in document order. Each member
// is written where it falls, and its span ("key":value, without the comma) is recorded.
// An object whose keys arrive already sorted, the common case, needs nothing more. An
// object that arrives out of order gets its member spans sorted and is marked dirty; once
// the whole document has been read, and only if something was dirty, a second pass copies
// the text once more, writing the members of each dirty object in sorted order. Moving
// bytes once at the end, rather than each time an object closes, keeps the work linear in
// the size of the input however deeply unsorted objects are nested.

// refMaxJSONDepth is the deepest nesting of arrays and objects accepted.
const refMaxJSONDepth = 1000

// refMaxPooledScratch keeps the scratch state of one huge document from staying in the pool.
const refMaxPooledScratch = 64 << 10

// refErrJSONTooDeep is returned for a document nested deeper than refMaxJSONDepth.
var refErrJSONTooDeep = errors.New("idem: canonical JSON: nested deeper than 1000 levels")

// refJsonError reports why a document is not exactly one valid I-JSON value. It carries an
// offset, never a fragment of the document: the document is a client's request body.
type refJsonError struct {
	msg string
	off int
}

func (e *refJsonError) Error() string {
	return "idem: canonical JSON: " + e.msg + " at offset " + strconv.Itoa(e.off)
}

func refJsonErr(msg string, off int) error { return &refJsonError{msg: msg, off: off} }

// refCjFrame is one open array or object.
type refCjFrame struct {
	object bool
	dirty  bool // members seen out of order
	first  int  // index in members of this object's first member
	rec    int  // index in objs of this object's record
}

// refCjMember is the span of one written object member: out[start] is the opening quote of
// its key, out[keyEnd] the closing one, and out[end] the first byte after its value.
type refCjMember struct {
	start, keyEnd, end int
	rec                int // len(objs) when the member began: objects inside it are at rec or later
}

// refCjObject records an object that still needs work in the final pass. Records are
// reserved when an object opens, so objs is ordered by start. A record with n > 0 is a
// dirty object whose members, sorted, are sorted[first:first+n]; one with n == 0 is a
// clean object kept only because dirty ones lie inside it.
type refCjObject struct {
	start, end int // the '{' and just past the '}'
	first, n   int
	next       int // index of the first record after this object's descendants
}

// refCanonScratch is the reusable state of one refAppendCanonicalJSON call.
type refCanonScratch struct {
	frames  []refCjFrame
	members []refCjMember // members of the open objects
	sorted  []refCjMember // members of closed dirty objects, in canonical order
	objs    []refCjObject
	tmp     []byte // the first pass's text, when a second pass is needed
	out     []byte // refWriteCanonicalJSON's output
}

var refCanonPool = sync.Pool{New: func() any { return new(refCanonScratch) }}

// refAppendCanonicalJSON appends the RFC 8785 canonical form of the JSON text src to dst.
// It returns an error for anything that is not exactly one valid I-JSON value (trailing data, invalid UTF-8,
// lone surrogates, duplicate object keys, numbers outside float64, nesting deeper than 1000).
// On error the returned slice is dst, its length unchanged. dst must not overlap src.
func refAppendCanonicalJSON(dst, src []byte) ([]byte, error) {
	s := refCanonPool.Get().(*refCanonScratch)
	out, err := s.canonicalise(dst, src)
	s.release()
	if err != nil {
		return dst, err
	}
	return out, nil
}

// refWriteCanonicalJSON writes the RFC 8785 canonical form of the JSON text src to w (a
// hash, say) in one Write, from a pooled buffer. When src is not exactly one valid I-JSON
// value (see refAppendCanonicalJSON) it writes nothing and returns the error.
func refWriteCanonicalJSON(w io.Writer, src []byte) error {
	s := refCanonPool.Get().(*refCanonScratch)
	err := s.write(w, src)
	s.release()
	return err
}

func (s *refCanonScratch) write(w io.Writer, src []byte) error {
	out, err := s.canonicalise(s.out[:0], src)
	if err != nil {
		return err
	}
	s.out = out[:0]
	_, err = w.Write(out)
	return err
}

// release returns s to the pool unless one huge document has grown it.
func (s *refCanonScratch) release() {
	if cap(s.tmp)+cap(s.out) <= refMaxPooledScratch && cap(s.members)+cap(s.sorted)+cap(s.objs) <= refMaxPooledScratch/32 {
		refCanonPool.Put(s)
	}
}

func (s *refCanonScratch) canonicalise(dst, src []byte) ([]byte, error) {
	s.frames, s.members, s.sorted, s.objs = s.frames[:0], s.members[:0], s.sorted[:0], s.objs[:0]
	base := len(dst)
	out := dst
	var err error
	i := refSkipWS(src, 0)
value:
	for {
		// A value starts at src[i].
		if i >= len(src) {
			return nil, refJsonErr("unexpected end of input", i)
		}
		switch c := src[i]; c {
		case '{', '[':
			if len(s.frames) == refMaxJSONDepth {
				return nil, refErrJSONTooDeep
			}
			closer := c + 2 // '}' or ']'
			j := refSkipWS(src, i+1)
			if j < len(src) && src[j] == closer {
				out = append(out, c, closer)
				i = j + 1
				break
			}
			if c == '[' {
				s.frames = append(s.frames, refCjFrame{})
				out = append(out, '[')
				i = j
				continue value
			}
			s.frames = append(s.frames, refCjFrame{object: true, first: len(s.members), rec: len(s.objs)})
			s.objs = append(s.objs, refCjObject{start: len(out)})
			out = append(out, '{')
			if out, i, err = s.member(out, src, j); err != nil {
				return nil, err
			}
			continue value
		case '"':
			if out, i, err = refAppendJSONString(out, src, i); err != nil {
				return nil, err
			}
		case 't':
			if out, i, err = refAppendLiteral(out, src, i, "true"); err != nil {
				return nil, err
			}
		case 'f':
			if out, i, err = refAppendLiteral(out, src, i, "false"); err != nil {
				return nil, err
			}
		case 'n':
			if out, i, err = refAppendLiteral(out, src, i, "null"); err != nil {
				return nil, err
			}
		default:
			if out, i, err = refAppendJSONNumber(out, src, i); err != nil {
				return nil, err
			}
		}

		// A value ended just before src[i]: see what the enclosing container does next.
		for {
			i = refSkipWS(src, i)
			if len(s.frames) == 0 {
				if i != len(src) {
					return nil, refJsonErr("data after the JSON value", i)
				}
				break value
			}
			if i >= len(src) {
				return nil, refJsonErr("unexpected end of input", i)
			}
			f := &s.frames[len(s.frames)-1]
			c := src[i]
			if !f.object {
				switch c {
				case ',':
					out = append(out, ',')
					i = refSkipWS(src, i+1)
					continue value
				case ']':
					out = append(out, ']')
					i++
					s.frames = s.frames[:len(s.frames)-1]
					continue
				}
				return nil, refJsonErr("expected ',' or ']'", i)
			}
			s.members[len(s.members)-1].end = len(out)
			switch c {
			case ',':
				out = append(out, ',')
				if out, i, err = s.member(out, src, refSkipWS(src, i+1)); err != nil {
					return nil, err
				}
				continue value
			case '}':
				out = append(out, '}')
				if err = s.closeObject(out, f, i); err != nil {
					return nil, err
				}
				i++
				continue
			}
			return nil, refJsonErr("expected ',' or '}'", i)
		}
	}

	if len(s.objs) == 0 {
		return out, nil
	}
	// Some object was out of order: write the text again with its members sorted.
	s.tmp = append(s.tmp[:0], out[base:]...)
	return s.emit(out[:base], base, len(out), 0, base), nil
}

// member reads `"key" :` at src[i] into the innermost open object, which is the last frame,
// and leaves i at the start of the member's value.
func (s *refCanonScratch) member(out, src []byte, i int) ([]byte, int, error) {
	if i >= len(src) || src[i] != '"' {
		return nil, i, refJsonErr("expected a string key", i)
	}
	start := len(out)
	out, i, err := refAppendJSONString(out, src, i)
	if err != nil {
		return nil, i, err
	}
	keyEnd := len(out) - 1
	f := &s.frames[len(s.frames)-1]
	if !f.dirty && len(s.members) > f.first {
		prev := &s.members[len(s.members)-1]
		switch cmp := refCompareKeys(out[prev.start+1:prev.keyEnd], out[start+1:keyEnd]); {
		case cmp == 0:
			return nil, i, refJsonErr("duplicate object key", i)
		case cmp > 0:
			f.dirty = true
		}
	}
	s.members = append(s.members, refCjMember{start: start, keyEnd: keyEnd, rec: len(s.objs)})
	i = refSkipWS(src, i)
	if i >= len(src) || src[i] != ':' {
		return nil, i, refJsonErr("expected ':'", i)
	}
	out = append(out, ':')
	return out, refSkipWS(src, i+1), nil
}

// closeObject finishes the innermost open object, whose '}' is the last byte of out and
// src[at] in the input, and pops its frame.
func (s *refCanonScratch) closeObject(out []byte, f *refCjFrame, at int) error {
	ms := s.members[f.first:]
	rec := f.rec
	switch {
	case f.dirty:
		if !refSortMembers(out, ms) {
			return refJsonErr("duplicate object key in the object closed", at)
		}
		first := len(s.sorted)
		s.sorted = append(s.sorted, ms...)
		s.objs[rec] = refCjObject{start: s.objs[rec].start, end: len(out), first: first, n: len(ms), next: len(s.objs)}
	case len(s.objs) == rec+1:
		s.objs = s.objs[:rec] // clean, with nothing dirty inside: no record needed
	}
	s.members = s.members[:f.first]
	s.frames = s.frames[:len(s.frames)-1]
	return nil
}

// emit appends the first pass's text for out[lo:hi] (held in s.tmp from offset base),
// writing the members of every dirty object in it in sorted order. k is the first record
// that can lie inside lo:hi.
func (s *refCanonScratch) emit(out []byte, lo, hi, k, base int) []byte {
	pos := lo
	for ; k < len(s.objs) && s.objs[k].start < hi; k++ {
		r := s.objs[k]
		if r.n == 0 {
			continue // a clean object: its bytes are copied as they are, its descendants looked at
		}
		out = append(out, s.tmp[pos-base:r.start-base]...)
		out = append(out, '{')
		for j, m := range s.sorted[r.first : r.first+r.n] {
			if j > 0 {
				out = append(out, ',')
			}
			if m.rec < len(s.objs) && s.objs[m.rec].start < m.end {
				out = s.emit(out, m.start, m.end, m.rec, base)
			} else { // nothing to reorder inside
				out = append(out, s.tmp[m.start-base:m.end-base]...)
			}
		}
		out = append(out, '}')
		pos = r.end
		k = r.next - 1
	}
	return append(out, s.tmp[pos-base:hi-base]...)
}

func refMemberKey(out []byte, m refCjMember) []byte { return out[m.start+1 : m.keyEnd] }

// refSortMembers sorts the members of one object, whose text is in out, by key. It returns
// false if two keys are equal.
func refSortMembers(out []byte, ms []refCjMember) bool {
	if len(ms) <= 12 {
		// Insertion sort compares every pair that ends up adjacent, so it sees any two
		// equal keys.
		for i := 1; i < len(ms); i++ {
			m := ms[i]
			key := refMemberKey(out, m)
			j := i
			for ; j > 0; j-- {
				c := refCompareKeys(refMemberKey(out, ms[j-1]), key)
				if c == 0 {
					return false
				}
				if c < 0 {
					break
				}
				ms[j] = ms[j-1]
			}
			ms[j] = m
		}
		return true
	}
	slices.SortFunc(ms, func(a, b refCjMember) int {
		return refCompareKeys(refMemberKey(out, a), refMemberKey(out, b))
	})
	for k := 1; k < len(ms); k++ {
		if refCompareKeys(refMemberKey(out, ms[k-1]), refMemberKey(out, ms[k])) == 0 {
			return false
		}
	}
	return true
}

// refCompareKeys compares two keys, given in their canonical escaped form without quotes,
// by the UTF-16 code units of the strings they denote, as RFC 8785 §3.2.3 orders members.
//
// Canonical escapes are unique (one spelling per character) and are compared by the
// character they stand for. Raw UTF-8 compares like UTF-16 except that characters from
// U+10000 up (lead bytes F0–F4, surrogate pairs in UTF-16) sort before U+E000–U+FFFF
// (lead bytes EE, EF): weights put F0–F4 between ED and EE. Once two lead bytes are
// equal both characters are in the same range, where byte order is code unit order.
func refCompareKeys(a, b []byte) int {
	n := min(len(a), len(b))
	for i := 0; i < n; {
		ca, cb := a[i], b[i]
		if ca == cb && ca != '\\' {
			i++
			continue
		}
		if ca != '\\' && cb != '\\' && ca < 0xF0 && cb < 0xF0 {
			return int(ca) - int(cb) // both weigh as themselves
		}
		wa, la := refKeyUnitWeight(a, i)
		wb, _ := refKeyUnitWeight(b, i)
		switch {
		case wa != wb:
			return wa - wb
		case ca != cb:
			return int(ca) - int(cb) // two different lead bytes F0–F4
		}
		i += la // the same escape on both sides
	}
	return len(a) - len(b)
}

// refKeyUnitWeight returns the sort weight of the character or byte at k[i] of a canonical
// key, and how many bytes an escape there takes.
func refKeyUnitWeight(k []byte, i int) (weight, size int) {
	c := k[i]
	switch {
	case c == '\\':
		switch e := k[i+1]; e {
		case 'u': // \u00xx, lowercase hex
			return int(refUnhex[k[i+4]]<<4|refUnhex[k[i+5]]) * 2, 6
		case 'b':
			return '\b' * 2, 2
		case 'f':
			return '\f' * 2, 2
		case 'n':
			return '\n' * 2, 2
		case 'r':
			return '\r' * 2, 2
		case 't':
			return '\t' * 2, 2
		default: // '"' or '\\'
			return int(e) * 2, 2
		}
	case c >= 0xF0:
		return 0xED*2 + 1, 1
	}
	return int(c) * 2, 1
}

func refSkipWS(src []byte, i int) int {
	for i < len(src) {
		switch src[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

func refAppendLiteral(out, src []byte, i int, lit string) ([]byte, int, error) {
	if len(src)-i < len(lit) || string(src[i:i+len(lit)]) != lit {
		return nil, i, refJsonErr("invalid literal", i)
	}
	return append(out, lit...), i + len(lit), nil
}

const (
	refSwarOnes  = 0x0101010101010101
	refSwarHighs = 0x8080808080808080
)

// refStringAttention returns, for the 8 bytes of x (little-endian), a mask whose lowest set
// bit is the high bit of the first byte that needs attention in a string: a control
// character, quote, backslash or non-ASCII byte. It is 0 if there is none. (Bytes after
// the first may be flagged falsely; the first one never is.)
func refStringAttention(x uint64) uint64 {
	q := x ^ (refSwarOnes * '"')
	b := x ^ (refSwarOnes * '\\')
	return ((x-refSwarOnes*0x20)&^x | (q-refSwarOnes)&^q | (b-refSwarOnes)&^b | x) & refSwarHighs
}

// refPlainStringByte marks the bytes a string holds as they are: printable ASCII other than
// the quote and the backslash.
var refPlainStringByte = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// refAppendJSONString appends the canonical form of the JSON string at src[i] (a '"').
func refAppendJSONString(out, src []byte, i int) ([]byte, int, error) {
	out = append(out, '"')
	i++
	start := i
	for {
		// Skip to the next byte that needs attention, 8 bytes at a time where there are 8.
		if i+8 <= len(src) {
			m := refStringAttention(binary.LittleEndian.Uint64(src[i:]))
			if m == 0 {
				i += 8
				continue
			}
			i += bits.TrailingZeros64(m) >> 3
		} else {
			for i < len(src) && refPlainStringByte[src[i]] {
				i++
			}
			if i >= len(src) {
				return nil, i, refJsonErr("unterminated string", i)
			}
		}
		switch c := src[i]; {
		case c == '"':
			out = append(out, src[start:i]...)
			return append(out, '"'), i + 1, nil
		case c == '\\':
			out = append(out, src[start:i]...)
			var err error
			if out, i, err = refAppendEscape(out, src, i); err != nil {
				return nil, i, err
			}
			start = i
		case c < 0x20:
			return nil, i, refJsonErr("control character in string", i)
		default:
			r, size := utf8.DecodeRune(src[i:])
			if r == utf8.RuneError && size == 1 {
				return nil, i, refJsonErr("invalid UTF-8", i)
			}
			i += size
		}
	}
}

// refAppendEscape appends the canonical form of the escape sequence at src[i] (a '\\').
func refAppendEscape(out, src []byte, i int) ([]byte, int, error) {
	if i+1 >= len(src) {
		return nil, i, refJsonErr("unterminated string", i)
	}
	switch e := src[i+1]; e {
	case '"', '\\', 'b', 'f', 'n', 'r', 't':
		return append(out, '\\', e), i + 2, nil
	case '/':
		return append(out, '/'), i + 2, nil
	case 'u':
	default:
		return nil, i, refJsonErr("invalid escape", i)
	}
	r, ok := refHex4(src, i+2)
	if !ok {
		return nil, i, refJsonErr("invalid \\u escape", i)
	}
	switch {
	case r >= 0xDC00 && r <= 0xDFFF:
		return nil, i, refJsonErr("lone low surrogate", i)
	case r >= 0xD800 && r <= 0xDBFF:
		lo, ok := rune(0), false
		if i+7 < len(src) && src[i+6] == '\\' && src[i+7] == 'u' {
			lo, ok = refHex4(src, i+8)
		}
		if !ok || lo < 0xDC00 || lo > 0xDFFF {
			return nil, i, refJsonErr("lone high surrogate", i)
		}
		return utf8.AppendRune(out, 0x10000+(r-0xD800)<<10+(lo-0xDC00)), i + 12, nil
	case r >= utf8.RuneSelf:
		return utf8.AppendRune(out, r), i + 6, nil
	}
	return refAppendASCIIEscaped(out, byte(r)), i + 6, nil
}

// refAppendASCIIEscaped appends the canonical form of the ASCII character c inside a string.
func refAppendASCIIEscaped(out []byte, c byte) []byte {
	switch c {
	case '"', '\\':
		return append(out, '\\', c)
	case '\b':
		return append(out, '\\', 'b')
	case '\f':
		return append(out, '\\', 'f')
	case '\n':
		return append(out, '\\', 'n')
	case '\r':
		return append(out, '\\', 'r')
	case '\t':
		return append(out, '\\', 't')
	}
	if c < 0x20 {
		const hexDigits = "0123456789abcdef"
		return append(out, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
	}
	return append(out, c)
}

// refUnhex maps a hex digit to its value and every other byte to 0xFF.
var refUnhex = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xFF
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = byte(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = byte(c - 'a' + 10)
		t[c-'a'+'A'] = byte(c - 'a' + 10)
	}
	return t
}()

func refHex4(src []byte, i int) (rune, bool) {
	if i+4 > len(src) {
		return 0, false
	}
	a, b, c, d := refUnhex[src[i]], refUnhex[src[i+1]], refUnhex[src[i+2]], refUnhex[src[i+3]]
	if (a|b|c|d)&0xF0 != 0 {
		return 0, false
	}
	return rune(a)<<12 | rune(b)<<8 | rune(c)<<4 | rune(d), true
}

// refAppendJSONNumber appends the canonical form of the JSON number at src[i]: the
// ECMAScript Number-to-string form of the nearest float64.
func refAppendJSONNumber(out, src []byte, i int) ([]byte, int, error) {
	start := i
	if src[i] == '-' {
		i++
	}
	switch {
	case i < len(src) && src[i] == '0':
		i++
	case i < len(src) && src[i] >= '1' && src[i] <= '9':
		i++
		for i < len(src) && src[i] >= '0' && src[i] <= '9' {
			i++
		}
	default:
		return nil, start, refJsonErr("invalid value", start)
	}
	integer := true
	if i < len(src) && src[i] == '.' {
		integer = false
		i++
		if i = refSkipDigits(src, i); i < 0 {
			return nil, start, refJsonErr("invalid number", start)
		}
	}
	if i < len(src) && (src[i] == 'e' || src[i] == 'E') {
		integer = false
		i++
		if i < len(src) && (src[i] == '+' || src[i] == '-') {
			i++
		}
		if i = refSkipDigits(src, i); i < 0 {
			return nil, start, refJsonErr("invalid number", start)
		}
	}
	num := src[start:i]
	if integer && len(num) <= 16 && (len(num) <= 15 || num[0] == '-') {
		// At most 15 digits: exactly a float64, which ECMAScript writes digit for digit.
		if len(num) == 2 && num[0] == '-' && num[1] == '0' {
			return append(out, '0'), i, nil
		}
		return append(out, num...), i, nil
	}
	f, err := strconv.ParseFloat(string(num), 64)
	if err != nil { // the syntax is checked, so the number is beyond float64's range
		return nil, start, refJsonErr("number out of range", start)
	}
	return refAppendESNumber(out, f), i, nil
}

// refSkipDigits skips one or more digits at src[i], returning -1 when there is none.
func refSkipDigits(src []byte, i int) int {
	j := i
	for j < len(src) && src[j] >= '0' && src[j] <= '9' {
		j++
	}
	if j == i {
		return -1
	}
	return j
}

// refAppendESNumber appends f as ECMAScript's Number.prototype.toString writes it
// (ECMA-262 Number::toString; RFC 8785 §3.2.2.3): shortest round-trip digits, plain
// decimal notation for 1e-6 <= |f| < 1e21, otherwise exponential with no leading zero in
// the exponent. f must be finite.
func refAppendESNumber(out []byte, f float64) []byte {
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
