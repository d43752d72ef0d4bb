package storetest

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
)

// testLimits: a store holds a scope and a key at the documented maximum (a scope of
// core.MaxScopeLength bytes of multi-byte UTF-8, a key of core.MaxKeyLength printable
// ASCII characters, quotes, a backslash, spaces and commas included) through a claim, a
// phase and a completion, and gives both back byte for byte. Scopes or keys that differ
// only in their last byte, in case, or by a trailing space name other operations: a
// column that truncated, padded or folded case would merge them.
func testLimits(s *suite) {
	scope := "x" + strings.Repeat("€", 84) + "é" // 1 + 252 + 2 bytes: 1-, 2- and 3-byte runes
	emoji := strings.Repeat("🎉", 63) + "abc"     // 4-byte runes
	key := longKey(s)
	require.Len(s.t, scope, core.MaxScopeLength)
	require.Len(s.t, emoji, core.MaxScopeLength)
	require.Len(s.t, key, core.MaxKeyLength)

	pairs := []struct{ scope, key string }{
		{scope, key},
		{emoji, key},
		{scope[:len(scope)-2] + "è", key},     // the scope's last byte (é is C3 A9, è C3 A8)
		{"X" + scope[1:], key},                // the scope's case
		{scope, key[:len(key)-1] + "y"},       // the key's last byte
		{scope, "k" + key[1:]},                // the key's case
		{scope, key[:len(key)-1]},             // a key one shorter…
		{scope, key[:len(key)-1] + " "},       // …and the same with a trailing space
		{emoji[:len(emoji)-1] + " ", key},     // a scope ending in a space
		{strings.TrimSuffix(emoji, "c"), key}, // …and one without it
	}
	claims := make([]storage.Claim, len(pairs))
	for i, p := range pairs {
		c := s.claim("k", "a")
		c.Scope, c.Key = p.scope, p.key
		claims[i] = c
		l := s.mustFresh(c)
		require.NoError(s.t, l.Phase(s.ctx, "charged", noop), "Phase of claim %d", i)
		s.complete(l, created(strconv.Itoa(i)))
	}
	for i, c := range claims {
		rec := s.mustReplay(c, c, created(strconv.Itoa(i))) // checkRecord compares Scope and Key
		require.Equal(s.t, []byte(c.Scope), []byte(rec.Scope), "scope of claim %d, byte for byte", i)
		require.Equal(s.t, []byte(c.Key), []byte(rec.Key), "key of claim %d, byte for byte", i)
	}
}

// longKey is a key of core.MaxKeyLength characters, unique to the subtest, that starts
// with an upper-case letter and holds the printable ASCII a store might mishandle:
// quotes, a backslash, %, a comma, braces, spaces.
func longKey(s *suite) string {
	sum := sha256.Sum256([]byte(s.t.Name()))
	k := "K-" + hex.EncodeToString(sum[:]) + ` "quoted", back\slash, 100% 'single' {braces} [brackets] `
	for len(k) < core.MaxKeyLength {
		k += "~!"
	}
	return k[:core.MaxKeyLength]
}
