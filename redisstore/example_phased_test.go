package redisstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/redisstore"
)

// snippet:begin provider
// Charge is what the payment provider answers.
type Charge struct {
	ID          string `json:"charge_id"`
	AmountCents int64  `json:"amount_cents"`
}

// Payments is the payment provider's client. Charge is idempotent by key: the same key
// gets the same charge back, never a second one. FindCharge looks a charge up by the key
// it was made with (with Stripe, say: the key kept in the charge's metadata and searched).
type Payments interface {
	Charge(ctx context.Context, amountCents int64, idempotencyKey string) (Charge, error)
	FindCharge(ctx context.Context, idempotencyKey string) (Charge, error)
}

// Mailer sends email through an API that honours idempotency keys too.
type Mailer interface {
	Send(ctx context.Context, idempotencyKey, to, text string) error
}

// snippet:end provider

// snippet:begin pay
// pay charges the caller's card, then emails the receipt, as two phases. Redis keeps each
// phase's recovery point but no result of it: a retry that resumes after "charged" skips
// that phase, so it asks the provider for the charge by the derived key it was made with.
func pay(payments Payments, mailer Mailer) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		op := core.MustOperation(ctx)
		var in struct {
			AmountCents int64  `json:"amount_cents"`
			Email       string `json:"email"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.AmountCents <= 0 {
			http.Error(w, "amount_cents must be a positive integer", http.StatusBadRequest) // 4xx: recorded, replayed
			return
		}
		chargeKey := op.DerivedKey("charge") // "<key>:charge": the same on every retry and takeover

		var charge Charge
		err := op.Phase(ctx, "charged", func(ctx context.Context) error {
			var err error
			charge, err = payments.Charge(ctx, in.AmountCents, chargeKey)
			return err
		})
		if err == nil && charge.ID == "" { // skipped: an earlier attempt charged; the provider knows the charge
			charge, err = payments.FindCharge(ctx, chargeKey)
		}
		if err != nil {
			phaseFailed(w, "the payment could not be made", err) // 5xx: not recorded
			return
		}

		err = op.Phase(ctx, "receipt_sent", func(ctx context.Context) error {
			return mailer.Send(ctx, op.DerivedKey("receipt"), in.Email, "Receipt for charge "+charge.ID)
		})
		if err != nil { // "charged" stays recorded: the retry resumes here, charging nothing
			phaseFailed(w, "the receipt could not be sent", err)
			return
		}

		// The response is built from the provider's charge, so a resumed attempt answers
		// what the first would have.
		w.Header().Set("Location", "/v1/payments/"+charge.ID)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated) // recorded, then sent; retries get it replayed
		_ = json.NewEncoder(w).Encode(charge)
	}
}

// phaseFailed answers a phase that failed: 503 + Retry-After when Redis could not record
// it (down, failing over, replicas not acknowledging), so the client retries shortly;
// 502 when the outside call itself failed. Neither status is recorded: the key is free
// for the retry, which resumes after the last phase that was.
func phaseFailed(w http.ResponseWriter, what string, err error) {
	if errors.Is(err, redisstore.ErrUnavailable) {
		w.Header().Set("Retry-After", "1")
		http.Error(w, what+" (Redis unavailable); retry with the same key", http.StatusServiceUnavailable)
		return
	}
	http.Error(w, what+"; retry with the same key", http.StatusBadGateway)
}

// snippet:end pay

// fakePayments is a provider in memory: one charge per idempotency key.
type fakePayments struct {
	mu             sync.Mutex
	byKey          map[string]Charge
	charges, finds int
}

func (p *fakePayments) Charge(_ context.Context, amountCents int64, key string) (Charge, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.charges++
	if c, ok := p.byKey[key]; ok {
		return c, nil
	}
	c := Charge{ID: fmt.Sprintf("ch_%d", len(p.byKey)+1), AmountCents: amountCents}
	p.byKey[key] = c
	return c, nil
}

func (p *fakePayments) FindCharge(_ context.Context, key string) (Charge, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finds++
	c, ok := p.byKey[key]
	if !ok {
		return Charge{}, errors.New("no charge with that idempotency key")
	}
	return c, nil
}

// flakyMailer fails its first call, as an email API in an outage would, and counts the
// receipts it sent, once per idempotency key.
type flakyMailer struct {
	mu    sync.Mutex
	calls int
	sent  map[string]string
}

func (m *flakyMailer) Send(_ context.Context, key, _, text string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	if m.calls == 1 {
		return errors.New("email API unavailable")
	}
	m.sent[key] = text
	return nil
}

// Phased mode on Redis: the first attempt charges, then fails to send the receipt (502).
// The retry with the same key resumes after "charged": it does not charge again, it finds
// the charge at the provider by the derived key, sends the receipt and answers 201. A
// later retry gets that 201 replayed.
func Example_providerLookup() {
	client, prefix := exampleClient()
	defer client.Close()
	defer dropPrefix(prefix)
	eng, err := core.New(core.Config{Store: redisstore.New(client, redisstore.WithPrefix(prefix)), Mode: core.ModePhased})
	if err != nil {
		panic(err)
	}
	payments := &fakePayments{byKey: map[string]Charge{}}
	mailer := &flakyMailer{sent: map[string]string{}}
	accountOf := func(r *http.Request) string { return r.Header.Get("X-Account-ID") }
	handler := eng.Middleware(accountOf)(pay(payments, mailer))

	for attempt := 1; attempt <= 3; attempt++ {
		r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{"amount_cents":1250,"email":"alice@example.com"}`))
		r.Header.Set("X-Account-ID", "alice")
		r.Header.Set("Idempotency-Key", "5b0c2f0e-pay-1")
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Printf("attempt %d: %d %s replayed=%q %s", attempt, w.Code, w.Header().Get("Location"),
			w.Header().Get("Idempotent-Replayed"), w.Body)
	}
	fmt.Printf("provider: %d charge made, %d Charge calls, %d lookups; receipts sent: %d\n",
		len(payments.byKey), payments.charges, payments.finds, len(mailer.sent))
	// Output:
	// attempt 1: 502  replayed="" the receipt could not be sent; retry with the same key
	// attempt 2: 201 /v1/payments/ch_1 replayed="" {"charge_id":"ch_1","amount_cents":1250}
	// attempt 3: 201 /v1/payments/ch_1 replayed="true" {"charge_id":"ch_1","amount_cents":1250}
	// provider: 1 charge made, 1 Charge calls, 1 lookups; receipts sent: 1
}

// TestPhaseFailedIs503WhenRedisIsUnavailable: the pay example answers a phase error
// wrapping ErrUnavailable as the README says (503 + Retry-After), and any other with 502.
func TestPhaseFailedIs503WhenRedisIsUnavailable(t *testing.T) {
	t.Parallel()
	w := httptest.NewRecorder()
	phaseFailed(w, "the payment could not be made", fmt.Errorf("phase charged: %w", redisstore.ErrUnavailable))
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.Equal(t, "1", w.Header().Get("Retry-After"))

	w = httptest.NewRecorder()
	phaseFailed(w, "the payment could not be made", errors.New("provider: card declined"))
	assert.Equal(t, http.StatusBadGateway, w.Code)
	assert.Empty(t, w.Header().Get("Retry-After"))
}
