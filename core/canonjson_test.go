package core

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// canonCase is one input of the table: want is its canonical form, or "" when the input
// must be rejected.
type canonCase struct {
	name, in, want string
}

var canonCases = []canonCase{
	// RFC 8785 §3.2.2: literals, numbers and string escapes.
	{"rfc8785 3.2.2", `{
  "numbers": [333333333.33333329, 1E30, 4.50,
              2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`, `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`},
	// RFC 8785 §3.2.3: members sorted by UTF-16 code units, emoji (a surrogate pair)
	// before U+FB33 although its UTF-8 sorts after.
	{"rfc8785 3.2.3", `{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`, "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\"," +
		"\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}"},

	// Structure and white space.
	{"empty object", `{}`, `{}`},
	{"empty array", `[]`, `[]`},
	{"empty containers with space", " { \t} ", `{}`},
	{"empty array with space", "[\n]", `[]`},
	{"white space everywhere", " \t\n\r{ \"a\" : [ 1 , 2 ,{ } , [ ] ] , \"b\":{\"c\" :null} } \n", `{"a":[1,2,{},[]],"b":{"c":null}}`},
	{"top-level string", ` "x" `, `"x"`},
	{"top-level number", `42`, `42`},
	{"top-level true", `true`, `true`},
	{"top-level false", "false\n", `false`},
	{"top-level null", ` null`, `null`},
	{"array order kept", `[3,1,2,"b","a"]`, `[3,1,2,"b","a"]`},
	{"sorted object untouched", `{"a":1,"b":2,"c":3}`, `{"a":1,"b":2,"c":3}`},
	{"two keys swapped", `{"b":1,"a":2}`, `{"a":2,"b":1}`},
	{"prefix key first", `{"ab":1,"a":2}`, `{"a":2,"ab":1}`},
	{"upper case before lower", `{"a":1,"B":2,"A":3}`, `{"A":3,"B":2,"a":1}`},
	{"nested unsorted", `{"b":{"d":1,"c":[{"z":1,"y":2}]},"a":[{"q":{"s":1,"r":2},"p":0},3]}`,
		`{"a":[{"p":0,"q":{"r":2,"s":1}},3],"b":{"c":[{"y":2,"z":1}],"d":1}}`},
	{"sorted parent, unsorted child", `{"a":{"y":1,"x":2},"b":{"d":3,"c":4}}`, `{"a":{"x":2,"y":1},"b":{"c":4,"d":3}}`},
	{"unsorted parent, sorted children", `{"b":{"x":1,"y":2},"a":{"c":3,"d":4}}`, `{"a":{"c":3,"d":4},"b":{"x":1,"y":2}}`},
	{"unsorted at every level", `{"z":{"z":{"z":1,"a":2},"a":{"z":3,"a":4}},"a":{"z":{"z":5,"a":6},"a":7}}`,
		`{"a":{"a":7,"z":{"a":6,"z":5}},"z":{"a":{"a":4,"z":3},"z":{"a":2,"z":1}}}`},
	{"dirty object inside array inside dirty object", `{"b":[{"y":1,"x":2},{"n":{"k":1,"j":2},"m":3}],"a":0}`,
		`{"a":0,"b":[{"x":2,"y":1},{"m":3,"n":{"j":2,"k":1}}]}`},
	{"many members (library sort)", `{"p":16,"o":15,"n":14,"m":13,"l":12,"k":11,"j":10,"i":9,"h":8,"g":7,"f":6,"e":5,"d":4,"c":3,"b":2,"a":1}`,
		`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16}`},

	// Key order is that of the decoded keys' UTF-16 code units.
	{"non-BMP before U+E000", `{"\ue000":1,"\ud800\udc00":2}`, "{\"\U00010000\":2,\"\ue000\":1}"},
	{"non-BMP before U+E000, raw UTF-8", "{\"\ue000\":1,\"\U00010000\":2}", "{\"\U00010000\":2,\"\ue000\":1}"},
	{"U+D7FF, non-BMP, U+FFFF", "{\"\uffff\":1,\"\U0001F600\":2,\"\ud7ff\":3,\"\U0010FFFF\":4}",
		"{\"\ud7ff\":3,\"\U0001F600\":2,\"\U0010FFFF\":4,\"\uffff\":1}"},
	{"two non-BMP keys", "{\"\U00020000\":1,\"\U00010400\":2}", "{\"\U00010400\":2,\"\U00020000\":1}"},
	{"non-BMP after ASCII and Latin", "{\"\U00010000\":1,\"\u00e9\":2,\"z\":3}", "{\"z\":3,\"\u00e9\":2,\"\U00010000\":1}"},
	{"escaped keys sort by decoded character", `{"a\n":1,"a":2,"a\u0000":3,"a\"":4,"a\\":5,"a!":6}`,
		`{"a":2,"a\u0000":3,"a\n":1,"a!":6,"a\"":4,"a\\":5}`},
	{"control escapes sort by value", `{"\u001f":1,"\u0010":2,"\u0001x":3,"\t":4,"\b":5}`,
		`{"\u0001x":3,"\b":5,"\t":4,"\u0010":2,"\u001f":1}`},
	{"backslash key after upper case", `{"\\":1,"Z":2,"]":3}`, `{"Z":2,"\\":1,"]":3}`},
	{"quote key before hash", `{"#":1,"\"":2}`, `{"\"":2,"#":1}`},
	{"case differs, not duplicate", `{"a":1,"A":2}`, `{"A":2,"a":1}`},

	// Strings.
	{"solidus unescaped", `"\/a/b"`, `"/a/b"`},
	{"short escapes kept", `"\"\\\b\f\n\r\t"`, `"\"\\\b\f\n\r\t"`},
	{"u escapes to short forms", `"\u0008\u0009\u000a\u000c\u000d\u0022\u005c\u005C"`, `"\b\t\n\f\r\"\\\\"`},
	{"other controls lowercase hex", `"\u0000\u000B\u001F\u0001"`, `"\u0000\u000b\u001f\u0001"`},
	{"DEL and beyond literal", `"\u007f\u0080\u00e9\u2028\u2029\uFEFF\uffff"`, "\"\u007f\u0080\u00e9\u2028\u2029\ufeff\uffff\""},
	{"ASCII u escapes literal", `"\u0041\u0020\u002f\u007e"`, `"A /~"`},
	{"surrogate pair", `"\uD83D\uDE00\ud83d\ude00"`, "\"😀😀\""},
	{"raw UTF-8 kept", "\"caf\u00e9 \u20ac \U0001F600 \u2028\"", "\"caf\u00e9 \u20ac \U0001F600 \u2028\""},
	{"noncharacter accepted", `"\ufdd0\ufffe"`, "\"\ufdd0\ufffe\""},
	{"long string", `"` + strings.Repeat("abcdefgh", 40) + `\n"`, `"` + strings.Repeat("abcdefgh", 40) + `\n"`},
	{"escape at every offset", `["a\tb","ab\tc","abc\td","abcd\te","abcde\tf","abcdef\tg","abcdefg\th","abcdefgh\ti","abcdefghi\tj"]`,
		`["a\tb","ab\tc","abc\td","abcd\te","abcde\tf","abcdef\tg","abcdefg\th","abcdefgh\ti","abcdefghi\tj"]`},

	// Numbers.
	{"1e21", `1e21`, `1e+21`},
	{"1e-7", `1e-7`, `1e-7`},
	{"0.1", `0.1`, `0.1`},
	{"minus zero", `-0`, `0`},
	{"minus zero decimal", `-0.0`, `0`},
	{"minus zero exponent", `-0e5`, `0`},
	{"zero exponent", `0E+0`, `0`},
	{"1.0", `1.0`, `1`},
	{"100", `100`, `100`},
	{"negative integer", `-123`, `-123`},
	{"15 digits kept", `999999999999999`, `999999999999999`},
	{"negative 15 digits kept", `-999999999999999`, `-999999999999999`},
	{"16 digits exact", `1234567890123456`, `1234567890123456`},
	{"2^53+1 rounds", `9007199254740993`, `9007199254740992`},
	{"123456789012345678", `123456789012345678`, `123456789012345680`},
	{"1e20 plain", `100000000000000000000`, `100000000000000000000`},
	{"1e21 from digits", `1000000000000000000000`, `1e+21`},
	{"1E30", `1E30`, `1e+30`},
	{"4.50", `4.50`, `4.5`},
	{"2e-3", `2e-3`, `0.002`},
	{"1e-6 plain", `1e-6`, `0.000001`},
	{"below 1e-6", `9.999999999999997e-7`, `9.999999999999997e-7`},
	{"smallest denormal", `5e-324`, `5e-324`},
	{"underflow to zero", `1e-400`, `0`},
	{"largest double", `1.7976931348623157e308`, `1.7976931348623157e+308`},
	{"exponent plus", `1E+2`, `100`},
	{"long mantissa", `0.1000000000000000055511151231257827021181583404541015625`, `0.1`},
	{"3 digit exponent", `1e-100`, `1e-100`},
	{"numbers in array", `[-1.5e-7, 1e+300, 12.5, -0.000001]`, `[-1.5e-7,1e+300,12.5,-0.000001]`},

	// Not one valid I-JSON value.
	{"empty", ``, ``},
	{"only white space", " \n", ``},
	{"duplicate key", `{"a":1,"a":2}`, ``},
	{"duplicate key, unsorted", `{"b":1,"a":2,"b":3}`, ``},
	{"duplicate key, escaped", `{"\u0061":1,"a":2}`, ``},
	{"duplicate key, escaped non-ASCII", `{"é":1,"\u00e9":2}`, ``},
	{"duplicate key, surrogate pair", "{\"\\ud83d\\ude00\":1,\"z\":0,\"\U0001F600\":2}", ``},
	{"duplicate key, nested", `{"a":{"b":1,"b":2}}`, ``},
	{"duplicate key, many members", `{"p":1,"o":1,"n":1,"m":1,"l":1,"k":1,"j":1,"i":1,"h":1,"g":1,"f":1,"e":1,"d":1,"c":1,"b":1,"p":1}`, ``},
	{"trailing comma in array", `[1,]`, ``},
	{"trailing comma in object", `{"a":1,}`, ``},
	{"leading comma in array", `[,1]`, ``},
	{"lone comma in object", `{,}`, ``},
	{"double comma", `[1,,2]`, ``},
	{"missing comma", `[1 2]`, ``},
	{"missing member comma", `{"a":1 "b":2}`, ``},
	{"missing colon", `{"a" 1}`, ``},
	{"missing value", `{"a":}`, ``},
	{"unquoted key", `{a:1}`, ``},
	{"single quotes", `{'a':1}`, ``},
	{"number key", `{1:1}`, ``},
	{"unclosed object", `{"a":1`, ``},
	{"unclosed array", `[1`, ``},
	{"unclosed nested", `[{}`, ``},
	{"lone open brace", `{`, ``},
	{"lone close brace", `}`, ``},
	{"mismatched close", `[1}`, ``},
	{"mismatched close object", `{"a":1]`, ``},
	{"two values", `{} {}`, ``},
	{"two numbers", `1 2`, ``},
	{"trailing garbage", `{}x`, ``},
	{"trailing comma at top", `[1],`, ``},
	{"trailing NUL", "{}\x00", ``},
	{"byte order mark", "\ufeff{}", ``},
	{"form feed is not white space", "\f{}", ``},
	{"no-break space is not white space", "\u00a0{}", ``},
	{"comment", `/* c */ {}`, ``},
	{"unterminated string", `"abc`, ``},
	{"unterminated string after escape", `"abc\`, ``},
	{"raw tab in string", "\"a\tb\"", ``},
	{"raw NUL in string", "\"\x00\"", ``},
	{"raw newline in key", "{\"a\nb\":1}", ``},
	{"invalid escape", `"\x41"`, ``},
	{"escaped single quote", `"\'"`, ``},
	{"short u escape", `"\u12"`, ``},
	{"non-hex u escape", `"\u12g4"`, ``},
	{"lone high surrogate", `"\ud800"`, ``},
	{"lone high surrogate then text", `"\ud800abcdef"`, ``},
	{"lone low surrogate", `"\udc00"`, ``},
	{"high then non-surrogate", `"\ud800\u0041"`, ``},
	{"high then high", `"\ud800\ud800"`, ``},
	{"low then high", `"\udc00\ud800"`, ``},
	{"high then short escape", `"\ud800\n"`, ``},
	{"high then non-u escape", `"\ud800\xdc00"`, ``},
	{"high then truncated pair", `"\ud800\udc0"`, ``},
	{"invalid UTF-8 byte", "\"\xff\"", ``},
	{"truncated UTF-8", "\"\xc3\"", ``},
	{"UTF-8 surrogate", "\"\xed\xa0\x80\"", ``},
	{"overlong UTF-8", "\"\xc0\xaf\"", ``},
	{"beyond U+10FFFF", "\"\xf4\x90\x80\x80\"", ``},
	{"invalid UTF-8 in key", "{\"\xfe\":1}", ``},
	{"non-ASCII outside strings", "[1,\u00e9]", ``},
	{"leading zero", `01`, ``},
	{"leading zeros", `000`, ``},
	{"negative leading zero", `-01`, ``},
	{"bare minus", `-`, ``},
	{"double minus", `--1`, ``},
	{"plus sign", `+1`, ``},
	{"leading dot", `.5`, ``},
	{"trailing dot", `1.`, ``},
	{"dot exponent", `1.e5`, ``},
	{"empty exponent", `1e`, ``},
	{"signed empty exponent", `1e+`, ``},
	{"hex number", `0x10`, ``},
	{"underscore number", `1_000`, ``},
	{"Infinity", `Infinity`, ``},
	{"NaN", `NaN`, ``},
	{"overflow", `1e400`, ``},
	{"negative overflow", `-1e400`, ``},
	{"overflow by rounding", `1.7976931348623159e308`, ``},
	{"number then letter", `[1a]`, ``},
	{"truncated true", `tru`, ``},
	{"truncated null", `[nul]`, ``},
	{"true with suffix", `truex`, ``},
	{"capital True", `True`, ``},
	{"literal then string", `[true"x"]`, ``},
}

// canonicalJSON canonicalises src with a scratch of its own.
func canonicalJSON(dst, src []byte) ([]byte, error) {
	return new(canonScratch).canonicalise(dst, src)
}

func TestCanonicalJSONCases(t *testing.T) {
	t.Parallel()
	for _, tc := range canonCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := canonicalJSON(nil, []byte(tc.in))
			if tc.want == "" {
				if err == nil {
					t.Fatalf("canonicalJSON(%q) = %q, want an error", tc.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("canonicalJSON(%q): %v", tc.in, err)
			}
			if string(got) != tc.want {
				t.Fatalf("canonicalJSON(%q)\n got %q\nwant %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestCanonicalJSONCasesAgreeWithJCS holds the table itself to the reference
// implementation, so that a wrong expectation cannot hide a wrong result.
func TestCanonicalJSONCasesAgreeWithJCS(t *testing.T) {
	t.Parallel()
	for _, tc := range canonCases {
		want, err := jcs.Transform([]byte(tc.in))
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%s: jcs accepts %q (giving %q), the table rejects it", tc.name, tc.in, want)
		case tc.want != "" && err != nil:
			t.Errorf("%s: jcs rejects %q (%v), the table accepts it", tc.name, tc.in, err)
		case tc.want != "" && string(want) != tc.want:
			t.Errorf("%s: jcs gives %q, the table %q", tc.name, want, tc.want)
		}
	}
}

func TestCanonicalJSONAppends(t *testing.T) {
	t.Parallel()
	for _, in := range []string{`{"b":[1,{"d":0,"c":1}],"a":true}`, `{"a":1,"b":2}`, `"x"`} {
		want, err := canonicalJSON(nil, []byte(in))
		if err != nil {
			t.Fatal(err)
		}
		for _, prefix := range []string{"", "prefix:", strings.Repeat("p", 100)} {
			dst := make([]byte, len(prefix), len(prefix)+3) // too small: it must grow
			copy(dst, prefix)
			got, err := canonicalJSON(dst, []byte(in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != prefix+string(want) {
				t.Errorf("canonicalJSON(%q, %q) = %q, want %q", prefix, in, got, prefix+string(want))
			}
		}
	}

	dst := []byte("keep")
	got, err := canonicalJSON(dst, []byte(`{"b":1,"a":2,"b":3}`))
	if err == nil {
		t.Fatal("duplicate key accepted")
	}
	if string(got) != "keep" {
		t.Errorf("on error got %q, want dst unchanged", got)
	}
}

// TestCanonicalJSONErrors: a rejected document gets a *jsonError that says what is wrong
// and where, and quotes nothing of the document, which is a client's request body.
func TestCanonicalJSONErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in, msg string
		off     int
	}{
		{`{"secret":1,"secret":2}`, "duplicate object key", 22},
		{`{"b":{"secret":1,"z":0,"\u0073ecret":2},"a":0}`, "duplicate object key", 38},
		{`[1,2`, "expected ',' or the end", 4},
		{`{"secret":1 "b":2}`, "expected ',' or the end", 12},
		{`{"secret" 1}`, "expected ':'", 10},
		{`{secret:1}`, "expected a string key", 1},
		{`{"secret":1}x`, "data after the JSON value", 12},
		{"\"secret\xff\"", "invalid UTF-8", 7},
		{`"secret\ud800"`, "invalid escape", 7},
		{`"secret\q"`, "invalid escape", 7},
		{"\"secret\n\"", "control character", 7},
		{`"secret`, "unterminated string", 7},
		{`[secret]`, "invalid value", 1},
		{`[1.]`, "invalid number", 3},
		{`[1e+]`, "invalid number", 4},
		{`[1e999]`, "number out of range", 1},
		{`[nul]`, "invalid literal", 1},
		{``, "invalid value", 0},
	} {
		_, err := canonicalJSON(nil, []byte(c.in))
		var je *jsonError
		require.ErrorAs(t, err, &je, "%q", c.in)
		assert.Contains(t, err.Error(), c.msg, "%q", c.in)
		assert.Equal(t, c.off, je.off, "%q: %v", c.in, err)
		assert.True(t, strings.HasPrefix(err.Error(), "idem: canonical JSON: "), "%v", err)
		assert.NotContains(t, err.Error(), "secret", "the error quotes the document")
	}
}

func TestCanonicalJSONDepth(t *testing.T) {
	t.Parallel()
	nest := func(n int, open, close string) string {
		return strings.Repeat(open, n) + strings.Repeat(close, n)
	}
	objects := func(n int, inner string) string {
		return strings.Repeat(`{"b":0,"a":`, n) + inner + strings.Repeat("}", n)
	}
	for _, c := range []struct {
		name, in string
		ok       bool
	}{
		{"1000 arrays", nest(1000, "[", "]"), true},
		{"1001 arrays", nest(1001, "[", "]"), false},
		{"1000 arrays around a value", nest(1000, "[", "]")[:1000] + "1" + nest(1000, "[", "]")[1000:], true},
		{"1001 arrays around a value", nest(1001, "[", "]")[:1001] + "1" + nest(1001, "[", "]")[1001:], false},
		{"999 objects and an empty one", objects(999, "{}"), true},
		{"1000 objects and an empty one", objects(1000, "{}"), false},
		{"1000 objects", objects(1000, "0"), true},
		{"1001 objects", objects(1001, "0"), false},
		{"999 objects and an empty array", objects(999, "[]"), true},
		{"1000 objects and an empty array", objects(1000, "[]"), false},
	} {
		got, err := canonicalJSON(nil, []byte(c.in))
		if !c.ok {
			if !errors.Is(err, errJSONTooDeep) {
				t.Errorf("%s: err = %v, want errJSONTooDeep", c.name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		want, err := jcs.Transform([]byte(c.in))
		if err != nil {
			t.Fatalf("%s: jcs: %v", c.name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: output differs from jcs", c.name)
		}
	}
}

// TestCanonicalJSONStringBytesAtEveryOffset puts each byte that ends a run of plain bytes
// in a string (a control character, an escape, non-ASCII, invalid UTF-8) at every offset
// of a string, with runs of every length after it.
func TestCanonicalJSONStringBytesAtEveryOffset(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, insert, want string // want "" for an error
	}{
		{"raw tab", "\t", ""},
		{"raw NUL", "\x00", ""},
		{"raw 0x1f", "\x1f", ""},
		{"space", " ", " "},
		{"DEL", "\x7f", "\x7f"},
		{"escaped quote", `\"`, `\"`},
		{"escaped tab", `\u0009`, `\t`},
		{"two-byte UTF-8", "\u00e9", "\u00e9"},
		{"four-byte UTF-8", "\U0001F600", "\U0001F600"},
		{"invalid byte", "\xff", ""},
		{"continuation byte", "\x80", ""},
		{"truncated three-byte", "\xe2\x82", ""},
	} {
		for off := range 20 {
			for _, tail := range []int{0, 1, 7, 8, 9, 20} {
				head, rest := strings.Repeat("a", off), strings.Repeat("z", tail)
				in := `"` + head + c.insert + rest + `"`
				got, err := canonicalJSON(nil, []byte(in))
				if c.want == "" {
					if err == nil {
						t.Errorf("%s at %d: accepted %q", c.name, off, in)
					}
					continue
				}
				if want := `"` + head + c.want + rest + `"`; err != nil || string(got) != want {
					t.Errorf("%s at %d: got %q, %v; want %q", c.name, off, got, err, want)
				}
			}
		}
		// Unterminated: the string runs to the end of the input.
		for off := range 20 {
			in := `"` + strings.Repeat("a", off)
			if _, err := canonicalJSON(nil, []byte(in)); err == nil {
				t.Errorf("accepted unterminated %q", in)
			}
		}
	}
}

// TestCanonicalJSONNumbers checks the number serialisation against RFC 8785 Appendix B,
// given as IEEE 754 bit patterns, both directly and through a whole document.
func TestCanonicalJSONNumbers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"},
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	} {
		f := math.Float64frombits(c.bits)
		if got := string(appendESNumber(nil, f)); got != c.want {
			t.Errorf("appendESNumber(%#016x) = %s, want %s", c.bits, got, c.want)
		}
		for _, in := range []string{strconv.FormatFloat(f, 'g', -1, 64), strconv.FormatFloat(f, 'e', 20, 64)} {
			got, err := canonicalJSON(nil, []byte("["+in+"]"))
			if err != nil || string(got) != "["+c.want+"]" {
				t.Errorf("canonicalJSON([%s]) = %s, %v; want [%s]", in, got, err, c.want)
			}
		}
	}
}

// TestCanonicalJSONNumbersAgreeWithJCS compares the number serialisation with
// jcs.NumberToJSON over random bit patterns and over numbers near the format boundaries.
func TestCanonicalJSONNumbersAgreeWithJCS(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	check := func(f float64) {
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return
		}
		want, err := jcs.NumberToJSON(f)
		if err != nil {
			t.Fatalf("jcs.NumberToJSON(%v): %v", f, err)
		}
		if got := string(appendESNumber(nil, f)); got != want {
			t.Errorf("appendESNumber(%#016x) = %s, jcs %s", math.Float64bits(f), got, want)
		}
	}
	for range 20000 {
		check(math.Float64frombits(r.Uint64()))
	}
	for _, b := range []float64{1e-7, 1e-6, 1e21, 1e22, 1e15, 1e16, 1, 0.1} {
		for d := -3; d <= 3; d++ {
			check(b * (1 + float64(d)*1e-16))
			check(-b * (1 + float64(d)*1e-16))
			check(math.Nextafter(b, math.Inf(d)))
		}
	}
}

// TestCanonicalJSONKeyOrderAgreesWithJCS puts random pairs of keys, drawn from
// characters on both sides of every boundary of the UTF-16 order, in one object in both
// orders: both must come out as jcs writes them.
func TestCanonicalJSONKeyOrderAgreesWithJCS(t *testing.T) {
	t.Parallel()
	alphabet := []rune{0, 1, '\b', '\t', '\n', 0x1f, ' ', '!', '"', '#', 'A', 'Z', '\\', ']', 'a', 0x7f, 0x80, 0xe9, 0x7ff, 0x800,
		0xd7ff, 0xe000, 0xfb33, 0xfffd, 0xffff, 0x10000, 0x1f600, 0x10ffff}
	r := rand.New(rand.NewPCG(3, 4))
	key := func() []byte {
		rs := make([]rune, r.IntN(4))
		for i := range rs {
			rs[i] = alphabet[r.IntN(len(alphabet))]
		}
		j, err := json.Marshal(string(rs))
		require.NoError(t, err)
		return j
	}
	s := new(canonScratch)
	for range 20000 {
		a, b := key(), key()
		if bytes.Equal(a, b) {
			continue
		}
		for _, doc := range []string{fmt.Sprintf(`{%s:1,%s:2}`, a, b), fmt.Sprintf(`{%s:2,%s:1}`, b, a)} {
			want, err := jcs.Transform([]byte(doc))
			require.NoError(t, err, doc)
			got, err := s.canonicalise(nil, []byte(doc))
			require.NoError(t, err, doc)
			require.Equal(t, string(want), string(got), doc)
		}
	}
}

// TestCanonicalJSONRandomDocuments writes random documents twice, with members in
// different orders, different escapes, number spellings and white space: both must
// canonicalise to the same bytes, which must be jcs's.
func TestCanonicalJSONRandomDocuments(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	s := new(canonScratch) // reused, as the pool reuses it
	for i := range 3000 {
		v := randomValue(r, 0)
		a := writeRandom(nil, r, v)
		b := writeRandom(nil, r, v)
		ca, err := s.canonicalise(nil, a)
		if err != nil {
			t.Fatalf("doc %d %q: %v", i, a, err)
		}
		cb, err := s.canonicalise(nil, b)
		if err != nil {
			t.Fatalf("doc %d %q: %v", i, b, err)
		}
		if !bytes.Equal(ca, cb) {
			t.Fatalf("doc %d: two spellings differ:\n%q -> %q\n%q -> %q", i, a, ca, b, cb)
		}
		want, err := jcs.Transform(a)
		if err != nil {
			t.Fatalf("doc %d %q: jcs: %v", i, a, err)
		}
		if !bytes.Equal(ca, want) {
			t.Fatalf("doc %d %q:\n got %q\njcs  %q", i, a, ca, want)
		}
		// Cut short and corrupted, so that rejections are compared too.
		agreeWithJCS(t, s, a[:r.IntN(len(a))])
		bad := bytes.Clone(a)
		const junk = "\"\\{}[],:0e-\x00\xff"
		bad[r.IntN(len(bad))] = junk[r.IntN(len(junk))]
		agreeWithJCS(t, s, bad)
	}
}

// agreeWithJCS fails t unless s canonicalises src as jcs.Transform, the reference
// implementation, does:
//   - whatever jcs accepts and encoding/json finds valid, we accept with byte-identical
//     output, except documents nested deeper than our limit of 1000 (jcs allows 10000);
//   - whatever jcs rejects, we reject: we never canonicalise a document the reference
//     does not, so a request body is either canonical JSON for both or bytes for both;
//   - what we accept is valid JSON, and our output canonicalises to itself, appended
//     after a prefix; on error dst comes back as it was.
func agreeWithJCS(t *testing.T, s *canonScratch, src []byte) {
	t.Helper()
	got, err := s.canonicalise(nil, src)
	want, jerr := jcs.Transform(src)
	if jerr != nil {
		if err == nil {
			t.Fatalf("accepted %q (giving %q), jcs rejects it: %v", src, got, jerr)
		}
		if dst, _ := s.canonicalise([]byte("keep"), src); string(dst) != "keep" {
			t.Fatalf("rejecting %q changed dst to %q", src, dst)
		}
		return
	}
	if err != nil {
		if errors.Is(err, errJSONTooDeep) || !json.Valid(src) {
			return
		}
		t.Fatalf("rejected %q (%v), jcs gives %q", src, err, want)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("canonical form of %q\n got %q\njcs  %q", src, got, want)
	}
	if !json.Valid(src) {
		t.Fatalf("accepted %q, which encoding/json finds invalid", src)
	}
	again, err := s.canonicalise([]byte("prefix"), got)
	if err != nil || string(again) != "prefix"+string(got) {
		t.Fatalf("output %q does not canonicalise to itself: %q, %v", got, again, err)
	}
}

// TestCanonicalJSONTrickyDocs holds documents aimed at the edges to jcs: keys equal but
// for their spelling, keys that sort differently in UTF-8 and UTF-16, numbers not in
// canonical form, strings ending at every offset, members out of order at every level
// down to the depth limit, errors inside out-of-order objects.
func TestCanonicalJSONTrickyDocs(t *testing.T) {
	t.Parallel()
	docs := []string{
		`{"a\u0062":1,"ab":2}`,
		`{"\u0061":1,"a":2}`,
		`{"a\/b":1,"a/b":2}`,
		`{"b":1,"\\":2,"\"":3,"a":4}`,
		`{"abcdefg\\":1,"abcdefg\"":2,"abcdefg":3}`,
		`{"\ud83d\ude00":1,"\ufb33":2,"\u00e9":3,"e":4}`,
		`{"😀":1,"דּ":2,"é":3,"e":4}`,
		`{"abcdefgh😀":1,"abcdefghדּ":2}`,
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
		`{"b":1,}`,
		`{"b":1,"a":2}x`,
	}
	for n := range 20 {
		k := strings.Repeat("k", n)
		docs = append(docs, `{"`+k+`":"`+k+`","`+k+`0":1,"`+k+`\n":2,"`+k+`é":3}`, `["`+k+`"]`, `"`+k+`\"`+k+`"`)
	}
	for _, depth := range []int{1, 2, 30, 999, 1000} {
		docs = append(docs, strings.Repeat(`{"b":[0],"a":`, depth)+"1"+strings.Repeat(`,"c":[]}`, depth))
		docs = append(docs, strings.Repeat(`{"b":0,"a":`, depth)+`{"d":"`+strings.Repeat("x", 500)+`","c":0}`+strings.Repeat("}", depth))
	}
	s := new(canonScratch)
	for _, doc := range docs {
		agreeWithJCS(t, s, []byte(doc))
	}
}

// TestCanonicalJSONLargeDocuments covers documents larger than the pooled scratch keeps.
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
	s := new(canonScratch)
	agreeWithJCS(t, s, doc)
	require.False(t, s.poolable(), "a scratch grown by a large document is not kept")
	agreeWithJCS(t, s, doc[:len(doc)-1])
	agreeWithJCS(t, s, []byte(`"`+strings.Repeat("s", maxPooledScratch+13)+`"`))
}

