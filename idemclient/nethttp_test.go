package idemclient_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemclient"
)

// resetFirstPost is a server that resets the connection of the first POST to each path,
// after reading it whole and without answering, and answers 201 to the next ones; it
// records the Idempotency-Key of every POST by path.
type resetFirstPost struct {
	srv  *httptest.Server
	mu   sync.Mutex
	keys map[string][]string
}

func newResetFirstPost(t *testing.T) *resetFirstPost {
	s := &resetFirstPost{keys: map[string][]string{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		s.mu.Lock()
		s.keys[r.URL.Path] = append(s.keys[r.URL.Path], r.Header.Get("Idempotency-Key"))
		first := len(s.keys[r.URL.Path]) == 1
		s.mu.Unlock()
		if first {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			_ = conn.(*net.TCPConn).SetLinger(0)
			_ = conn.Close()
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *resetFirstPost) Keys(path string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys[path]...)
}

// warmPool makes one GET through base, so that its single connection is idle in the pool
// and the next request reuses it (MaxConnsPerHost 1 makes that request wait for it).
func warmPool(t *testing.T, base *http.Transport, url string) {
	t.Helper()
	resp, err := (&http.Client{Transport: base}).Get(url)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
}

// TestNetHTTPResendCarriesTheSameKey: when a reused connection fails before any byte of
// the answer, net/http's Transport sends a request carrying an Idempotency-Key again by
// itself (golang/go#19943). Transport sets the key before net/http sees the request, so
// that resend carries the same key: the server sees one operation, sent twice, inside
// one attempt of ours.
func TestNetHTTPResendCarriesTheSameKey(t *testing.T) {
	t.Parallel()
	s := newResetFirstPost(t)
	base := &http.Transport{MaxConnsPerHost: 1}
	t.Cleanup(base.CloseIdleConnections)
	warmPool(t, base, s.srv.URL)

	var conns []httptrace.GotConnInfo
	var res idemclient.Result
	ctx := httptrace.WithClientTrace(idemclient.WithResult(t.Context(), &res),
		&httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { conns = append(conns, i) }})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.srv.URL+"/keyed", strings.NewReader(body))
	require.NoError(t, err)
	tr := newTransport(t, newClock(), &idemclient.Transport{Base: base})
	resp, err := (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())

	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Len(t, conns, 2, "net/http got a connection twice: the reused one, then a new one")
	assert.True(t, conns[0].Reused, "the first send went on the pooled connection")
	assert.Equal(t, []string{res.Key, res.Key}, s.Keys("/keyed"), "net/http's resend carried the same key")
	assert.Equal(t, idemclient.Result{Key: res.Key, Attempts: 1}, res, "the resend happened inside one attempt")
}

// TestNetHTTPDoesNotResendAnUnkeyedPost is the contrast: the same failure, without a key,
// is an error (net/http cannot know that a POST is safe to send again).
func TestNetHTTPDoesNotResendAnUnkeyedPost(t *testing.T) {
	t.Parallel()
	s := newResetFirstPost(t)
	base := &http.Transport{MaxConnsPerHost: 1}
	t.Cleanup(base.CloseIdleConnections)
	warmPool(t, base, s.srv.URL)

	_, err := (&http.Client{Transport: base}).Post(s.srv.URL+"/plain", "application/json", strings.NewReader(body))
	require.Error(t, err)
	assert.Equal(t, []string{""}, s.Keys("/plain"), "one send, no key")
}
