package storetest

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core/storage"
)

// requireResponse compares a stored response with the one completed: status, headers
// (an empty header equals a nil one) and the body byte for byte.
func requireResponse(t *testing.T, want, got *storage.Response) {
	t.Helper()
	require.NotNil(t, got, "a completed record carries its response")
	require.Equal(t, want.Status, got.Status, "status of the stored response")
	requireHeader(t, want.Header, got.Header)
	requireBody(t, want.Body, got.Body)
}

// requireHeader compares headers name by name; an empty header equals a nil one (a store
// may keep either).
func requireHeader(t *testing.T, want, got map[string][]string) {
	t.Helper()
	if len(want) == 0 {
		require.Empty(t, got, "header: none was completed")
		return
	}
	require.Equal(t, want, got, "header")
}

// requireBody compares bodies byte for byte (an empty body equals a nil one), showing
// at most 64 bytes from where they differ, since bodies may be large.
func requireBody(t *testing.T, want, got []byte) {
	t.Helper()
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	if i == len(want) && i == len(got) {
		return
	}
	require.Equal(t, len(want), len(got), "body length (they differ from byte %d: got %q, want %q)", i, trim(got[i:]), trim(want[i:]))
	require.Equal(t, trim(want[i:]), trim(got[i:]), "body from byte %d of %d", i, len(want))
}

func trim(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// requireOtherFingerprint checks that a record kept the fingerprint of the request that
// created it, not that of the claim that found it.
func requireOtherFingerprint(t *testing.T, claimed []byte, rec *storage.Record) {
	t.Helper()
	require.False(t, bytes.Equal(claimed, rec.Fingerprint),
		"the record has fingerprint %x, the claim's: it must keep the fingerprint of its own request", rec.Fingerprint)
}