// TestCanonicalJSONLargeNonJSONAllocatesNothing: a large body that is not JSON is
// rejected at its first byte (the fingerprint then hashes it as bytes); only the error
// is allocated. Not parallel: the allocation counters are the process's.
func TestCanonicalJSONLargeNonJSONAllocatesNothing(t *testing.T) {
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

type randMember struct {
	key string
	val any
}

var randRunes = []rune{'a', 'b', 'c', 'A', '0', ' ', '"', '\\', '/', '\n', 0, 0x1f, 0x7f, 0xe9, 0x2028, 0xd7ff, 0xe000, 0xffff, 0x1f600, 0x10000}

func randomString(r *rand.Rand) string {
	rs := make([]rune, r.IntN(6))
	for i := range rs {
		rs[i] = randRunes[r.IntN(len(randRunes))]
	}
	return string(rs)
}

func randomValue(r *rand.Rand, depth int) any {
	n := 8
	if depth >= 4 {
		n = 6 // no containers
	}
	switch r.IntN(n) {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2:
		return randomString(r)
	case 3:
		return float64(r.Int64N(1<<20) - 1<<19)
	case 4:
		return math.Float64frombits(r.Uint64()&0x7fefffffffffffff) * float64(1-2*r.IntN(2))
	case 5:
		return r.NormFloat64() * math.Pow(10, float64(r.IntN(60)-30))
	case 6:
		a := make([]any, r.IntN(5))
		for i := range a {
			a[i] = randomValue(r, depth+1)
		}
		return a
	}
	seen := map[string]bool{}
	var ms []randMember
	for range r.IntN(16) {
		k := randomString(r)
		if !seen[k] {
			seen[k] = true
			ms = append(ms, randMember{k, randomValue(r, depth+1)})
		}
	}
	return ms
}

func writeRandom(b []byte, r *rand.Rand, v any) []byte {
	ws := func(b []byte) []byte {
		for range r.IntN(3) / 2 {
			b = append(b, " \t\n\r"[r.IntN(4)])
		}
		return b
	}
	b = ws(b)
	switch v := v.(type) {
	case nil:
		b = append(b, "null"...)
	case bool:
		b = strconv.AppendBool(b, v)
	case string:
		b = writeRandomString(b, r, v)
	case float64:
		switch r.IntN(4) {
		case 0:
			b = strconv.AppendFloat(b, v, 'g', -1, 64)
		case 1:
			b = strconv.AppendFloat(b, v, 'e', 17, 64)
		case 2:
			b = strconv.AppendFloat(b, v, 'E', -1, 64)
		default:
			if math.Abs(v) < 1e25 {
				b = strconv.AppendFloat(b, v, 'f', -1, 64)
			} else {
				b = strconv.AppendFloat(b, v, 'g', 20, 64)
			}
		}
	case []any:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = writeRandom(b, r, e)
		}
		b = append(ws(b), ']')
	case []randMember:
		ms := append([]randMember(nil), v...)
		r.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
		b = append(b, '{')
		for i, m := range ms {
			if i > 0 {
				b = append(b, ',')
			}
			b = writeRandomString(ws(b), r, m.key)
			b = append(ws(b), ':')
			b = writeRandom(b, r, m.val)
		}
		b = append(ws(b), '}')
	default:
		panic(fmt.Sprintf("unexpected %T", v))
	}
	return ws(b)
}

