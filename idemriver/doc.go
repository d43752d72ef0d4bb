// Package idemriver enqueues the side effects of an idempotent operation as River jobs
// (github.com/riverqueue/river) that happen once: an email, a webhook, an event, any call
// that takes no idempotency key and can wait until after the response.
//
// A job inserted with River's InsertTx in the transaction the store shares with the
// handler (pgxstore.MustTx(ctx) on pgx; the *sql.Tx under gormstore.MustDB(ctx), from
// gormstore.SQLTx, with River's riverdatabasesql driver) exists if and only if that
// transaction commits: the phase's in phased mode, the request's in atomic mode. A failed,
// rolled back or fenced-out phase leaves no job; a retry, a resume or a takeover that skips
// the committed phase inserts nothing again.
//
// Embedding Key in the job's args adds the rest: the job carries the operation's scope and
// derived key, River keeps one job per (kind, scope, derived key) (Key.InsertOpts), and the
// worker hands the key on to the receiver, as an email's Message-ID (Key.MessageID) or a
// provider's idempotency key (Key.IdempotencyKey):
//
//	type ReceiptArgs struct {
//		idemriver.Key
//		PaymentID int64 `json:"payment_id"`
//	}
//
//	func (ReceiptArgs) Kind() string { return "payment_receipt" }
//
//	// in a phase of the payment's handler:
//	_, err := client.InsertTx(ctx, pgxstore.MustTx(ctx), ReceiptArgs{Key: idemriver.KeyFor(op, "receipt"), PaymentID: id}, nil)
//
// Sending is at least once: a worker that crashes after the send and before River records
// the job as completed sends again on the job's retry. The receiver deduplicates by the
// key the worker passed on. A job whose effect is a write to the same database completes
// in the write's own transaction (river.JobCompleteTx) and so happens exactly once.
//
// core, the adapters and the stores do not import River; only this package does.
package idemriver
