package core

import (
	"encoding/binary"
	"math/bits"
	"slices"
	"unicode/utf8"
)

// This file is the canonicaliser as it stood before issue 15's fast paths (main at
// d489f0d), every top-level name prefixed with "ref". It is kept, test-only, as a second
// oracle beside jcs: the differential tests check that the tuned canonjson.go writes the
// same bytes and rejects the same documents, including those jcs does not judge (depth).
// Only what issue 15 changed is kept here (the pass over the document, objects and their
// ordering, strings, whitespace); the helpers it left as they were (escapes, numbers,
// key comparison, literals) are canonjson.go's own, called from here.
//
// How it works: each member is written where it falls and its span recorded; an object
// that arrives out of order gets its member spans sorted and is marked dirty, and once
// the whole document has been read, and only if something was dirty, a second pass
// copies the text once more, writing the members of each dirty object in sorted order.
// The limits and the errors (maxJSONDepth, errJSONTooDeep, jsonErr) are canonjson.go's.

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
}

// refAppendCanonicalJSON appends the RFC 8785 canonical form of the JSON text src to dst,
// as appendCanonicalJSON does; on error it returns dst unchanged.
func refAppendCanonicalJSON(dst, src []byte) ([]byte, error) {
	out, err := new(refCanonScratch).canonicalise(dst, src)
	if err != nil {
		return dst, err
	}
	return out, nil
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
			return nil, jsonErr("unexpected end of input", i)
		}
		switch c := src[i]; c {
		case '{', '[':
			if len(s.frames) == maxJSONDepth {
				return nil, errJSONTooDeep
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
			i = refSkipWS(src, i)
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
					i = refSkipWS(src, i+1)
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

// member reads `"key" :` at src[i] into the innermost open object, which is the last frame,
// and leaves i at the start of the member's value.
func (s *refCanonScratch) member(out, src []byte, i int) ([]byte, int, error) {
	if i >= len(src) || src[i] != '"' {
		return nil, i, jsonErr("expected a string key", i)
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
		switch cmp := compareKeys(out[prev.start+1:prev.keyEnd], out[start+1:keyEnd]); {
		case cmp == 0:
			return nil, i, jsonErr("duplicate object key", i)
		case cmp > 0:
			f.dirty = true
		}
	}
	s.members = append(s.members, refCjMember{start: start, keyEnd: keyEnd, rec: len(s.objs)})
	i = refSkipWS(src, i)
	if i >= len(src) || src[i] != ':' {
		return nil, i, jsonErr("expected ':'", i)
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
			return jsonErr("duplicate object key in the object closed", at)
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
				c := compareKeys(refMemberKey(out, ms[j-1]), key)
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
		return compareKeys(refMemberKey(out, a), refMemberKey(out, b))
	})
	for k := 1; k < len(ms); k++ {
		if compareKeys(refMemberKey(out, ms[k-1]), refMemberKey(out, ms[k])) == 0 {
			return false
		}
	}
	return true
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

const (
	refSwarOnes  = 0x0101010101010101
	refSwarHighs = 0x8080808080808080
)

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
			m := stringAttention(binary.LittleEndian.Uint64(src[i:]))
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
				return nil, i, jsonErr("unterminated string", i)
			}
		}
		switch c := src[i]; {
		case c == '"':
			out = append(out, src[start:i]...)
			return append(out, '"'), i + 1, nil
		case c == '\\':
			out = append(out, src[start:i]...)
			var err error
			if out, i, err = appendEscape(out, src, i); err != nil {
				return nil, i, err
			}
			start = i
		case c < 0x20:
			return nil, i, jsonErr("control character in string", i)
		default:
			r, size := utf8.DecodeRune(src[i:])
			if r == utf8.RuneError && size == 1 {
				return nil, i, jsonErr("invalid UTF-8", i)
			}
			i += size
		}
	}
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
