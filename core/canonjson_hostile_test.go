package core

import (
	"bytes"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// hostileSize is the size of each hostile document: the default MaxRequestBody, less two
// bytes, as the 1,048,574-byte body.
const hostileSize = 1<<20 - 2

// hostileDocs are the shapes of JSON body that cost a canonicaliser the most memory per
// byte, each hostileSize bytes long: many tiny numbers, many tiny strings, nesting to the
// depth limit (every level's members out of order) around many numbers, many small
// objects with their keys out of order, and one object with many keys out of order (six
// bytes or three long).
var hostileDocs = func() map[string][]byte {
	fill := func(head, unit, sep, tail string) []byte {
		var b bytes.Buffer
		b.WriteString(head)
		for i := 0; b.Len()+len(sep)+len(unit)+len(tail) <= hostileSize; i++ {
			if i > 0 {
				b.WriteString(sep)
			}
			b.WriteString(unit)
		}
		// Pad with white space to the exact size: it is parsed, never kept.
		b.WriteString(strings.Repeat(" ", hostileSize-b.Len()-len(tail)))
		b.WriteString(tail)
		return b.Bytes()
	}
	deepHead := strings.Repeat(`{"b":0,"a":`, maxJSONDepth-1) + `[`
	deepTail := `]` + strings.Repeat(`}`, maxJSONDepth-1)
	var manyKeys bytes.Buffer
	manyKeys.WriteString("{")
	for i := 0; manyKeys.Len() < hostileSize-40; i++ {
		if i > 0 {
			manyKeys.WriteString(",")
		}
		manyKeys.WriteString(`"` + strconv.Itoa(1e6-i) + `":0`)
	}
	manyKeys.WriteString(strings.Repeat(" ", hostileSize-manyKeys.Len()-1) + "}")
	// The shortest keys that can be all different in one object, in reverse order.
	const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	var shortKeys bytes.Buffer
	shortKeys.WriteString("{")
	for i := len(alphabet) * len(alphabet) * len(alphabet); shortKeys.Len() < hostileSize-40; i-- {
		if shortKeys.Len() > 1 {
			shortKeys.WriteString(",")
		}
		n := len(alphabet)
		shortKeys.WriteString(`"` + string([]byte{alphabet[i/n/n%n], alphabet[i/n%n], alphabet[i%n]}) + `":0`)
	}
	shortKeys.WriteString(strings.Repeat(" ", hostileSize-shortKeys.Len()-1) + "}")
	return map[string][]byte{
		"numbers": fill(`{"item":"b","x":[`, `0`, `,`, `]}`),
		// Each written 100000000000000000000: the canonical text is 4.4 times as long.
		"long-numbers":  fill(`[`, `9e20`, `,`, `]`),
		"strings":       fill(`{"item":"b","x":[`, `""`, `,`, `]}`),
		"deep":          fill(deepHead, `0`, `,`, deepTail),
		"objects":       fill(`[`, `{"j":0,"i":0,"h":0,"g":0,"f":0,"e":0,"d":0,"c":0,"b":0,"a":0}`, `,`, `]`),
		"small-objects": fill(`[`, `{"b":0,"a":0}`, `,`, `]`),
		"empty-objects": fill(`[`, `{}`, `,`, `]`),
		"many-keys":     manyKeys.Bytes(),
		"short-keys":    shortKeys.Bytes(),
	}
}()

// TestCanonicalJSONHostileDocsAgreeWithJCS holds every hostile shape to jcs.
func TestCanonicalJSONHostileDocsAgreeWithJCS(t *testing.T) {
	t.Parallel()
	s := new(canonScratch)
	for name, doc := range hostileDocs {
		if len(doc) != hostileSize {
			t.Fatalf("%s is %d bytes, want %d", name, len(doc), hostileSize)
		}
		agreeWithJCS(t, s, doc)
	}
}

// TestFingerprintHostileBodyAllocation: fingerprinting any JSON body up to the default
// MaxRequestBody allocates at most 8 times its size (issue 34: a 1 MiB body of tiny values
// cost 107 MiB). It counts bytes, not allocations, with the process's counter, so it is
// not parallel.
func TestFingerprintHostileBodyAllocation(t *testing.T) {
	r := &http.Request{Method: "POST", URL: &url.URL{Path: "/v1/orders"}}
	for name, doc := range hostileDocs {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := Fingerprint(r, doc)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		n := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s: %d bytes allocated for a %d-byte body (%.2fx)", name, n, len(doc), float64(n)/float64(len(doc)))
		if n > 8*uint64(len(doc)) {
			t.Errorf("%s: fingerprinting a %d-byte body allocated %d bytes (%.1fx), want at most 8x",
				name, len(doc), n, float64(n)/float64(len(doc)))
		}
	}
}

// BenchmarkFingerprintHostile fingerprints each hostile shape; -benchmem gives the bytes
// allocated per body.
func BenchmarkFingerprintHostile(b *testing.B) {
	r := &http.Request{Method: "POST", URL: &url.URL{Path: "/v1/orders"}}
	for _, name := range []string{"numbers", "long-numbers", "strings", "deep", "objects", "small-objects", "empty-objects", "many-keys", "short-keys"} {
		doc := hostileDocs[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(doc)))
			for b.Loop() {
				if _, err := Fingerprint(r, doc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
