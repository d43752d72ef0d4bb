// Package keyrow holds what the stores share below the seam and must compute alike: the
// advisory-lock hash of a key (pgxstore and gormstore lock the same number for the same
// table, so both can serve one table), the lease token every claim mints, and the
// reading of time columns written as UTC wall-clock text (gormstore on MySQL/MariaDB and
// SQLite). The claim's decision itself is storage.Decide, in the seam.
package keyrow

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
)

// FNV-1a, 64 bits.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// fnvString folds len(v) and v into the FNV-1a state h: the length first (its bytes,
// least significant first, as many as it has), so that no two fields run together.
func fnvString(h uint64, v string) uint64 {
	for n := uint64(len(v)); ; n >>= 8 {
		h = (h ^ n&0xff) * fnvPrime
		if n < 0x100 {
			break
		}
	}
	for i := 0; i < len(v); i++ {
		h = (h ^ uint64(v[i])) * fnvPrime
	}
	return h
}

// LockSeed is the state of the lock hash after a table's name: computed once per store,
// it makes each key's hash a pass over the scope and the key only.
type LockSeed uint64

// NewLockSeed returns the seed of table, its name as quoted in SQL
// (`"idempotency_keys"`, `"billing"."idem_keys"`): every store on one table must pass the
// same string.
func NewLockSeed(table string) LockSeed { return LockSeed(fnvString(fnvOffset, table)) }

// Hash is the advisory lock key of (scope, key) in the seed's table: 64 bits of FNV-1a
// over the table name, the scope and the key, each preceded by its length, computed here
// so that every instance of the application (any version, any platform, either store)
// locks the same number. It must never change: instances running two versions would stop
// holding each other off. Two different keys can share a hash: they then wait for each
// other needlessly (up to the lock wait, then 409), which at 64 bits is about as likely as
// n²/2⁶⁵ for n keys in flight at once; the primary key, not the lock, decides what is
// recorded.
func (s LockSeed) Hash(scope, key string) int64 {
	return int64(fnvString(fnvString(uint64(s), scope), key))
}

// Token is a lease (fencing) token: 16 random bytes, laid out as a version 4 UUID so that
// PostgreSQL's uuid column takes it. pgx sends a Token as a uuid as it is.
type Token [16]byte

// NewToken mints a fresh token. 122 random bits: a token of a key deleted and claimed
// again never matches the new claim's.
func NewToken() Token {
	var t Token
	_, _ = rand.Read(t[:]) // never fails (crypto/rand)
	t[6] = t[6]&0x0f | 0x40
	t[8] = t[8]&0x3f | 0x80
	return t
}

// UUID returns the token in the UUID text form, xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
func (t Token) UUID() string {
	var b [36]byte
	hex.Encode(b[0:8], t[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], t[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], t[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], t[8:10])
	b[23] = '-'
	hex.Encode(b[24:], t[10:])
	return string(b[:])
}

// WallLayout is how a time travels to and from a MySQL DATETIME(6) or SQLite column: UTC,
// fixed width, so that SQLite's text comparisons order times correctly and MySQL needs no
// time zone.
const WallLayout = "2006-01-02 15:04:05.000000"

// TimeScanner reads a timestamp column into *Dest as UTC (a NULL is the zero time).
// MySQL DATETIME and SQLite columns hold wall-clock UTC times (Wall): the driver may hand
// them back as text, or as a time.Time in whatever location its DSN names, so the wall
// clock is what counts. PostgreSQL's timestamptz is an instant (Wall false).
type TimeScanner struct {
	Dest *time.Time
	Wall bool
}

// Scan implements sql.Scanner.
func (ts TimeScanner) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*ts.Dest = time.Time{}
	case time.Time:
		if ts.Wall {
			v = time.Date(v.Year(), v.Month(), v.Day(), v.Hour(), v.Minute(), v.Second(), v.Nanosecond(), time.UTC)
		}
		*ts.Dest = v.UTC()
	case []byte:
		return ts.parse(string(v))
	case string:
		return ts.parse(v)
	default:
		return fmt.Errorf("cannot read %T as a time", src)
	}
	return nil
}

// parse reads a time written as text: WallLayout (with or without its fraction, with or
// without a zone) or RFC 3339.
func (ts TimeScanner) parse(s string) error {
	for _, layout := range []string{"2006-01-02 15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00", time.RFC3339Nano} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			*ts.Dest = t.UTC()
			return nil
		}
	}
	return fmt.Errorf("cannot read %q as a time", s)
}
