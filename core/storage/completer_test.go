package storage

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRequestRoundTrips(t *testing.T) {
	t.Parallel()
	for _, r := range []*Request{
		{Method: "POST", Host: "api.example.com", URI: "/a?b=c", Header: http.Header{"Content-Type": {"application/json"}, "X-A": {"1", "2"}}, Body: []byte{0, 0xff, '\n'}},
		{Method: "PATCH", URI: "/"},
	} {
		got, err := DecodeRequest(EncodeRequest(r))
		require.NoError(t, err)
		if len(r.Body) == 0 {
			r.Body = []byte{}
		}
		require.Equal(t, r, got)
	}
	got, err := DecodeRequest(EncodeRequest(nil))
	require.NoError(t, err)
	require.Nil(t, got)
	b := EncodeRequest(&Request{Method: "POST", URI: "/x", Body: []byte("body")})
	for i := 1; i < len(b); i++ {
		_, err := DecodeRequest(b[:i])
		require.Error(t, err, "truncated at %d", i)
	}
	_, err = DecodeRequest(append(b, 0))
	require.Error(t, err, "trailing")
}
