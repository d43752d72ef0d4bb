package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
)

// provider is a fake payment provider that honours idempotency keys as a real one does:
// a charge is created once per (API account, key), and a repeated key returns the
// charge it created. It keeps its charges in its own table, written in its own
// transaction — never the caller's, as a real provider is another service.
type provider struct{ be *backend }

// Charge is a provider charge as GET /v1/provider/charges lists it.
type Charge struct {
	ID             string `json:"id"`
	IdempotencyKey string `json:"idempotency_key"`
	AmountCents    int64  `json:"amount_cents"`
}

// errKeyConflict: the provider saw the key before with another amount or currency.
var errKeyConflict = errors.New("provider: idempotency key reused with different parameters")

// charge creates (or, for a key it has seen from account, returns) a charge.
func (p *provider) charge(ctx context.Context, account, key string, amountCents int64, currency string) (c Charge, err error) {
	tx, err := p.be.begin(ctx)
	if err != nil {
		return Charge{}, fmt.Errorf("provider: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	err = tx.Exec(ctx, `INSERT INTO provider_charges (id, account, idempotency_key, amount_cents, currency, created_at)
		VALUES (?, ?, ?, ?, ?, ?)`+p.be.upsert("account, idempotency_key", ""),
		newChargeID(), account, key, amountCents, currency, p.be.createdAt(now()))
	if err != nil {
		return Charge{}, fmt.Errorf("provider: insert: %w", err)
	}
	var cur string
	c.IdempotencyKey = key
	err = tx.QueryRow(ctx, `SELECT id, amount_cents, currency FROM provider_charges WHERE account = ? AND idempotency_key = ?`,
		account, key).Scan(&c.ID, &c.AmountCents, &cur)
	if err != nil {
		return Charge{}, fmt.Errorf("provider: read back: %w", err)
	}
	if c.AmountCents != amountCents || cur != currency {
		return Charge{}, fmt.Errorf("%w: %q", errKeyConflict, key)
	}
	if err = tx.Commit(ctx); err != nil {
		return Charge{}, fmt.Errorf("provider: commit: %w", err)
	}
	return c, nil
}

func newChargeID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "ch_" + hex.EncodeToString(b[:])
}

// ListCharges handles GET /v1/provider/charges: what the provider did for the account,
// oldest first, so a client can count the charges.
func (a *App) ListCharges(r *http.Request, account string) Reply {
	ctx := r.Context()
	rs, err := a.be.db.Query(ctx, `SELECT id, idempotency_key, amount_cents FROM provider_charges WHERE account = ? ORDER BY seq`, account)
	if err != nil {
		return a.fail(ctx, "provider: list charges", err)
	}
	defer rs.Close()
	list := struct {
		Charges []Charge `json:"charges"`
	}{Charges: []Charge{}}
	for rs.Next() {
		var c Charge
		if err := rs.Scan(&c.ID, &c.IdempotencyKey, &c.AmountCents); err != nil {
			return a.fail(ctx, "provider: list charges", err)
		}
		list.Charges = append(list.Charges, c)
	}
	if err := rs.Err(); err != nil {
		return a.fail(ctx, "provider: list charges", err)
	}
	return jsonReply(http.StatusOK, list)
}
