package demo

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/idemkit/idem/core"
)

// Payment is a payment as the API returns it.
type Payment struct {
	ID          string `json:"id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
	ChargeID    string `json:"charge_id"`
	CreatedAt   string `json:"created_at"`
	// Receipt is "queued" or "sent" (GET /v1/payments/{id} on PostgreSQL; see receipts.go).
	Receipt string `json:"receipt,omitempty"`
}

// CreatePayment handles POST /v1/payments behind the phased middleware:
//
//  1. started: the middleware committed the claim before this runs.
//  2. charge_created: the provider is called with the derived key <key>:charge (in its
//     own transaction), and the charge id is recorded in payment_charges; the phase then
//     records its recovery point. A retry that takes over after a crash skips the phase
//     and reads the charge id back; the provider would return the same charge anyway,
//     since the derived key is stable.
//  3. finished: the payment row is written and, on PostgreSQL, its receipt enqueued as a
//     River job in the same transaction (receipts.go), then the 201 is recorded.
//
// Where the rows commit depends on the store of the payments' keys (see
// backend.paymentTx): in the database, with the phase's recovery point and with the
// recorded response; in Redis, each in a transaction of its own just before. So every
// write is idempotent by itself: payment_charges is an upsert on (account, key), and
// the payment an insert-or-get on (account, key) whose 201 is built from the row as
// stored, so an attempt that runs the final step again answers what the first would have.
//
// An invalid body is a 400 problem, recorded and replayed like a success.
func (a *App) CreatePayment(r *http.Request, account string) Reply {
	ctx := r.Context()
	op := core.MustOperation(ctx)
	if a.cfg.CrashAfter == PhaseStarted && !op.Resumed() {
		a.crash(PhaseStarted) // the claim committed before the handler ran
	}
	body, bad := a.readBody(r)
	if bad != nil {
		return *bad
	}
	in, bad := parsePayment(body)
	if bad != nil {
		return *bad
	}

	var charge Charge
	ran := false
	err := op.Phase(ctx, PhaseChargeCreated, func(ctx context.Context) error {
		// The provider first: the phase's transaction opens on its first use below, so
		// on SQLite the provider's own transaction does not wait for this one's lock.
		c, err := a.provider.charge(ctx, account, op.DerivedKey("charge"), in.AmountCents, in.Currency)
		if err != nil {
			return err
		}
		err = a.be.paymentTx(ctx, func(q querier) error {
			return q.Exec(ctx, `INSERT INTO payment_charges (account, idempotency_key, charge_id) VALUES (?, ?, ?)`+
				a.be.upsert("account, idempotency_key", "charge_id"), account, op.Key(), c.ID)
		})
		if err != nil {
			return err
		}
		charge, ran = c, true
		return nil
	})
	switch {
	case errors.Is(err, errKeyConflict):
		a.log.WarnContext(ctx, "payments: the provider refused the charge", "error", err)
		return problem(http.StatusBadGateway, ProblemProvider, "Payment provider failed",
			"The payment provider refused the charge; nothing was recorded.")
	case err != nil: // a lost lease included: the middleware then answers 409
		return a.fail(ctx, "payments: phase "+PhaseChargeCreated, err)
	}
	if ran && a.cfg.CrashAfter == PhaseChargeCreated {
		a.crash(PhaseChargeCreated)
	}

	// With a SQL store both steps below run in the final transaction. With Redis each has
	// its own: on SQLite a transaction that reads and then writes is refused at once
	// (SQLITE_BUSY_SNAPSHOT) when another writer committed in between, while one that
	// writes first waits for the lock.
	if !ran { // resumed after charge_created: read what that phase recorded
		err := a.be.paymentTx(ctx, func(q querier) error {
			return q.QueryRow(ctx, `SELECT charge_id FROM payment_charges WHERE account = ? AND idempotency_key = ?`,
				account, op.Key()).Scan(&charge.ID)
		})
		if err != nil {
			return a.fail(ctx, "payments: read the recorded charge", err)
		}
	}
	var p Payment
	err = a.be.paymentTx(ctx, func(q querier) error {
		var err error
		if p, err = a.insertPayment(ctx, q, account, op.Key(), in, charge.ID); err != nil {
			return err
		}
		return a.receipts.enqueue(ctx, op, p) // commits with the payment and the 201, or not at all
	})
	if err != nil {
		return a.fail(ctx, "payments: record the payment", err)
	}
	if a.cfg.CrashAfter == CrashPaymentWritten {
		a.crash(CrashPaymentWritten) // on every attempt: the row is written on every attempt
	}
	return jsonReply(http.StatusCreated, p, "Location", "/v1/payments/"+p.ID)
}

// insertPayment writes the payment of account's key, once: when the key's row is there
// already (the retry of an attempt that wrote it, then failed to record its response),
// it is left as it is and read back. Either way the Payment returned is the row as
// stored, id and created_at included. The request's fingerprint and the provider's
// derived key make sure a key's row is always for the same amount and currency.
func (a *App) insertPayment(ctx context.Context, q querier, account, key string, in paymentInput, chargeID string) (Payment, error) {
	err := q.Exec(ctx, `INSERT INTO payments (account, idempotency_key, amount_cents, currency, charge_id, created_at) VALUES (?, ?, ?, ?, ?, ?)`+
		a.be.upsert("account, idempotency_key", ""), account, key, in.AmountCents, in.Currency, chargeID, a.be.createdAt(now()))
	if err != nil {
		return Payment{}, fmt.Errorf("insert: %w", err)
	}
	p, err := scanPayment(q.QueryRow(ctx, `SELECT `+paymentColumns+` FROM payments WHERE account = ? AND idempotency_key = ?`, account, key))
	if err != nil {
		return Payment{}, fmt.Errorf("read back: %w", err)
	}
	return p, nil
}

const paymentColumns = `id, amount_cents, currency, charge_id, created_at`

func scanPayment(r row) (Payment, error) {
	var p Payment
	var id int64
	err := r.Scan(&id, &p.AmountCents, &p.Currency, &p.ChargeID, stamp{&p.CreatedAt})
	p.ID = strconv.FormatInt(id, 10)
	return p, err
}

// ListPayments handles GET /v1/payments: the account's payments, oldest first.
func (a *App) ListPayments(r *http.Request, account string) Reply {
	ctx := r.Context()
	rs, err := a.be.db.Query(ctx, `SELECT `+paymentColumns+` FROM payments WHERE account = ? ORDER BY id`, account)
	if err != nil {
		return a.fail(ctx, "payments: list", err)
	}
	defer rs.Close()
	list := struct {
		Payments []Payment `json:"payments"`
	}{Payments: []Payment{}}
	for rs.Next() {
		p, err := scanPayment(rs)
		if err != nil {
			return a.fail(ctx, "payments: list", err)
		}
		list.Payments = append(list.Payments, p)
	}
	if err := rs.Err(); err != nil {
		return a.fail(ctx, "payments: list", err)
	}
	return jsonReply(http.StatusOK, list)
}

// GetPayment handles GET /v1/payments/{id}: 404 for an unknown id or another account's.
func (a *App) GetPayment(r *http.Request, account, id string) Reply {
	ctx := r.Context()
	n, ok := parseID(id)
	if !ok {
		return notFoundReply("payment", id)
	}
	p, err := scanPayment(a.be.db.QueryRow(ctx, `SELECT `+paymentColumns+` FROM payments WHERE account = ? AND id = ?`, account, n))
	switch {
	case notFound(err):
		return notFoundReply("payment", id)
	case err != nil:
		return a.fail(ctx, "payments: get", err)
	}
	if p.Receipt, err = a.receiptOf(ctx, account, n); err != nil {
		return a.fail(ctx, "payments: get the receipt", err)
	}
	return jsonReply(http.StatusOK, p)
}
