package core

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The tests in this file hold the tuned canonicaliser (key prefixes, strings copied a word
// at a time, dirty objects put in order as they close, the budget that falls back to the
// second pass) to the one it replaced, kept as refAppendCanonicalJSON: the same bytes for
// every document, the same documents rejected.

// agreeWithReference fails t unless appendCanonicalJSON and the reference agree on src,
// appending after a prefix with spare capacity (which the word-at-a-time copy writes past
// the end of what it keeps) and without one.
func agreeWithReference(t *testing.T, name string, src []byte) {
	t.Helper()
	want, wantErr := refAppendCanonicalJSON(nil, src)
	for _, dst := range [][]byte{nil, []byte("prefix"), append(make([]byte, 0, 3*len(src)+64), "p"...)} {
		got, err := appendCanonicalJSON(dst, src)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("%s: %q: err = %v, the reference's %v", name, src, err, wantErr)
		}
		if err != nil {
			if !bytes.Equal(got, dst) {
				t.Fatalf("%s: on error got %q, want dst %q unchanged", name, got, dst)
			}
			continue
		}
		if !bytes.HasPrefix(got, dst) || !bytes.Equal(got[len(dst):], want) {
			t.Fatalf("%s: %q:\n got %q\nwant %q", name, src, got[len(dst):], want)
		}
	}
}

func TestCanonicalJSONAgreesWithReference(t *testing.T) {
	t.Parallel()
	for _, tc := range canonCases {
		agreeWithReference(t, tc.name, []byte(tc.in))
	}
	for name, doc := range benchDocs {
		agreeWithReference(t, name, doc)
	}
	for i, doc := range trickyDocs() {
		agreeWithReference(t, fmt.Sprintf("tricky %d", i), []byte(doc))
	}
	r := rand.New(rand.NewPCG(15, 8785))
	for i := range 3000 {
		doc := writeRandom(nil, r, randomValue(r, 0))
		agreeWithReference(t, fmt.Sprintf("random %d", i), doc)
		// Cut short and corrupted, so that errors are compared too.
		if len(doc) > 1 {
			agreeWithReference(t, fmt.Sprintf("random %d cut", i), doc[:r.IntN(len(doc))])
			bad := bytes.Clone(doc)
			const junk = "\"\\{}[],:0e-\x00\xff"
			bad[r.IntN(len(bad))] = junk[r.IntN(len(junk))]
			agreeWithReference(t, fmt.Sprintf("random %d corrupted", i), bad)
		}
	}
}

