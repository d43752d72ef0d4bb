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

// This file is an RFC 8785 (JSON Canonicalization Scheme) canonicaliser built for the
// fingerprint hot path: one pass over the input that writes the canonical text straight
// into the caller's buffer, with no tree and no per-value allocation.
//
// Objects are the only values whose canonical text is not in document order. Each member
// is written where it falls, and its span ("key":value, without the comma) is recorded.
// An object whose keys arrive already sorted, the common case, needs nothing more. An
// object that arrives out of order gets its member spans sorted and is marked dirty.
//
// A dirty object is put in order as it closes: its text is copied aside and written back
// member by member in sorted order (the same length, so every enclosing span stays
// valid). Objects inside it were put in order when they closed, so an out-of-order object
// nested in out-of-order objects has its bytes moved once per level. That is the fast
// path, and cheap for the documents APIs see; for a deep one it is quadratic, so it stops
// once it has moved more than reorderBudget times the input and the document is done
// again the general way: there a dirty object only records its sorted member spans, and
// once the whole document has been read a second pass copies the text once more, writing
// the members of each dirty object in sorted order. Moving bytes once at the end keeps
// the work linear in the size of the input however deeply unsorted objects are nested.

// maxJSONDepth is the deepest nesting of arrays and objects accepted.
const maxJSONDepth = 1000

// maxPooledScratch keeps the scratch state of one huge document from staying in the pool.
const maxPooledScratch = 64 << 10

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

func jsonErr(msg string, off int) error { return &jsonError{msg: msg, off: off} }

// cjFrame is one open array or object.
type cjFrame struct {
	object bool
	dirty  bool // members seen out of order
	first  int  // index in members of this object's first member
	rec    int  // index in objs of this object's record (general path)
	start  int  // the '{' in out
}

// cjMember is the span of one written object member: out[start] is the opening quote of
// its key, out[keyEnd] the closing one, and out[end] the first byte after its value.
type cjMember struct {
	// Four fields, no more: the compiler keeps a struct of at most four in registers and
	// copies it field by field, 8 bytes at a time. A fifth made sortMembers copy members
	// 16 bytes at a time, loads that span two 8-byte stores still in flight (the member's
	// fields, its end just written), which wait for them to retire: store-to-load
	// forwarding fails. So a member does not record where the objects inside it start in
	// objs: emit searches for them.
	start, keyEnd, end int
	// prefix is the key's first 8 bytes, big-endian and zero-padded, when they order like
	// the key's UTF-16 code units (no escape, no lead byte F0–F4 among them): two keys
	// whose prefixes are both set and differ compare as their prefixes. 0 when unset (no
	// key's prefix is 0: a key's first byte is never NUL in canonical form).
	prefix uint64
}

// cjObject records an object that still needs work in the final pass. Records are
// reserved when an object opens, so objs is ordered by start. A record with n > 0 is a
// dirty object whose members, sorted, are sorted[first:first+n]; one with n == 0 is a
// clean object kept only because dirty ones lie inside it.
type cjObject struct {
	start, end int // the '{' and just past the '}'
	first, n   int
	next       int // index of the first record after this object's descendants
}

// canonScratch is the reusable state of one appendCanonicalJSON call.
type canonScratch struct {
	general bool // dirty objects are recorded for a second pass, not put in order as they close
	budget  int  // bytes the fast path may still move
	frames  []cjFrame
	members []cjMember // members of the open objects
	sorted  []cjMember // members of closed dirty objects, in canonical order
	objs    []cjObject
	tmp     []byte // the first pass's text, when a second pass is needed
	out     []byte // writeCanonicalJSON's output
}

var canonPool = sync.Pool{New: func() any { return new(canonScratch) }}

// appendCanonicalJSON appends the RFC 8785 canonical form of the JSON text src to dst.
// It returns an error for anything that is not exactly one valid I-JSON value (trailing data, invalid UTF-8,
// lone surrogates, duplicate object keys, numbers outside float64, nesting deeper than 1000).
// On error the returned slice is dst, its length unchanged. dst must not overlap src.
func appendCanonicalJSON(dst, src []byte) ([]byte, error) {
	s := canonPool.Get().(*canonScratch)
	out, err := s.canonicalise(dst, src)
	s.release()
	if err != nil {
		return dst, err
	}
	return out, nil
}

