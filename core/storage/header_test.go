package storage_test

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/idemkit/idem/core/storage"
)

func TestHeaderRoundTrip(t *testing.T) {
	t.Parallel()
	h := http.Header{"Location": {"/v1/orders/1"}, "Link": {"<a>; rel=next", "<b>; rel=prev"}, "Content-Type": {"application/json"}}
	got, err := storage.DecodeHeader(storage.EncodeHeader(h))
	if err != nil || !reflect.DeepEqual(got, h) {
		t.Fatalf("round trip = %v, %v; want %v", got, err, h)
	}
	empty, err := storage.DecodeHeader(storage.EncodeHeader(nil))
	if err != nil || len(empty) != 0 {
		t.Fatalf("empty round trip = %v, %v", empty, err)
	}
	if _, err := storage.DecodeHeader([]byte("no separator\n")); err == nil {
		t.Fatal("DecodeHeader accepted a line without \": \"")
	}
}

// FuzzHeaderRoundTrip: whatever EncodeHeader writes, DecodeHeader reads back, minus the
// values that cannot travel in HTTP (CR, LF).
func FuzzHeaderRoundTrip(f *testing.F) {
	f.Add("Location", "/v1/orders/1", "ETag", `"x"`)
	f.Add("X-A", "a: b", "X-B", "")
	f.Add("Bad", "a\r\nSet-Cookie: x", "K", "v")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		h := http.Header{}
		for _, kv := range [][2]string{{k1, v1}, {k2, v2}} {
			if kv[0] == "" {
				continue
			}
			h[kv[0]] = append(h[kv[0]], kv[1])
		}
		got, err := storage.DecodeHeader(storage.EncodeHeader(h))
		if err != nil {
			t.Fatalf("decode(encode(%q)): %v", h, err)
		}
		want := http.Header{}
		for k, vs := range h {
			for _, v := range vs {
				if strings.ContainsAny(k, "\r\n:") || strings.ContainsAny(v, "\r\n") {
					continue
				}
				want[k] = append(want[k], v)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip of %q = %q, want %q", h, got, want)
		}
	})
}
