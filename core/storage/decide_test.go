package storage_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/idemkit/idem/core/storage"
)

// TestDecide walks every combination of what Decide reads — state, fingerprint, lease,
// age — and holds each to the rule Store.Claim states for it.
func TestDecide(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const retention = time.Hour
	mine, other := []byte("fingerprint of this request......"), []byte("fingerprint of another request...")
	c := storage.Claim{Fingerprint: mine, Retention: retention}

	assert.Equal(t, storage.VerdictAbsent, storage.Decide(nil, c, now), "no record")
	assert.Equal(t, storage.VerdictAbsent, storage.Decide(nil, c, time.Time{}), "no record, no clock")

	leases := map[string]time.Time{
		"live":      now.Add(time.Second),
		"ends now":  now, // a lease ending at now is over
		"ended":     now.Add(-time.Second),
		"none":      {}, // released after a phase committed, or a completed key
		"long gone": now.Add(-2 * retention),
	}
	ages := map[string]time.Time{
		"young":           now.Add(-time.Minute),
		"at retention":    now.Add(-retention), // not past it yet
		"past retention":  now.Add(-retention - time.Microsecond),
		"created in skew": now.Add(time.Second), // a clock behind the record's
	}
	for _, state := range []storage.State{storage.StateStarted, storage.StateCompleted} {
		for _, fp := range [][]byte{mine, other} {
			for leaseName, lease := range leases {
				for ageName, created := range ages {
					rec := &storage.Record{State: state, Fingerprint: fp, LockedUntil: lease, CreatedAt: created}
					live := state == storage.StateStarted && lease.After(now)
					var want storage.Verdict
					switch {
					case !live && ageName == "past retention":
						want = storage.VerdictAbsent
					case string(fp) != string(mine):
						want = storage.VerdictMismatch
					case state == storage.StateCompleted:
						want = storage.VerdictReplay
					case live:
						want = storage.VerdictInProgress
					default:
						want = storage.VerdictTakeOver
					}
					assert.Equal(t, want, storage.Decide(rec, c, now), "%s, same request %v, lease %s, %s", state,
						string(fp) == string(mine), leaseName, ageName)

					// Without a clock: the record a store reported. Never absent, never taken over.
					untimed := storage.Decide(rec, c, time.Time{})
					switch {
					case string(fp) != string(mine):
						assert.Equal(t, storage.VerdictMismatch, untimed)
					case state == storage.StateCompleted:
						assert.Equal(t, storage.VerdictReplay, untimed)
					default:
						assert.Equal(t, storage.VerdictInProgress, untimed)
					}
				}
			}
		}
	}

	// A retention of zero or less keeps keys for ever.
	old := &storage.Record{State: storage.StateCompleted, Fingerprint: mine, CreatedAt: now.Add(-100 * 24 * time.Hour)}
	assert.Equal(t, storage.VerdictReplay, storage.Decide(old, storage.Claim{Fingerprint: mine}, now))
	// A nil and an empty fingerprint are the same (a store may read either back).
	assert.Equal(t, storage.VerdictReplay, storage.Decide(&storage.Record{State: storage.StateCompleted, Fingerprint: []byte{}, CreatedAt: now},
		storage.Claim{Retention: retention}, now))
}

func TestVerdictString(t *testing.T) {
	t.Parallel()
	for v, want := range map[storage.Verdict]string{
		storage.VerdictAbsent: "absent", storage.VerdictReplay: "replay", storage.VerdictMismatch: "mismatch",
		storage.VerdictInProgress: "in progress", storage.VerdictTakeOver: "take over", storage.Verdict(0): "Verdict(0)",
	} {
		assert.Equal(t, want, v.String())
	}
}

// TestVerdictClaims: only absent and take over hand the claimer the key.
func TestVerdictClaims(t *testing.T) {
	t.Parallel()
	for v, claims := range map[storage.Verdict]bool{
		storage.VerdictAbsent: true, storage.VerdictTakeOver: true,
		storage.VerdictReplay: false, storage.VerdictMismatch: false, storage.VerdictInProgress: false,
	} {
		assert.Equal(t, claims, v.Claims(), "%v", v)
	}
}