// writeCanonicalJSON writes the RFC 8785 canonical form of the JSON text src to w (a
// hash, say) in one Write, from a pooled buffer. When src is not exactly one valid I-JSON
// value (see appendCanonicalJSON) it writes nothing and returns the error.
func writeCanonicalJSON(w io.Writer, src []byte) error {
	s := canonPool.Get().(*canonScratch)
	err := s.write(w, src)
	s.release()
	return err
}

func (s *canonScratch) write(w io.Writer, src []byte) error {
	out, err := s.canonicalise(s.out[:0], src)
	if err != nil {
		return err
	}
	s.out = out[:0]
	_, err = w.Write(out)
	return err
}

// release returns s to the pool unless one huge document has grown it.
func (s *canonScratch) release() {
	if s.poolable() {
		canonPool.Put(s)
	}
}

// poolable reports whether s is small enough to be kept for reuse: one huge document
// may have grown it.
func (s *canonScratch) poolable() bool {
	return cap(s.tmp)+cap(s.out) <= maxPooledScratch && cap(s.members)+cap(s.sorted)+cap(s.objs) <= maxPooledScratch/32
}

// canonSlack is the spare capacity reserved beyond the input's length: appendJSONString
// copies 8 bytes at a time and keyPrefix reads 8, past the end of what they keep.
const canonSlack = 8

// reorderBudget bounds the fast path's work: it may move reorderBudget times the input's
// length (plus reorderBudgetMin) putting objects in order, about that many levels of
// nested out-of-order objects.
const (
	reorderBudget    = 4
	reorderBudgetMin = 1024
)

// errOverBudget stops the fast path; it never leaves canonicalise.
var errOverBudget = errors.New("idem: canonical JSON: reorder budget spent")

func (s *canonScratch) canonicalise(dst, src []byte) ([]byte, error) {
	s.general, s.budget = false, reorderBudget*len(src)+reorderBudgetMin
	out, err := s.pass(dst, src)
	if err == errOverBudget {
		s.general = true
		out, err = s.pass(dst, src)
	}
	return out, err
}

