package demo

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAuthenticateTakesOnlyIssuableAccounts: an account is 1 to 64 characters of
// printable ASCII, in one header field; anything else is a 401 problem with
// WWW-Authenticate, never passed on to the stores as a scope.
func TestAuthenticateTakesOnlyIssuableAccounts(t *testing.T) {
	t.Parallel()
	for _, acct := range []string{"alice", "acct-0123456789abcdef", strings.Repeat("a", 64), "a b", "~!@#$%^&*()_+{}|:<>?"} {
		r := httptest.NewRequest(http.MethodGet, "/v1/orders", nil)
		r.Header.Set(AccountHeader, acct)
		got, reject := Authenticate(r)
		assert.Nil(t, reject, "%q", acct)
		assert.Equal(t, acct, got)
	}
	for name, values := range map[string][]string{
		"missing":        nil,
		"empty":          {""},
		"65 bytes":       {strings.Repeat("a", 65)},
		"256 bytes":      {strings.Repeat("a", 256)},
		"0xFF":           {"ali\xffce"},
		"UTF-8":          {"clé"},
		"NUL":            {"a\x00b"},
		"tab":            {"a\tb"},
		"DEL":            {"a\x7fb"},
		"two fields":     {"alice", "bob"},
		"same two times": {"alice", "alice"},
	} {
		r := httptest.NewRequest(http.MethodPost, "/v1/orders", nil)
		r.Header[AccountHeader] = values
		got, reject := Authenticate(r)
		require.NotNil(t, reject, name)
		assert.Empty(t, got, name)
		assert.Equal(t, http.StatusUnauthorized, reject.Status, name)
		assert.Equal(t, AccountHeader, reject.Header.Get("WWW-Authenticate"), name)
		assert.Equal(t, "application/problem+json", reject.Header.Get("Content-Type"), name)
		var p struct{ Type, Detail string }
		require.NoError(t, json.Unmarshal(reject.Body, &p), name)
		assert.Equal(t, ProblemUnauthenticated, p.Type, name)
		assert.NotEmpty(t, p.Detail, name)
		assert.Less(t, len(reject.Body), 400, "%s: the answer does not echo the header", name)
	}
}

// TestAccessLineIsClipped: the access line carries at most 64 bytes of the method and of
// the path, as idem's own lines do, however long the client made them.
func TestAccessLineIsClipped(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	obs, err := newObserver(slog.New(slog.NewJSONHandler(&out, nil)))
	require.NoError(t, err)
	h := obs.handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) }))
	r := httptest.NewRequest(http.MethodGet, "/"+strings.Repeat("p", 1<<20), nil)
	r.Method = strings.Repeat("M", 1<<10)
	h.ServeHTTP(httptest.NewRecorder(), r)

	var line struct{ Method, Path string }
	require.NoError(t, json.Unmarshal(out.Bytes(), &line))
	assert.Equal(t, strings.Repeat("M", 64)+"…", line.Method)
	assert.Equal(t, "/"+strings.Repeat("p", 63)+"…", line.Path)
	assert.Less(t, out.Len(), 400, "one short line")
}

func TestClip(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "short", clip("short"))
	assert.Equal(t, strings.Repeat("a", 64), clip(strings.Repeat("a", 64)))
	// a 2-byte character across byte 64 is dropped whole, never cut in half
	assert.Equal(t, strings.Repeat("a", 63)+"…", clip(strings.Repeat("a", 63)+"é"+"b"))
}