// trickyDocs are documents aimed at the fast paths: keys that agree in their first 8
// bytes or differ only past them, escapes and non-ASCII inside and just past the 8-byte
// key prefix, duplicate keys spelled two ways, numbers not in canonical form, strings
// whose end falls at every offset of a word.
func trickyDocs() []string {
	docs := []string{
		`{"abcdefgh2":1,"abcdefgh1":2}`,
		`{"abcdefgh":1,"abcdefg":2,"abcdefghi":3,"abcdef":4}`,
		`{"abcdefgh":1,"abcdefgh":2}`,
		`{"a\u0062":1,"ab":2}`,
		`{"ab":1,"a\u0062":2}`,
		`{"\u0061":1,"a":2}`,
		`{"a\/b":1,"a/b":2}`,
		`{"b":1,"\\":2,"\"":3,"a":4}`,
		`{"abcdefg\\":1,"abcdefg\"":2,"abcdefg":3}`,
		`{"abcdefgh\\":1,"abcdefgh\"":2,"abcdefgh":3}`,
		`{"\ud83d\ude00":1,"\ufb33":2,"\u00e9":3,"e":4}`,
		`{"😀":1,"דּ":2,"é":3,"e":4}`,
		`{"abcdefg😀":1,"abcdefgדּ":2}`,
		`{"abcdefgh😀":1,"abcdefghדּ":2}`,
		`{"\u0000":1,"":2,"\u0001":3}`,
		`{"":1,"":2}`,
		`{"z":1e2,"y":-0,"x":1.0,"w":0.1e1,"v":1E+2,"u":-0.0,"t":100e-2,"s":123456789012345678901234567890}`,
		`{"b":[1e2,-0,1.0,1e21,1e-7,9007199254740993,-9007199254740993,5e-324,1.7976931348623157e308]}`,
		`{"b":{"d":{"f":1,"e":2},"c":3},"a":{"h":[{"j":1,"i":2}],"g":4}}`,
		`{"b":{"b":1,"a":2,"b":3},"a":1}`,
		`{"b":{"a":1},"a":{"a":1},"b":2}`,
		`[{"b":1,"a":2},{"d":3,"c":4},[{"f":5,"e":6}]]`,
		` { "b" : 1 , "a" : [ { "d" : 2 , "c" : 3 } ] } `,
		`{"b":"\u00e9\u20ac\ud83d\ude00\t\n\u001f\"\\\/","a":"x"}`,
		`{"b":"\ud83d","a":1}`,
		`{"b":"\ude00","a":1}`,
		`{"b":1,"a":2`,
		`{"b":1,"a":}`,
		`{"b" 1}`,
		`{"b":1,}`,
		`{"b":1,"a":2}x`,
	}
	// A string ending at every offset of an 8-byte word, inside and outside keys.
	for n := range 20 {
		s := strings.Repeat("k", n)
		docs = append(docs, `{"`+s+`":"`+s+`","`+s+`0":1,"`+s+`\n":2,"`+s+`é":3}`, `["`+s+`"]`, `"`+s+`\"`+s+`"`)
	}
	// Members out of order at every level, deeper than the fast path's budget covers, and
	// at the depth limit.
	for _, depth := range []int{1, 2, 7, 8, 9, 30, 200, 999, 1000} {
		docs = append(docs, strings.Repeat(`{"b":[0],"a":`, depth)+"1"+strings.Repeat(`,"c":[]}`, depth))
		docs = append(docs, strings.Repeat(`{"b":0,"a":`, depth)+`{"d":"`+strings.Repeat("x", 500)+`","c":0}`+strings.Repeat("}", depth))
	}
	return docs
}

// TestCanonicalJSONBudgetFallback checks that a document nested too deep out of order
// for the fast path does spend its budget, and still comes out right.
func TestCanonicalJSONBudgetFallback(t *testing.T) {
	t.Parallel()
	doc := []byte(strings.Repeat(`{"b":0,"a":`, 300) + `"` + strings.Repeat("x", 2000) + `"` + strings.Repeat("}", 300))
	s := new(canonScratch)
	s.general, s.budget = false, reorderBudget*len(doc)+reorderBudgetMin
	if _, err := s.pass(nil, doc); err != errOverBudget {
		t.Fatalf("fast pass: err = %v, want errOverBudget", err)
	}
	agreeWithReference(t, "deep", doc)
	// A shallow one never needs the general pass.
	s.general, s.budget = false, reorderBudget*len(benchDocs["230B-nested"])+reorderBudgetMin
	if _, err := s.pass(nil, benchDocs["230B-nested"]); err != nil {
		t.Fatalf("fast pass on the nested document: %v", err)
	}
}

// TestCanonicalJSONGeneralPathAgrees runs every document through the general path, which
// only documents nested too deep out of order reach otherwise: its second pass finds the
// objects inside each sorted member by searching the records, and must find them all.
func TestCanonicalJSONGeneralPathAgrees(t *testing.T) {
	t.Parallel()
	docs := trickyDocs()
	for _, doc := range benchDocs {
		docs = append(docs, string(doc))
	}
	r := rand.New(rand.NewPCG(15, 8786))
	for range 3000 {
		docs = append(docs, string(writeRandom(nil, r, randomValue(r, 0))))
	}
	for i, doc := range docs {
		want, wantErr := refAppendCanonicalJSON(nil, []byte(doc))
		s := new(canonScratch)
		s.general = true
		got, err := s.pass([]byte("p"), []byte(doc))
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("doc %d %q: err = %v, the reference's %v", i, doc, err, wantErr)
		}
		if err == nil && string(got) != "p"+string(want) {
			t.Fatalf("doc %d %q:\n got %q\nwant %q", i, doc, got[1:], want)
		}
	}
}

