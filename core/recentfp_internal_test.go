package core

import (
	"fmt"
	"hash/maphash"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRecentFingerprints sends, with one key, a request and then a variant of it that
// differs in one input of the fingerprint (or in its scope or key): the variant's answer
// must be the fingerprint appendFingerprint computes, and the slot must then hold the
// variant, so a remembered fingerprint never stands for a request other than the one it
// was computed for (for another scope or key it would be right, but would tell one
// client, by its speed, what another sent).
func TestRecentFingerprints(t *testing.T) {
	type req struct{ scope, key, method, target, body string }
	base := req{"tenant-a", "k-1", "POST", "/v1/orders?a=1&b=2", `{"b":1,"a":[1,2]}`}
	variants := []req{
		base, // the same bytes again: a hit
		{"tenant-b", base.key, base.method, base.target, base.body},
		{base.scope, "k-2", base.method, base.target, base.body},
		{base.scope, base.key, "PUT", base.target, base.body},
		{base.scope, base.key, base.method, "/v1/order?a=1&b=2", base.body},
		{base.scope, base.key, base.method, "/v1/orders?a=1&b=3", base.body},
		{base.scope, base.key, base.method, "/v1/orders?b=2&a=1", base.body},   // same fingerprint, other bytes
		{base.scope, base.key, base.method, "/v1/%6Frders?a=1&b=2", base.body}, // same path decoded, other RawPath
		{base.scope, base.key, base.method, base.target, `{"a":[1,2],"b":1}`},  // same canonical body
		{base.scope, base.key, base.method, base.target, `{"a":[2,1],"b":1}`},
		{base.scope, base.key, base.method, base.target, ``},
		{base.scope, base.key, base.method, base.target, string(make([]byte, recentBodyMax+1))}, // not kept
	}
	m := &recentFingerprints{seed: maphash.MakeSeed()}
	send := func(v req) (got, want []byte, r *http.Request) {
		r = httptest.NewRequest(v.method, v.target, nil)
		return m.fingerprint([]byte("prefix"), v.scope, v.key, r, []byte(v.body)), appendFingerprint([]byte("prefix"), r, []byte(v.body), nil), r
	}
	for i, v := range variants {
		send(base)
		got, want, r := send(v)
		require.Equal(t, want, got, "request %d: %+v", i, v)
		if len(v.body) > recentBodyMax {
			continue
		}
		s := &m.slots[maphash.String(m.seed, v.key)%recentSlots]
		assert.Equal(t, []string{v.scope, v.key, v.method, r.URL.Path, r.URL.RawPath, r.URL.RawQuery, v.body},
			[]string{s.scope, s.key, s.method, s.path, s.rawPath, s.query, string(s.body)}, "request %d: the slot holds another request", i)
	}
	// The same path, with and without an escaped slash: two fingerprints.
	send(req{base.scope, base.key, base.method, "/v1/a/b", base.body})
	got, want, _ := send(req{base.scope, base.key, base.method, "/v1/a%2Fb", base.body})
	require.Equal(t, want, got)

	// The slot keeps its own copy: a caller reusing its body buffer changes nothing.
	r := httptest.NewRequest("POST", "/v1/orders", nil)
	body := []byte(`{"n":1}`)
	first := m.fingerprint(nil, "s", "k-copy", r, body)
	copy(body, `{"n":2}`)
	assert.Equal(t, appendFingerprint(nil, r, body, nil), m.fingerprint(nil, "s", "k-copy", r, body))
	assert.NotEqual(t, first, m.fingerprint(nil, "s", "k-copy", r, body))
}

// TestRecentFingerprintsConcurrent has goroutines share slots (more keys than slots),
// each checking every answer against a computed fingerprint; under -race it also checks
// the slots' locking.
func TestRecentFingerprintsConcurrent(t *testing.T) {
	m := &recentFingerprints{seed: maphash.MakeSeed()}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				key := fmt.Sprintf("k-%d", i%(2*recentSlots))
				body := []byte(fmt.Sprintf(`{"g":%d,"i":%d}`, g%2, i%3))
				r := httptest.NewRequest("POST", "/v1/orders", nil)
				if got, want := m.fingerprint(nil, "s", key, r, body), appendFingerprint(nil, r, body, nil); !assert.Equal(t, want, got) {
					return
				}
			}
		})
	}
	wg.Wait()
}
