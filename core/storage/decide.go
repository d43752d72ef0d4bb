package storage

import (
	"bytes"
	"fmt"
	"time"
)

// Verdict is what a claim does with the record that holds its key: Decide's answer.
type Verdict int

const (
	// VerdictAbsent: no record, or one created longer ago than the claim's retention
	// whose lease is not live. The key is claimed as if nothing held it.
	VerdictAbsent Verdict = iota + 1
	// VerdictReplay: a completed record of the same request. Its response is replayed.
	VerdictReplay
	// VerdictMismatch: a record of a different request (another fingerprint), completed
	// or not. The client reused the key: 422.
	VerdictMismatch
	// VerdictInProgress: a started record of the same request whose lease is live: 409
	// (after the engine's LeaseWait).
	VerdictInProgress
	// VerdictTakeOver: a started record of the same request whose lease has ended, or
	// that has none (released after a phase committed). The claim takes it over with a
	// fresh token and resumes from its recovery point.
	VerdictTakeOver
)

// String returns the verdict's name: "absent", "replay", "mismatch", "in progress" or
// "take over".
func (v Verdict) String() string {
	switch v {
	case VerdictAbsent:
		return "absent"
	case VerdictReplay:
		return "replay"
	case VerdictMismatch:
		return "mismatch"
	case VerdictInProgress:
		return "in progress"
	case VerdictTakeOver:
		return "take over"
	default:
		return fmt.Sprintf("Verdict(%d)", int(v))
	}
}

// Claims reports whether a claim with verdict v takes the key (VerdictAbsent,
// VerdictTakeOver) rather than reporting the record that holds it.
func (v Verdict) Claims() bool { return v == VerdictAbsent || v == VerdictTakeOver }

// Decide is the claim's verdict on rec, the record that holds c's key (nil when none
// does), at now on the store's clock: the one statement of the rules Store.Claim lists,
// which every store of this module and the idem command call. rec's State, Fingerprint,
// LockedUntil and CreatedAt are read; c's Fingerprint and Retention.
//
//   - A live lease is a started record whose LockedUntil is after now.
//   - A record is past retention when c.Retention is positive and now is more than
//     c.Retention after its CreatedAt.
//
// In that order: no record, or one past retention without a live lease → VerdictAbsent;
// another fingerprint → VerdictMismatch; completed → VerdictReplay; a live lease →
// VerdictInProgress; otherwise VerdictTakeOver.
//
// A zero now leaves time out: a record a store's Claim returned has passed the time rules
// already (it is neither absent nor to be taken over), and the engine answers it with a
// zero now, a started record being VerdictInProgress whatever its lease.
//
// A store that decides inside the database (a conditional UPDATE, a script) must decide
// as Decide does; its tests hold the two to each other. Writes that act on a verdict
// stay conditional (fenced, or guarded by the same rules in SQL), so that of racing
// claimers exactly one wins.
func Decide(rec *Record, c Claim, now time.Time) Verdict {
	if rec == nil {
		return VerdictAbsent
	}
	timed := !now.IsZero()
	live := rec.State == StateStarted && (!timed || rec.LockedUntil.After(now))
	switch {
	case timed && !live && c.Retention > 0 && now.Sub(rec.CreatedAt) > c.Retention:
		return VerdictAbsent
	case !bytes.Equal(rec.Fingerprint, c.Fingerprint):
		return VerdictMismatch
	case rec.State == StateCompleted:
		return VerdictReplay
	case live:
		return VerdictInProgress
	default:
		return VerdictTakeOver
	}
}