// pass canonicalises src once, the fast way or (s.general) the general way.
func (s *canonScratch) pass(dst, src []byte) ([]byte, error) {
	s.frames, s.members, s.sorted, s.objs = s.frames[:0], s.members[:0], s.sorted[:0], s.objs[:0]
	base := len(dst)
	// Room for the whole text in one growth: canonical text is never longer than its
	// input (white space goes, escapes shrink or stay) but for numbers, and those grow
	// out as append does. Only for a document small enough for the pooled buffers to
	// keep the room: a bigger one grows as it goes, so a large body that turns out not
	// to be JSON costs no copy.
	out := dst
	if len(src) <= maxPooledScratch {
		out = slices.Grow(dst, len(src)+canonSlack)
	}
	var err error
	i := skipWS(src, 0)
	key := false // src[i] starts a member of the innermost open object
value:
	for {
		if key {
			// A member: `"key" :` at src[i], into the innermost open object.
			key = false
			if i >= len(src) || src[i] != '"' {
				return nil, jsonErr("expected a string key", i)
			}
			start := len(out)
			if out, i, err = appendJSONString(out, src, i); err != nil {
				return nil, err
			}
			// The member is written in place, field by field: built aside and copied in, it
			// would be stored 8 bytes at a time and loaded back 16 at a time, a load that
			// waits for the stores to retire (store-to-load forwarding fails).
			s.members = append(s.members, cjMember{})
			m := &s.members[len(s.members)-1]
			m.start, m.keyEnd = start, len(out)-1
			m.prefix = keyPrefix(out, start+1, m.keyEnd)
			f := &s.frames[len(s.frames)-1]
			if !f.dirty && len(s.members)-1 > f.first {
				// compareMembers, its prefix test written out: it is not inlined.
				switch p := &s.members[len(s.members)-2]; {
				case p.prefix != m.prefix && p.prefix != 0 && m.prefix != 0:
					f.dirty = p.prefix > m.prefix
				default:
					switch cmp := compareMemberKeys(out, p, m); {
					case cmp == 0:
						return nil, jsonErr("duplicate object key", i)
					case cmp > 0:
						f.dirty = true
					}
				}
			}
			i = skipWS(src, i)
			if i >= len(src) || src[i] != ':' {
				return nil, jsonErr("expected ':'", i)
			}
			out = append(out, ':')
			i = skipWS(src, i+1)
		}
		// A value starts at src[i].
		if i >= len(src) {
			return nil, jsonErr("unexpected end of input", i)
		}
		switch c := src[i]; c {
		case '{', '[':
			if len(s.frames) == maxJSONDepth {
				return nil, errJSONTooDeep
			}
			closer := c + 2 // '}' or ']'
			j := skipWS(src, i+1)
			if j < len(src) && src[j] == closer {
				out = append(out, c, closer)
				i = j + 1
				break
			}
			if c == '[' {
				s.frames = append(s.frames, cjFrame{})
				out = append(out, '[')
				i = j
				continue value
			}
			s.frames = append(s.frames, cjFrame{}) // filled in place, as a member is
			f := &s.frames[len(s.frames)-1]
			f.object, f.first, f.rec, f.start = true, len(s.members), len(s.objs), len(out)
			if s.general {
				s.objs = append(s.objs, cjObject{start: len(out)})
			}
			out = append(out, '{')
			i, key = j, true
			continue value
		case '"':
			if out, i, err = appendJSONString(out, src, i); err != nil {
				return nil, err
			}
		case 't':
			if out, i, err = appendLiteral(out, src, i, "true"); err != nil {
				return nil, err
			}
		case 'f':
			if out, i, err = appendLiteral(out, src, i, "false"); err != nil {
				return nil, err
			}
		case 'n':
			if out, i, err = appendLiteral(out, src, i, "null"); err != nil {
				return nil, err
			}
		default:
			if out, i, err = appendJSONNumber(out, src, i); err != nil {
				return nil, err
			}
		}

		// A value ended just before src[i]: see what the enclosing container does next.
		for {
			i = skipWS(src, i)
			if len(s.frames) == 0 {
				if i != len(src) {
					return nil, jsonErr("data after the JSON value", i)
				}
				break value
			}
			if i >= len(src) {
				return nil, jsonErr("unexpected end of input", i)
			}
			f := &s.frames[len(s.frames)-1]
			c := src[i]
			if !f.object {
				switch c {
				case ',':
					out = append(out, ',')
					i = skipWS(src, i+1)
					continue value
				case ']':
					out = append(out, ']')
					i++
					s.frames = s.frames[:len(s.frames)-1]
					continue
				}
				return nil, jsonErr("expected ',' or ']'", i)
			}
			s.members[len(s.members)-1].end = len(out)
			switch c {
			case ',':
				out = append(out, ',')
				i, key = skipWS(src, i+1), true
				continue value
			case '}':
				out = append(out, '}')
				if err = s.closeObject(out, f, i); err != nil {
					return nil, err
				}
				i++
				continue
			}
			return nil, jsonErr("expected ',' or '}'", i)
		}
	}

	if len(s.objs) == 0 {
		return out, nil
	}
	// Some object was out of order: write the text again with its members sorted.
	s.tmp = append(s.tmp[:0], out[base:]...)
	return s.emit(out[:base], base, len(out), 0, base), nil
}

// closeObject finishes the innermost open object, whose '}' is the last byte of out and
// src[at] in the input, and pops its frame.
func (s *canonScratch) closeObject(out []byte, f *cjFrame, at int) error {
	ms := s.members[f.first:]
	rec := f.rec
	switch {
	case f.dirty && !s.general:
		if !sortMembers(out, ms) {
			return jsonErr("duplicate object key in the object closed", at)
		}
		if s.budget -= len(out) - f.start; s.budget < 0 {
			return errOverBudget
		}
		s.reorder(out, f.start, ms)
	case f.dirty:
		if !sortMembers(out, ms) {
			return jsonErr("duplicate object key in the object closed", at)
		}
		first := len(s.sorted)
		s.sorted = append(s.sorted, ms...)
		s.objs[rec] = cjObject{start: s.objs[rec].start, end: len(out), first: first, n: len(ms), next: len(s.objs)}
	case len(s.objs) == rec+1:
		s.objs = s.objs[:rec] // clean, with nothing dirty inside: no record needed
	}
	s.members = s.members[:f.first]
	s.frames = s.frames[:len(s.frames)-1]
	return nil
}

