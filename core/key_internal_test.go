package core

import (
	"strings"
	"testing"
)

// TestParseKeyFastPathAgrees checks parseKey's fast path for bare keys against the general
// path on keys at and around every boundary the general path checks: every byte value,
// surrounding and inner white space, commas, quotes, lengths 0, 1, 255 and 256, and
// minimum lengths.
func TestParseKeyFastPathAgrees(t *testing.T) {
	t.Parallel()
	var values []string
	for c := range 256 {
		b := string([]byte{byte(c)})
		values = append(values, b, "k"+b, b+"k", "ab"+b+"cd", `"`+b+`"`)
	}
	values = append(values, "", " ", "\t", " key", "key ", "\tkey\t", "a,b", "a b", `"quoted"`, `"a\"b"`, `a"b`,
		`"x";p=1`, "é", strings.Repeat("z", 254), strings.Repeat("z", 255), strings.Repeat("z", 256),
		"8e03978e-40d5-43e8-bc93-000000000001", "~", "!")
	for _, v := range values {
		for _, minLen := range []int{0, 1, 2, 5, 36, 255, 256} {
			gotKey, gotOK, gotErr := parseKey([]string{v}, minLen)
			wantKey, wantOK, wantErr := parseKeyValue(v, minLen)
			if gotKey != wantKey || gotOK != wantOK || (gotErr == nil) != (wantErr == nil) {
				t.Errorf("parseKey(%q, %d) = %q, %v, %v; the general path gives %q, %v, %v", v, minLen, gotKey, gotOK, gotErr, wantKey, wantOK, wantErr)
			}
		}
	}
}
