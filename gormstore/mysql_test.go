package gormstore_test

import (
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/internal/testdb"
)

// TestMySQLKeysAreBytes: on MySQL/MariaDB keys compare byte for byte (VARBINARY): case
// and trailing spaces make different keys, as on the other dialects, where a utf8mb4
// VARCHAR key would merge them; a scope or key over 255 bytes is refused, never truncated.
func TestMySQLKeysAreBytes(t *testing.T) {
	t.Parallel()
	s := migrated(t, openMySQL(t))
	for _, key := range []string{"Key", "key", "key ", "kéy", "kéy "} {
		mustLock(t, s, claimFor(key, "a", storage.ModePhased))
	}
	long := claimFor(strings.Repeat("k", 256), "a", storage.ModePhased)
	if _, err := s.Claim(t.Context(), long); err == nil || !strings.Contains(err.Error(), "255 bytes") {
		t.Fatalf("a 256-byte key: %v, want a refusal", err)
	}
	long = claimFor("k", "a", storage.ModePhased)
	long.Scope = strings.Repeat("s", 256)
	if _, err := s.Claim(t.Context(), long); err == nil || !strings.Contains(err.Error(), "255 bytes") {
		t.Fatalf("a 256-byte scope: %v, want a refusal", err)
	}
}

// TestMySQLDSNTimes: the store reads and writes its DATETIME(6) columns as UTC whatever
// the DSN says about time parsing and location.
func TestMySQLDSNTimes(t *testing.T) {
	t.Parallel()
	dsn, _ := testdb.MySQLDatabase(t)
	for _, params := range []map[string]string{
		{"parseTime": "false"},
		{"parseTime": "true", "loc": "America/New_York"},
		{"parseTime": "true", "loc": "Asia/Tokyo", "time_zone": "'+05:00'"},
	} {
		cfg, err := gomysql.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ParseTime = params["parseTime"] == "true"
		if loc, ok := params["loc"]; ok {
			if cfg.Loc, err = time.LoadLocation(loc); err != nil {
				t.Fatal(err)
			}
		}
		if tz, ok := params["time_zone"]; ok {
			cfg.Params = map[string]string{"time_zone": tz}
		}
		s := migrated(t, finish(t, mysql.New(mysql.Config{DSNConfig: cfg})))
		c := claimFor("k", "a", storage.ModePhased)
		c.Lease = time.Hour
		mustLock(t, s, c)
		rec := mustRecord(t, s, c)
		if d := time.Since(rec.CreatedAt); d < -time.Minute || d > time.Minute {
			t.Errorf("%v: CreatedAt %v is %v away from now", params, rec.CreatedAt, d)
		}
		if d := time.Until(rec.LockedUntil) - time.Hour; d < -time.Minute || d > time.Minute {
			t.Errorf("%v: LockedUntil %v is not an hour from now", params, rec.LockedUntil)
		}
		if n, err := s.DeleteExpired(t.Context(), time.Now().Add(time.Hour), 10); err != nil || n != 0 {
			t.Errorf("%v: DeleteExpired deleted %d (%v), want 0: the lease is live", params, n, err)
		}
	}
}

// TestMySQLClientFoundRows: New refuses a DSN with clientFoundRows=true, under which the
// claim could not tell a new key from an existing one, however the Dialector was made;
// the default DSN passes. New reads the DSN by reflection, so this holds it to the real
// gorm.io/driver/mysql.
func TestMySQLClientFoundRows(t *testing.T) {
	t.Parallel()
	dsn, _ := testdb.MySQLDatabase(t)
	cfg, err := gomysql.ParseDSN(dsn)
	require.NoError(t, err)
	cfg.ClientFoundRows = true
	const refusal = "gormstore: the MySQL DSN sets clientFoundRows=true; the store needs the default (false)"
	for name, d := range map[string]gorm.Dialector{
		"mysql.New with a DSNConfig": mysql.New(mysql.Config{DSNConfig: cfg}),
		"mysql.Open with a DSN":      mysql.Open(cfg.FormatDSN()),
	} {
		db := finish(t, d)
		assert.PanicsWithValue(t, refusal, func() { gormstore.New(db) }, name)
	}
	assert.NotPanics(t, func() { gormstore.New(finish(t, mysql.Open(dsn))) }, "the default DSN")
}