// reorder writes the members of the object at out[start:], its '}' the last byte of out,
// in the order of ms, their spans sorted.
func (s *canonScratch) reorder(out []byte, start int, ms []cjMember) {
	body := out[start+1 : len(out)-1]
	s.tmp = append(s.tmp[:0], body...)
	base := start + 1
	w := body[:0]
	for j := range ms {
		if j > 0 {
			w = append(w, ',')
		}
		w = append(w, s.tmp[ms[j].start-base:ms[j].end-base]...)
	}
}

// emit appends the first pass's text for out[lo:hi] (held in s.tmp from offset base),
// writing the members of every dirty object in it in sorted order. k is the first record
// that can lie inside lo:hi.
// out has room for the whole text (emit is called with cap(out) >= base+len(s.tmp)).
func (s *canonScratch) emit(out []byte, lo, hi, k, base int) []byte {
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
			// The records of objects inside r are objs[k+1:r.next], ordered by start.
			inner, _ := slices.BinarySearchFunc(s.objs[k+1:r.next], m.start, func(o cjObject, at int) int { return o.start - at })
			if inner += k + 1; inner < r.next && s.objs[inner].start < m.end {
				out = s.emit(out, m.start, m.end, inner, base)
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

func memberKey(out []byte, m cjMember) []byte { return out[m.start+1 : m.keyEnd] }

// keyPrefix returns the prefix of cjMember for the key out[lo:hi], its canonical text
// without quotes, or 0. It reads out[lo:lo+8], which may run past hi into out's spare
// capacity: appendJSONString leaves canonSlack bytes of it after the key.
func keyPrefix(out []byte, lo, hi int) uint64 {
	x := binary.BigEndian.Uint64(out[lo : lo+8 : lo+8])
	if n := hi - lo; n < 8 {
		x &^= 1<<(8*(8-n)) - 1 // zero the bytes past the key
	}
	// Any '\\' (an escape, which weighs as the character it stands for) or byte from F0
	// (a character from U+10000, which UTF-16 sorts before U+E000) in the prefix: unset.
	// The tests may flag a byte after a real hit falsely, never miss one.
	b := x ^ (swarOnes * '\\')
	hi4 := ^(x | swarOnes*0x0F) // a zero byte where x's byte is F0–FF
	if ((b-swarOnes)&^b|(hi4-swarOnes)&^hi4)&swarHighs != 0 {
		return 0
	}
	return x
}

// compareMembers compares the keys of a and b, whose text is in out, as compareKeys does.
func compareMembers(out []byte, a, b *cjMember) int {
	if a.prefix != b.prefix && a.prefix != 0 && b.prefix != 0 {
		if a.prefix < b.prefix {
			return -1
		}
		return 1
	}
	return compareMemberKeys(out, a, b)
}

// compareMemberKeys compares the keys of a and b, whose text is in out, with compareKeys.
func compareMemberKeys(out []byte, a, b *cjMember) int {
	return compareKeys(out[a.start+1:a.keyEnd], out[b.start+1:b.keyEnd])
}

// sortMembers sorts the members of one object, whose text is in out, by key. It returns
// false if two keys are equal.
func sortMembers(out []byte, ms []cjMember) bool {
	if len(ms) <= 12 {
		// Insertion sort compares every pair that ends up adjacent, so it sees any two
		// equal keys.
		for i := 1; i < len(ms); i++ {
			m := ms[i]
			j := i
			for ; j > 0; j-- {
				p := &ms[j-1]
				// compareMembers, its prefix test written out: it is not inlined.
				if p.prefix != m.prefix && p.prefix != 0 && m.prefix != 0 {
					if p.prefix < m.prefix {
						break
					}
				} else if c := compareMemberKeys(out, p, &m); c == 0 {
					return false
				} else if c < 0 {
					break
				}
				ms[j] = *p
			}
			ms[j] = m
		}
		return true
	}
	slices.SortFunc(ms, func(a, b cjMember) int {
		return compareMembers(out, &a, &b)
	})
	for k := 1; k < len(ms); k++ {
		if compareMembers(out, &ms[k-1], &ms[k]) == 0 {
			return false
		}
	}
	return true
}

// compareKeys compares two keys, given in their canonical escaped form without quotes,
// by the UTF-16 code units of the strings they denote, as RFC 8785 §3.2.3 orders members.
//
// Canonical escapes are unique (one spelling per character) and are compared by the
// character they stand for. Raw UTF-8 compares like UTF-16 except that characters from
// U+10000 up (lead bytes F0–F4, surrogate pairs in UTF-16) sort before U+E000–U+FFFF
// (lead bytes EE, EF): weights put F0–F4 between ED and EE. Once two lead bytes are
// equal both characters are in the same range, where byte order is code unit order.
func compareKeys(a, b []byte) int {
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
		wa, la := keyUnitWeight(a, i)
		wb, _ := keyUnitWeight(b, i)
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

// keyUnitWeight returns the sort weight of the character or byte at k[i] of a canonical
// key, and how many bytes an escape there takes.
func keyUnitWeight(k []byte, i int) (weight, size int) {
	c := k[i]
	switch {
	case c == '\\':
		switch e := k[i+1]; e {
		case 'u': // \u00xx, lowercase hex
			return int(unhex[k[i+4]]<<4|unhex[k[i+5]]) * 2, 6
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

// skipWS returns the index of the first byte from src[i] on that is not white space.
// Compact JSON has none, so that case is checked inline.
func skipWS(src []byte, i int) int {
	if i < len(src) && src[i] > ' ' {
		return i
	}
	return skipWSLoop(src, i)
}

func skipWSLoop(src []byte, i int) int {
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

func appendLiteral(out, src []byte, i int, lit string) ([]byte, int, error) {
	if len(src)-i < len(lit) || string(src[i:i+len(lit)]) != lit {
		return nil, i, jsonErr("invalid literal", i)
	}
	return append(out, lit...), i + len(lit), nil
}

const (
	swarOnes  = 0x0101010101010101
	swarHighs = 0x8080808080808080
)

// stringAttention returns, for the 8 bytes of x (little-endian), a mask whose lowest set
// bit is the high bit of the first byte that needs attention in a string: a control
// character, quote, backslash or non-ASCII byte. It is 0 if there is none. (Bytes after
// the first may be flagged falsely; the first one never is.)
//
// Why: below the first byte that needs attention no subtraction borrows, so that byte's
// high bit in each term depends on it alone. q-1 has it for q == 0 (a quote) and for
// q >= 0x81, b-1 likewise (a backslash), x-0x20 for x < 0x20 and x >= 0xA0, and x for
// x >= 0x80. q and b have their high bit where x has it, so every case but the quote,
// the backslash and the control characters is a non-ASCII byte, which x flags anyway:
// the usual "&^ v" of the zero-byte test is not needed once x is or-ed in.
func stringAttention(x uint64) uint64 {
	q := x ^ (swarOnes * '"')
	b := x ^ (swarOnes * '\\')
	return ((x - swarOnes*0x20) | (q - swarOnes) | (b - swarOnes) | x) & swarHighs
}

// plainStringByte marks the bytes a string holds as they are: printable ASCII other than
// the quote and the backslash.
var plainStringByte = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// appendJSONString appends the canonical form of the JSON string at src[i] (a '"').
// Plain bytes are copied 8 at a time as they are scanned, into out's spare capacity, the
// last copy running past what is kept; out grows first if it has less room than the rest
// of src and canonSlack.
func appendJSONString(out, src []byte, i int) ([]byte, int, error) {
	if cap(out)-len(out) < len(src)-i+canonSlack {
		// Room for the longest string the rest of src can hold. Already there when pass
		// reserved room for the document, unless a number grew longer than its input.
		out = slices.Grow(out, len(src)-i+canonSlack)
	}
	out = append(out, '"')
	i++
	for {
		// Copy up to the next byte that needs attention, 8 bytes at a time where there are 8.
		if i+8 <= len(src) {
			x := binary.LittleEndian.Uint64(src[i:])
			n := len(out)
			binary.LittleEndian.PutUint64(out[n:n+8:n+8], x)
			m := stringAttention(x)
			if m == 0 {
				out, i = out[:n+8], i+8
				continue
			}
			k := bits.TrailingZeros64(m) >> 3
			if src[i+k] == '"' {
				return out[:n+k+1], i + k + 1, nil // the closing quote was copied with the rest
			}
			out, i = out[:n+k], i+k
		} else {
			for i < len(src) && plainStringByte[src[i]] {
				out = append(out, src[i])
				i++
			}
			if i >= len(src) {
				return nil, i, jsonErr("unterminated string", i)
			}
		}
		switch c := src[i]; {
		case c == '"':
			return append(out, '"'), i + 1, nil
		case c == '\\':
			var err error
			if out, i, err = appendEscape(out, src, i); err != nil {
				return nil, i, err
			}
		case c < 0x20:
			return nil, i, jsonErr("control character in string", i)
		default:
			r, size := utf8.DecodeRune(src[i:])
			if r == utf8.RuneError && size == 1 {
				return nil, i, jsonErr("invalid UTF-8", i)
			}
			out = append(out, src[i:i+size]...)
			i += size
		}
	}
}

// appendEscape appends the canonical form of the escape sequence at src[i] (a '\\').
func appendEscape(out, src []byte, i int) ([]byte, int, error) {
	if i+1 >= len(src) {
		return nil, i, jsonErr("unterminated string", i)
	}
	switch e := src[i+1]; e {
	case '"', '\\', 'b', 'f', 'n', 'r', 't':
		return append(out, '\\', e), i + 2, nil
	case '/':
		return append(out, '/'), i + 2, nil
	case 'u':
	default:
		return nil, i, jsonErr("invalid escape", i)
	}
	r, ok := hex4(src, i+2)
	if !ok {
		return nil, i, jsonErr("invalid \\u escape", i)
	}
	switch {
	case r >= 0xDC00 && r <= 0xDFFF:
		return nil, i, jsonErr("lone low surrogate", i)
	case r >= 0xD800 && r <= 0xDBFF:
		lo, ok := rune(0), false
		if i+7 < len(src) && src[i+6] == '\\' && src[i+7] == 'u' {
			lo, ok = hex4(src, i+8)
		}
		if !ok || lo < 0xDC00 || lo > 0xDFFF {
			return nil, i, jsonErr("lone high surrogate", i)
		}
		return utf8.AppendRune(out, 0x10000+(r-0xD800)<<10+(lo-0xDC00)), i + 12, nil
	case r >= utf8.RuneSelf:
		return utf8.AppendRune(out, r), i + 6, nil
	}
	return appendASCIIEscaped(out, byte(r)), i + 6, nil
}

// appendASCIIEscaped appends the canonical form of the ASCII character c inside a string.
func appendASCIIEscaped(out []byte, c byte) []byte {
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

// unhex maps a hex digit to its value and every other byte to 0xFF.
var unhex = func() (t [256]byte) {
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

func hex4(src []byte, i int) (rune, bool) {
	if i+4 > len(src) {
		return 0, false
	}
	a, b, c, d := unhex[src[i]], unhex[src[i+1]], unhex[src[i+2]], unhex[src[i+3]]
	if (a|b|c|d)&0xF0 != 0 {
		return 0, false
	}
	return rune(a)<<12 | rune(b)<<8 | rune(c)<<4 | rune(d), true
}

// appendJSONNumber appends the canonical form of the JSON number at src[i]: the
// ECMAScript Number-to-string form of the nearest float64.
func appendJSONNumber(out, src []byte, i int) ([]byte, int, error) {
	// The common case first: 1 to 15 digits, the first not 0, then neither a fraction
	// nor an exponent. Such an integer is exactly a float64, which ECMAScript writes
	// digit for digit: it is copied as it stands, as the general path below would.
	if c := src[i]; c >= '1' && c <= '9' {
		j := i + 1
		for j < len(src) && src[j] >= '0' && src[j] <= '9' {
			j++
		}
		if j-i <= 15 && (j == len(src) || (src[j] != '.' && src[j] != 'e' && src[j] != 'E')) {
			return append(out, src[i:j]...), j, nil
		}
	}
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
		return nil, start, jsonErr("invalid value", start)
	}
	integer := true
	if i < len(src) && src[i] == '.' {
		integer = false
		i++
		if i = skipDigits(src, i); i < 0 {
			return nil, start, jsonErr("invalid number", start)
		}
	}
	if i < len(src) && (src[i] == 'e' || src[i] == 'E') {
		integer = false
		i++
		if i < len(src) && (src[i] == '+' || src[i] == '-') {
			i++
		}
		if i = skipDigits(src, i); i < 0 {
			return nil, start, jsonErr("invalid number", start)
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
		return nil, start, jsonErr("number out of range", start)
	}
	return appendESNumber(out, f), i, nil
}

// skipDigits skips one or more digits at src[i], returning -1 when there is none.
func skipDigits(src []byte, i int) int {
	j := i
	for j < len(src) && src[j] >= '0' && src[j] <= '9' {
		j++
	}
	if j == i {
		return -1
	}
	return j
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