func TestKeyPrefix(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		key  string
		want uint64
	}{
		{"a", 0x61 << 56},
		{"abcdefgh", 0x6162636465666768},
		{"abcdefghij", 0x6162636465666768},
		{"", 0},
		{`a\nb`, 0},
		{`abcdefg\n`, 0},
		{`abcdefgh\n`, 0x6162636465666768}, // the escape is past the prefix
		{"a😀", 0},
		{"abcdefgh😀", 0x6162636465666768},
		{"é", 0xc3a9 << 48},
		{"\uffff", 0xefbfbf << 40},
	} {
		buf := append([]byte(c.key), `":\"\\`+"\xff\xf0"...) // bytes past the key must not count
		if got := keyPrefix(buf, 0, len(c.key)); got != c.want {
			t.Errorf("keyPrefix(%q) = %#x, want %#x", c.key, got, c.want)
		}
	}
}

// TestStringAttention holds the word-at-a-time test to a byte-at-a-time one: whatever
// byte is at offset p, with plain bytes before it and anything after, the lowest flagged
// byte is p exactly when p's byte needs attention, and after p otherwise.
func TestStringAttention(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(8785, 15))
	for p := range 8 {
		for c := range 256 {
			for range 64 {
				var w [8]byte
				for j := range w {
					switch {
					case j < p:
						for w[j] = byte(r.IntN(256)); !plainStringByte[w[j]]; w[j] = byte(r.IntN(256)) {
						}
					case j == p:
						w[j] = byte(c)
					default:
						w[j] = byte(r.IntN(256))
					}
				}
				m := stringAttention(binary.LittleEndian.Uint64(w[:]))
				first := bits.TrailingZeros64(m) >> 3 // 8 when none
				if plainStringByte[c] {
					require.Greater(t, first, p, "%q: byte %d flagged", w, p)
				} else {
					require.Equal(t, p, first, "%q: first byte needing attention", w)
				}
			}
		}
	}
}

// TestCanonicalJSONLargeDocuments covers documents over maxPooledScratch, for which no
// room is reserved up front: strings grow the output as they are copied, and key
// prefixes are left unset where the output has no spare capacity.
func TestCanonicalJSONLargeDocuments(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString(`{"z":[`)
	for i := 0; b.Len() < maxPooledScratch+4096; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"name":"item %d \u00e9\n","id":%d,"abcdefghij%d":true,"abcdefghi":1e2,"a":{"y":"%s","x":-0}}`,
			i, i, i%7, strings.Repeat("v", i%23))
	}
	b.WriteString(`],"b":"` + strings.Repeat("w", 70000) + `","a":null}`)
	doc := []byte(b.String())
	if len(doc) <= maxPooledScratch {
		t.Fatalf("document is %d bytes, want more than %d", len(doc), maxPooledScratch)
	}
	agreeWithReference(t, "large", doc)
	agreeWithReference(t, "large, cut", doc[:len(doc)-1])
	agreeWithReference(t, "large string", []byte(`"`+strings.Repeat("s", maxPooledScratch+13)+`"`))
}

// TestCanonicalJSONLargeNonJSONReservesNothing: a large body that is not JSON is
// rejected at its first byte without reserving room for its canonical form (the
// fingerprint then hashes it as bytes); only the error is allocated. Not parallel: the
// allocation counters are the process's.
func TestCanonicalJSONLargeNonJSONReservesNothing(t *testing.T) {
	s := new(canonScratch)
	body := bytes.Repeat([]byte{0x89, 'P', 'N', 'G'}, (1<<20)/4)
	dst := make([]byte, 0, 64)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 20 {
		if _, err := s.canonicalise(dst, body); err == nil {
			t.Fatal("binary body accepted as JSON")
		}
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
		t.Errorf("rejecting a 1 MiB binary body 20 times allocated %d bytes", n)
	}
}
