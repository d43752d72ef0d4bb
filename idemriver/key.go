package idemriver

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/idemkit/idem/core"
)

// Key identifies a side effect of an idempotent operation: the operation's scope and its
// derived key for the effect ("<key>:<suffix>"). Embed it in a job's args (River's
// JobArgs); it is the same on every attempt, resume and takeover of the operation, and
// different for every scope, operation and effect.
//
// Its fields are tagged river:"unique" and its InsertOpts makes River keep one job per
// kind and Key in any state (see InsertOpts). It encodes as the args' "idem_scope" and
// "idem_key" JSON fields.
type Key struct {
	// Scope is the operation's scope (core.Operation.Scope).
	Scope string `json:"idem_scope" river:"unique"`
	// DerivedKey is core.Operation.DerivedKey of the effect's suffix: unique within Scope.
	DerivedKey string `json:"idem_key" river:"unique"`
}

// KeyFor returns the Key of op's effect named suffix ("receipt", "webhook"…): op's scope
// and op.DerivedKey(suffix). Use one suffix per effect of an operation.
func KeyFor(op *core.Operation, suffix string) Key {
	return Key{Scope: op.Scope(), DerivedKey: op.DerivedKey(suffix)}
}

// InsertOpts implements River's JobArgsWithInsertOpts for args that embed Key: River keeps
// at most one job of the args' kind for a Key, in any state (the default states plus
// cancelled and discarded), until its job cleaner deletes the finished job (by default
// 24 hours after completion, 7 days after it was discarded). A second insert of the same
// Key is skipped (JobInsertResult.UniqueSkippedAsDuplicate) and returns the first job.
//
// Args that need other insert options define their own InsertOpts, starting from this
// one so that the uniqueness stays:
//
//	func (a ReceiptArgs) InsertOpts() river.InsertOpts {
//		opts := a.Key.InsertOpts()
//		opts.Queue = "email"
//		return opts
//	}
func (Key) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: rivertype.JobStates()}}
}

// IdempotencyKey returns the key to pass to a receiver that deduplicates by one (a
// provider's Idempotency-Key header, say): "<scope id>:<derived key>", as
// core.Operation.ScopedDerivedKey makes it, so it is unique across scopes, its length does
// not depend on the scope, and the scope's name is not disclosed.
func (k Key) IdempotencyKey() string {
	return scopeID(k.Scope) + ":" + k.DerivedKey
}

// MessageID returns an RFC 5322 Message-ID for an email sent as this effect,
// "<32 hex digits@domain>", the digits from a hash of the scope and the derived key: the
// same on every retry of the job, different for every scope, operation and effect, and
// made of characters a Message-ID allows whatever the key holds. domain is the sender's
// (a domain the application controls, as RFC 5322 advises).
func (k Key) MessageID(domain string) string {
	h := sha256.New()
	h.Write([]byte(k.Scope))
	h.Write([]byte{0}) // a scope cannot run into the key: no NUL in either
	h.Write([]byte(k.DerivedKey))
	return "<" + hex.EncodeToString(h.Sum(nil)[:16]) + "@" + domain + ">"
}

// scopeID is the first 16 hex digits of the scope's SHA-256, as
// core.Operation.ScopedDerivedKey writes it.
func scopeID(scope string) string {
	sum := sha256.Sum256([]byte(scope))
	return hex.EncodeToString(sum[:8])
}