// writeRandomString writes s as a JSON string, each character either raw (where JSON
// allows) or escaped in one of its spellings.
func writeRandomString(b []byte, r *rand.Rand, s string) []byte {
	b = append(b, '"')
	for _, c := range s {
		raw := c >= 0x20 && c != '"' && c != '\\'
		switch {
		case raw && r.IntN(3) > 0:
			b = utf8.AppendRune(b, c)
		case c == '"' && r.IntN(2) == 0:
			b = append(b, `\"`...)
		case c == '\\' && r.IntN(2) == 0:
			b = append(b, `\\`...)
		case c == '/' && r.IntN(2) == 0:
			b = append(b, `\/`...)
		case c == '\n' && r.IntN(2) == 0:
			b = append(b, `\n`...)
		case c >= 0x10000:
			c -= 0x10000
			b = fmt.Appendf(b, `\u%04x\u%04X`, 0xd800+c>>10, 0xdc00+c&0x3ff)
		case r.IntN(2) == 0:
			b = fmt.Appendf(b, `\u%04x`, c)
		default:
			b = fmt.Appendf(b, `\u%04X`, c)
		}
	}
	return append(b, '"')
}

// TestCanonicalJSONZeroAllocs checks that a steady-state call allocates nothing for
// typical payloads. It drives one scratch directly, because under -race sync.Pool drops
// a share of what is put back on purpose. It is not parallel: AllocsPerRun counts the
// whole process's allocations.
func TestCanonicalJSONZeroAllocs(t *testing.T) {
	s := new(canonScratch)
	dst := make([]byte, 0, 8<<10)
	for name, doc := range benchDocs {
		var err error
		allocs := testing.AllocsPerRun(200, func() {
			dst, err = s.canonicalise(dst[:0], doc)
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if allocs != 0 {
			t.Errorf("%s: %v allocations per call, want 0", name, allocs)
		}
	}
}

// FuzzCanonicalJSON holds the canonicaliser to jcs.Transform, as agreeWithJCS says.
func FuzzCanonicalJSON(f *testing.F) {
	for _, tc := range canonCases {
		f.Add([]byte(tc.in))
	}
	for _, doc := range benchDocs {
		f.Add(doc)
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		agreeWithJCS(t, new(canonScratch), src)
	})
}

// Benchmark documents: a typical ~200-byte API payload with its keys out of order, the
// middleware benchmark's body (keys already sorted), and a ~4 KiB nested document.
var benchDocs = map[string][]byte{
	"200B": []byte(`{"amount":1999,"currency":"EUR","customer":{"id":"cus_8f2a","email":"ada@example.com"},` +
		`"description":"Order #1234","metadata":{"order_id":"1234","channel":"web"},"capture":true,"tip":null,"livemode":false}`),
	"200B-sorted": []byte(`{"item":"` + strings.Repeat("b", 172) + `","quantity":2}`),
	"4KiB":        nestedBenchDoc(),
	// internal/peerbench's request: three levels, every one out of order.
	"230B-nested": []byte(`{"customer":{"id":"cus_8e03978e","email":"ada@example.com","address":{"city":"London","zip":"N1 9GU"}},` +
		`"items":[{"sku":"book-1","quantity":2,"price_cents":1299},{"sku":"pen-7","quantity":1,"price_cents":250}],"currency":"GBP"}`),
}

func nestedBenchDoc() []byte {
	var b strings.Builder
	b.WriteString(`{"order":{"id":"ord_01HZX3","status":"pending","created":1718000000,"lines":[`)
	for i := range 24 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"sku":"SKU-%04d","qty":%d,"price":%d.%02d,"name":"Widget \u00e9dition %d","tags":["a","b"],`+
			`"options":{"size":"M","color":"blue","gift":%t},"discount":null}`, i, i+1, 10+i, i*7%100, i, i%2 == 0)
	}
	b.WriteString(`],"shipping":{"name":"Ada Lovelace","line1":"12 St James's Square","city":"London","zip":"SW1Y 4JH",` +
		`"country":"GB"},"notes":"Leave at the door \ud83d\ude00\nThanks"},"account":"acct_42","idempotent":true}`)
	return []byte(b.String())
}

// TestCanonicalJSONBenchDocs keeps the benchmark documents the sizes their names say and
// checks that we and jcs agree on them, so the benchmark compares like with like.
func TestCanonicalJSONBenchDocs(t *testing.T) {
	t.Parallel()
	for name, size := range map[string]int{"200B": 200, "200B-sorted": 200, "4KiB": 4096, "230B-nested": 230} {
		doc := benchDocs[name]
		if len(doc) < size*9/10 || len(doc) > size*11/10 {
			t.Errorf("%s is %d bytes, want about %d", name, len(doc), size)
		}
		got, err := canonicalJSON(nil, doc)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want, err := jcs.Transform(doc)
		if err != nil {
			t.Fatalf("%s: jcs: %v", name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %s\njcs  %s", name, got, want)
		}
	}
}

func BenchmarkCanonicalJSON(b *testing.B) {
	for _, name := range []string{"200B", "200B-sorted", "230B-nested", "4KiB"} {
		doc := benchDocs[name]
		b.Run("ours/"+name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(doc)))
			s := new(canonScratch)
			dst := make([]byte, 0, 2*len(doc))
			for b.Loop() {
				var err error
				if dst, err = s.canonicalise(dst[:0], doc); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("jcs/"+name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(doc)))
			for b.Loop() {
				if _, err := jcs.Transform(doc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// canonicalise, the tests' entry point, appends the RFC 8785 canonical form of the JSON text src to dst. It
// returns an error for anything that is not exactly one valid I-JSON value (trailing
// data, invalid UTF-8, lone surrogates, duplicate object keys, numbers outside float64,
// nesting deeper than maxJSONDepth, more than maxJSONSize bytes), and then dst as it was.
func (s *canonScratch) canonicalise(dst, src []byte) ([]byte, error) {
	if err := s.parse(src); err != nil {
		return dst, err
	}
	return s.emit(dst, nil), nil
}
