package idemclient_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemclient"
)

// TestAnUnsendableURLGetsOneAttempt: a scheme net/http does not speak, or no host, is
// an error of the request; it comes back at once, not after MaxElapsed of retries.
func TestAnUnsendableURLGetsOneAttempt(t *testing.T) {
	t.Parallel()
	for _, url := range []string{"ftp://127.0.0.1/orders", "htp://127.0.0.1/orders", "http:///orders"} {
		clk := newClock()
		_, _, res, err := do(t, t.Context(), newTransport(t, clk, &idemclient.Transport{}), http.MethodPost, url, body)
		require.Error(t, err, url)
		assert.Contains(t, err.Error(), "idemclient: attempt 1:", url)
		assert.Equal(t, 1, res.Attempts, url)
		assert.Empty(t, clk.Waits(), "%s: no wait", url)
	}
}

// TestRejectedCertificatesGetOneAttempt: a server certificate the client does not
// accept, for any reason, is the same certificate on the next attempt.
func TestRejectedCertificatesGetOneAttempt(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusCreated)
	})
	trusted := httptest.NewTLSServer(handler)
	t.Cleanup(trusted.Close)
	expired := httptest.NewUnstartedServer(handler)
	expired.TLS = &tls.Config{Certificates: []tls.Certificate{expiredCertificate(t)}}
	expired.StartTLS()
	t.Cleanup(expired.Close)

	trusting := func(srv *httptest.Server, serverName string) *http.Transport {
		roots := x509.NewCertPool()
		roots.AddCert(srv.Certificate())
		return &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: serverName}}
	}
	for _, tc := range []struct {
		name string
		url  string
		base *http.Transport
		want error
	}{
		{"unknown authority", trusted.URL, &http.Transport{}, x509.UnknownAuthorityError{}},
		{"another host's name", trusted.URL, trusting(trusted, "api.example.org"), x509.HostnameError{}},
		{"expired", expired.URL, trusting(expired, "127.0.0.1"), x509.CertificateInvalidError{}},
	} {
		t.Cleanup(tc.base.CloseIdleConnections)
		clk := newClock()
		_, _, res, err := do(t, t.Context(), newTransport(t, clk, &idemclient.Transport{Base: tc.base}), http.MethodPost, tc.url, body)
		require.Error(t, err, tc.name)
		assert.ErrorAs(t, err, &tc.want, tc.name)
		assert.Equal(t, 1, res.Attempts, tc.name)
		assert.Empty(t, clk.Waits(), "%s: no wait", tc.name)
	}
	var invalid x509.CertificateInvalidError
	_, _, _, err := do(t, t.Context(), newTransport(t, newClock(), &idemclient.Transport{Base: trusting(expired, "127.0.0.1")}), http.MethodPost, expired.URL, body)
	require.ErrorAs(t, err, &invalid)
	assert.Equal(t, x509.Expired, invalid.Reason)
	assert.Zero(t, calls.Load(), "no request reached a handler")
}

// expiredCertificate is a self-signed certificate for 127.0.0.1 that expired an hour ago.
func expiredCertificate(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "expired"},
		NotBefore:             time.Now().Add(-2 * time.Hour),
		NotAfter:              time.Now().Add(-time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestABodyWithoutGetBodyIsNotRetriedAfterAnError: a refused connection is retried, but
// not with a body that cannot be sent again: its error comes back at once.
func TestABodyWithoutGetBodyIsNotRetriedAfterAnError(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	clk := newClock()
	var res idemclient.Result
	req, err := http.NewRequestWithContext(idemclient.WithResult(t.Context(), &res), http.MethodPost, "http://"+addr,
		io.NopCloser(strings.NewReader(body)))
	require.NoError(t, err)
	_, err = (&http.Client{Transport: newTransport(t, clk, &idemclient.Transport{})}).Do(req)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	assert.Equal(t, 1, res.Attempts)
	assert.Empty(t, clk.Waits())
}

// TestATimedOutAttemptIsRetried: an attempt whose answer does not come in time (here
// Base's ResponseHeaderTimeout) is a network failure: retried, with the same key.
func TestATimedOutAttemptIsRetried(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // read to the end: then a hang-up ends r.Context()
		if calls.Add(1) == 1 {
			<-r.Context().Done() // never answers; the client gives up and hangs up
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	base := &http.Transport{ResponseHeaderTimeout: 50 * time.Millisecond}
	var infos []idemclient.RetryInfo
	tr := newTransport(t, newClock(), &idemclient.Transport{Base: base, OnRetry: func(i idemclient.RetryInfo) { infos = append(infos, i) }})
	resp, _, res, err := do(t, t.Context(), tr, http.MethodPost, srv.URL, body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.Equal(t, 2, res.Attempts)
	require.Len(t, infos, 1)
	var timeout interface{ Timeout() bool }
	require.True(t, errors.As(infos[0].Err, &timeout) && timeout.Timeout(), "a timeout: %v", infos[0].Err)
}
