package core

import (
	"errors"
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", 255)
	tests := []struct {
		name    string
		values  []string
		want    string
		present bool
		wantErr bool
	}{
		{name: "absent", values: nil, present: false},
		{name: "bare uuid", values: []string{"8e03978e-40d5-43e8-bc93-6894a57f9324"}, want: "8e03978e-40d5-43e8-bc93-6894a57f9324", present: true},
		{name: "sf-string uuid", values: []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, want: "8e03978e-40d5-43e8-bc93-6894a57f9324", present: true},
		{name: "surrounding spaces trimmed", values: []string{"  abc\t"}, want: "abc", present: true},
		{name: "sf-string with space and comma", values: []string{`"a b,c"`}, want: "a b,c", present: true},
		{name: "sf-string escapes", values: []string{`"a\"b\\c"`}, want: `a"b\c`, present: true},
		{name: "sf-string parameters ignored", values: []string{`"abc";v=1`}, want: "abc", present: true},
		{name: "255 characters", values: []string{long}, want: long, present: true},
		{name: "256 characters", values: []string{long + "k"}, present: true, wantErr: true},
		{name: "empty", values: []string{""}, present: true, wantErr: true},
		{name: "only spaces", values: []string{"   "}, present: true, wantErr: true},
		{name: "empty sf-string", values: []string{`""`}, present: true, wantErr: true},
		{name: "bare with comma", values: []string{"a,b"}, present: true, wantErr: true},
		{name: "bare with space", values: []string{"a b"}, present: true, wantErr: true},
		{name: "two fields", values: []string{"a", "b"}, present: true, wantErr: true},
		{name: "control character", values: []string{"a\x01b"}, present: true, wantErr: true},
		{name: "DEL", values: []string{"a\x7fb"}, present: true, wantErr: true},
		{name: "non-ASCII", values: []string{"clé"}, present: true, wantErr: true},
		{name: "bad escape in sf-string", values: []string{`"a\nb"`}, present: true, wantErr: true},
		{name: "unterminated sf-string", values: []string{`"abc`}, present: true, wantErr: true},
		{name: "sf-string then junk", values: []string{`"abc" x`}, present: true, wantErr: true},
		{name: "non-ASCII in sf-string", values: []string{`"clé"`}, present: true, wantErr: true},
		{name: "sf-string of digits", values: []string{`"1"`}, want: "1", present: true},
		{name: "sf-integer is not a key", values: []string{`1;a`}, want: "1;a", present: true},
		{name: "sf-token is not quoted", values: []string{`"abc"x`}, present: true, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, present, err := parseKey(tt.values, 1)
			if present != tt.present {
				t.Fatalf("present = %v, want %v", present, tt.present)
			}
			if tt.wantErr {
				if !errors.Is(err, ErrInvalidKey) {
					t.Fatalf("err = %v, want ErrInvalidKey", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseKey(%q) = %q, %v; want %q", tt.values, got, err, tt.want)
			}
		})
	}
}

func TestParseKeyMinLength(t *testing.T) {
	t.Parallel()
	if _, _, err := parseKey([]string{"short"}, 16); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("5-character key with MinKeyLength 16: err = %v, want ErrInvalidKey", err)
	}
	if k, _, err := parseKey([]string{"0123456789abcdef"}, 16); err != nil || k != "0123456789abcdef" {
		t.Fatalf("16-character key: %q, %v", k, err)
	}
}

// FuzzParseKey checks the contract on any input: an accepted key is 1–255 printable
// ASCII characters, and a bare accepted key names the same key as its sf-string form.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, `"a\"b"`, "a,b", " x ", `"x";p=1`, "\x00", "é", `""`, strings.Repeat("z", 256)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, present, err := parseKey([]string{v}, 1)
		if !present {
			t.Fatal("one field must be present")
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("error %v does not wrap ErrInvalidKey", err)
			}
			return
		}
		if len(key) < 1 || len(key) > MaxKeyLength {
			t.Fatalf("accepted key of length %d", len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("accepted key with byte 0x%02x", key[i])
			}
		}
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		again, _, err := parseKey([]string{quoted}, 1)
		if err != nil || again != key {
			t.Fatalf("sf-string form %s of accepted key %q parses as %q, %v", quoted, key, again, err)
		}
	})
}
