package keyrow_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/internal/keyrow"
)

// TestLockHashVectors pins the advisory-lock hash: these values were computed by the code
// pgxstore and gormstore each carried before it moved here. A change to any of them means
// that instances of two versions no longer lock the same number for the same key.
func TestLockHashVectors(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("abcdefghijklmnopqrstuvwxyz", 12)[:300]
	for _, v := range []struct {
		table, scope, key string
		want              int64
	}{
		{`"idempotency_keys"`, "alice", "k1", 2482266343148212868},
		{`"idempotency_keys"`, "", "", 1786769533727414271},
		{`"billing"."idem_keys"`, "tenant-42", "3f2c9a1e-0b7d-4c55-9a0e-6d1f2b3c4d5e", 6952158868718321469},
		{`"idempotency_keys"`, "a", "bc", -1823576178418443522},
		{`"idempotency_keys"`, "ab", "c", -5547961872203125736},
		{`"t"`, long, "k", -5576150649806483635},
		{`"idempotency_keys"`, "ünïcode", "key with spaces", 9162507362066594973},
	} {
		assert.Equal(t, v.want, keyrow.NewLockSeed(v.table).Hash(v.scope, v.key), "%q %q %q", v.table, v.scope, v.key)
	}
}

func TestTokenIsAVersion4UUID(t *testing.T) {
	t.Parallel()
	a, b := keyrow.NewToken(), keyrow.NewToken()
	assert.NotEqual(t, a, b)
	assert.Regexp(t, regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`), a.UUID())
	tok := keyrow.Token{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef}
	assert.Equal(t, "01234567-89ab-cdef-0123-456789abcdef", tok.UUID())
}

// TestTimeScanner: wall-clock columns (MySQL DATETIME, SQLite text) read as UTC whatever
// location the driver attached or whether it parsed them at all; PostgreSQL instants keep
// their instant.
func TestTimeScanner(t *testing.T) {
	t.Parallel()
	want := time.Date(2026, 3, 1, 12, 30, 45, 123456000, time.UTC)
	berlin := time.FixedZone("CET", 3600)
	for _, c := range []struct {
		src  any
		wall bool
		want time.Time
	}{
		{nil, true, time.Time{}},
		{"2026-03-01 12:30:45.123456", true, want},
		{[]byte("2026-03-01 12:30:45.123456"), true, want},
		{"2026-03-01T12:30:45.123456Z", false, want},
		{"2026-03-01 12:30:45", true, want.Truncate(time.Second)},
		{"2026-03-01 12:30:45.123456+00:00", true, want},
		// A wall-clock column read by a driver that put it in another location: the wall
		// clock is UTC.
		{time.Date(2026, 3, 1, 12, 30, 45, 123456000, berlin), true, want},
		// An instant stays that instant.
		{time.Date(2026, 3, 1, 13, 30, 45, 123456000, berlin), false, want},
	} {
		got := time.Now()
		require.NoError(t, keyrow.TimeScanner{Dest: &got, Wall: c.wall}.Scan(c.src), "%v", c.src)
		assert.True(t, c.want.Equal(got), "%v: got %v, want %v", c.src, got, c.want)
		assert.Equal(t, time.UTC, got.Location())
	}
	var got time.Time
	assert.Error(t, keyrow.TimeScanner{Dest: &got}.Scan(42))
	assert.Error(t, keyrow.TimeScanner{Dest: &got}.Scan("yesterday"))
	assert.Equal(t, "2026-03-01 12:30:45.123456", want.Format(keyrow.WallLayout))
}
