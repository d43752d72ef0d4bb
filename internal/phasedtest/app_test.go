package phasedtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/echoidem"
	"github.com/idemkit/idem/ginidem"
	"github.com/idemkit/idem/internal/adaptertest"
)

// provider is a payment provider stub that honours idempotency keys as a real one does:
// one charge per (account, idempotency key), and a known key returns the charge it
// created. It is another service: its table is written in its own transaction, on its own
// connection (its own pool), never in the caller's transaction.
type provider struct {
	pool  *pgxpool.Pool
	table string // schema-qualified
}

// errProviderKeyReused: the provider saw the key before with another amount.
var errProviderKeyReused = errors.New("provider: idempotency key reused with a different amount")

// charge creates a charge of amount for account, or returns the one key already made.
// Every call is counted (calls), so a test can tell a repeated call from a second charge.
func (p *provider) charge(ctx context.Context, account, key string, amount int64) (id string, err error) {
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return "", fmt.Errorf("provider: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	var got int64
	err = tx.QueryRow(ctx, `INSERT INTO `+p.table+` AS c (id, account, idem_key, amount_cents) VALUES ($1, $2, $3, $4)
		ON CONFLICT (account, idem_key) DO UPDATE SET calls = c.calls + 1
		RETURNING id, amount_cents`, newID("ch_"), account, key, amount).Scan(&id, &got)
	if err != nil {
		return "", fmt.Errorf("provider: charge: %w", err)
	}
	if got != amount {
		return "", fmt.Errorf("%w: %q", errProviderKeyReused, key)
	}
	if err = tx.Commit(ctx); err != nil {
		return "", fmt.Errorf("provider: commit: %w", err)
	}
	return id, nil
}

func newID(prefix string) string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// The points of a request at which a test hooks in to fail, panic, block or crash.
const (
	// atStarted: the claim (or takeover) committed; no phase has run in this attempt.
	atStarted = storage.RecoveryStarted
	// atProviderCalled: inside charge_created, the provider charged; the phase has not
	// committed.
	atProviderCalled = "provider_called"
	// atChargeRecorded: inside charge_created, the charge id is written in the phase's
	// transaction; the phase has not committed.
	atChargeRecorded = "charge_recorded"
	// atChargeCreated: the charge_created phase committed (or was skipped on resume).
	atChargeCreated = "charge_created"
	// atFinished: the finished phase committed (or was skipped); the response is not
	// recorded yet.
	atFinished = "finished"
	// atRecorded: the response is recorded and committed but not yet sent (reported to
	// core.Config.Hooks as OutcomeCompleted, after the engine wrote the response to the
	// server's buffer and before the handler chain returns).
	atRecorded = "recorded"
	// atOrderWritten: the atomic orders route wrote its row, uncommitted.
	atOrderWritten = "order_written"
)

// hook runs at each point of a request. A non-nil error makes the handler answer 500.
type hook func(ctx context.Context, op *core.Operation, at string) error

func noHook(context.Context, *core.Operation, string) error { return nil }

// errInjected is the failure tests inject through a hook.
var errInjected = errors.New("injected failure")

const accountHeader = "X-Account"

// app is the application under test: phased payments, atomic orders.
type app struct {
	be        *backend
	lease     time.Duration // the phased route's lease
	leaseWait time.Duration // the phased route's LeaseWait
	hook      hook          // set before serving
	// onError, if set before serving, sees every error a handler answers 500 for.
	onError func(op *core.Operation, err error)
	// hooks, if set before serving, observes the phased route's outcomes.
	hooks core.Hooks
	// providerAccount, if set before serving, names the provider account a tenant's
	// charges go to. Default: the tenant's own account (the provider keys charges by
	// tenant and key). A platform charging for all its tenants through one provider
	// account returns that account for every tenant.
	providerAccount func(account string) string
}

func newApp(be *backend, lease time.Duration, h hook) *app {
	if h == nil {
		h = noHook
	}
	return &app{be: be, lease: lease, hook: h}
}

// payment is the payment resource as the API returns it.
type payment struct {
	ID          string `json:"id"`
	ChargeID    string `json:"charge_id"`
	AmountCents int64  `json:"amount_cents"`
}

// createPayment handles POST /v1/payments behind the phased middleware:
//
//  1. started: the middleware committed the claim before the handler runs.
//  2. charge_created: the provider charges with the derived key <key>:charge (in its own
//     transaction) and the charge id is recorded in the phase's transaction, which commits
//     with the recovery point.
//  3. finished: reads back the charge id charge_created recorded (in this attempt or an
//     earlier one) and writes the payment row and the receipt email's outbox row,
//     committed with the recovery point.
//  4. The response is built from the payment row, read in the request's final
//     transaction, and recorded with it.
//
// On resume the phases that committed are skipped; everything the response needs comes
// from the database, so a resumed attempt answers what the first would have.
func (a *app) createPayment(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	op := core.MustOperation(ctx)
	account := r.Header.Get(accountHeader)
	var in struct {
		AmountCents int64 `json:"amount_cents"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.AmountCents <= 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "amount_cents must be a positive integer"})
		return
	}
	if a.failed(w, op, a.hook(ctx, op, atStarted)) {
		return
	}

	err := op.Phase(ctx, atChargeCreated, func(ctx context.Context) error {
		// The provider first, before this phase's transaction opens (on its first use
		// below): nothing of ours is held while the provider works.
		providerAccount := account
		if a.providerAccount != nil {
			providerAccount = a.providerAccount(account)
		}
		derived := op.DerivedKey("charge")
		if providerAccount != account { // one provider account for several tenants
			derived = op.ScopedDerivedKey("charge")
		}
		id, err := a.be.provider.charge(ctx, providerAccount, derived, in.AmountCents)
		if err != nil {
			return err
		}
		if err := a.hook(ctx, op, atProviderCalled); err != nil {
			return err
		}
		tx, err := a.be.tx(ctx)
		if err != nil {
			return err
		}
		err = tx.Exec(ctx, `INSERT INTO `+a.be.table("payment_charges")+` (account, idem_key, charge_id) VALUES (?, ?, ?)`,
			account, op.Key(), id)
		if err != nil {
			return err
		}
		return a.hook(ctx, op, atChargeRecorded)
	})
	if a.failed(w, op, err) || a.failed(w, op, a.hook(ctx, op, atChargeCreated)) {
		return
	}

	err = op.Phase(ctx, atFinished, func(ctx context.Context) error {
		tx, err := a.be.tx(ctx)
		if err != nil {
			return err
		}
		var chargeID string
		err = tx.QueryRow(ctx, `SELECT charge_id FROM `+a.be.table("payment_charges")+` WHERE account = ? AND idem_key = ?`,
			account, op.Key()).Scan(&chargeID)
		if err != nil {
			return fmt.Errorf("read the recorded charge: %w", err)
		}
		err = tx.Exec(ctx, `INSERT INTO `+a.be.table("payments")+` (account, idem_key, charge_id, amount_cents) VALUES (?, ?, ?, ?)`,
			account, op.Key(), chargeID, in.AmountCents)
		if err != nil {
			return err
		}
		// The receipt email goes to the outbox in the same transaction; a worker sends it.
		return tx.Exec(ctx, `INSERT INTO `+a.be.table("outbox")+` (account, message_id, kind) VALUES (?, ?, 'payment_receipt')`,
			account, op.DerivedKey("receipt"))
	})
	if a.failed(w, op, err) || a.failed(w, op, a.hook(ctx, op, atFinished)) {
		return
	}

	tx, err := a.be.tx(ctx) // the final transaction, committed with the recorded response
	if a.failed(w, op, err) {
		return
	}
	var p payment
	var id int64
	err = tx.QueryRow(ctx, `SELECT id, charge_id, amount_cents FROM `+a.be.table("payments")+` WHERE account = ? AND idem_key = ?`,
		account, op.Key()).Scan(&id, &p.ChargeID, &p.AmountCents)
	if a.failed(w, op, err) {
		return
	}
	p.ID = strconv.FormatInt(id, 10)
	w.Header().Set("Location", "/v1/payments/"+p.ID)
	writeJSON(w, http.StatusCreated, p)
}

// createOrder handles POST /v1/orders behind the atomic middleware: the order row, the
// key and the response commit together.
func (a *app) createOrder(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	op := core.MustOperation(ctx)
	account := r.Header.Get(accountHeader)
	var in struct {
		AmountCents int64 `json:"amount_cents"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.AmountCents <= 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "amount_cents must be a positive integer"})
		return
	}
	tx, err := a.be.tx(ctx)
	if a.failed(w, op, err) {
		return
	}
	err = tx.Exec(ctx, `INSERT INTO `+a.be.table("orders")+` (account, idem_key, amount_cents) VALUES (?, ?, ?)`,
		account, op.Key(), in.AmountCents)
	if a.failed(w, op, err) || a.failed(w, op, a.hook(ctx, op, atOrderWritten)) {
		return
	}
	var id int64
	err = tx.QueryRow(ctx, `SELECT id FROM `+a.be.table("orders")+` WHERE account = ? AND idem_key = ?`, account, op.Key()).Scan(&id)
	if a.failed(w, op, err) {
		return
	}
	w.Header().Set("Location", "/v1/orders/"+strconv.FormatInt(id, 10))
	writeJSON(w, http.StatusCreated, map[string]any{"id": strconv.FormatInt(id, 10), "amount_cents": in.AmountCents})
}

// failed answers 500 when err is not nil. (When the error is a lost lease, the
// middleware answers 409 instead, whatever the handler wrote.)
func (a *app) failed(w http.ResponseWriter, op *core.Operation, err error) bool {
	if err == nil {
		return false
	}
	if a.onError != nil {
		a.onError(op, err)
	}
	writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// framework is a router the application is served by.
type framework string

const (
	netHTTP framework = "net/http"
	ginFW   framework = "gin"
	echoFW  framework = "echo"
)

var frameworks = []framework{netHTTP, ginFW, echoFW}

// configs are the two routes' engine configurations: payments opt in to phased mode;
// orders keep the default, which is atomic on a store with a transaction to share.
func (a *app) configs() (phased, atomic core.Config) {
	phased = core.Config{Store: a.be.store, Mode: core.ModePhased, Lease: a.lease, LeaseWait: a.leaseWait,
		Hooks: a.hooks}
	atomic = core.Config{Store: a.be.store}
	return phased, atomic
}

// handler serves the application with fw: each route mounts a middleware instance of its
// own, and a recovery middleware outermost answers a panic with 500, as frameworks do.
func (a *app) handler(fw framework) http.Handler {
	phased, atomic := a.configs()
	switch fw {
	case ginFW:
		r := gin.New()
		r.Use(gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, p any) {
			c.AbortWithStatusJSON(http.StatusInternalServerError, gin.H{"error": fmt.Sprint(p)})
		}))
		scope := func(c *gin.Context) string { return c.GetHeader(accountHeader) }
		r.POST("/v1/payments", ginidem.New(adaptertest.Engine(phased), ginidem.Config{Scope: scope}), gin.WrapF(a.createPayment))
		r.POST("/v1/orders", ginidem.New(adaptertest.Engine(atomic), ginidem.Config{Scope: scope}), gin.WrapF(a.createOrder))
		return r
	case echoFW:
		e := echo.New()
		e.HideBanner, e.HidePort = true, true
		e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{
			DisablePrintStack: true,
			LogErrorFunc:      func(_ echo.Context, err error, _ []byte) error { return err },
		}))
		scope := func(c echo.Context) string { return c.Request().Header.Get(accountHeader) }
		e.POST("/v1/payments", echo.WrapHandler(http.HandlerFunc(a.createPayment)),
			echoidem.New(adaptertest.Engine(phased), echoidem.Config{Scope: scope}))
		e.POST("/v1/orders", echo.WrapHandler(http.HandlerFunc(a.createOrder)),
			echoidem.New(adaptertest.Engine(atomic), echoidem.Config{Scope: scope}))
		return e
	default:
		scope := func(r *http.Request) string { return r.Header.Get(accountHeader) }
		payments, err := core.New(phased)
		if err != nil {
			panic(err)
		}
		orders, err := core.New(atomic)
		if err != nil {
			panic(err)
		}
		mux := http.NewServeMux()
		mux.Handle("POST /v1/payments", payments.Middleware(scope)(http.HandlerFunc(a.createPayment)))
		mux.Handle("POST /v1/orders", orders.Middleware(scope)(http.HandlerFunc(a.createOrder)))
		return recoverer(mux)
	}
}

// recoverer answers a panic with 500, as Gin's and Echo's recovery middleware do.
func recoverer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				writeJSON(w, http.StatusInternalServerError, map[string]string{"error": fmt.Sprint(p)})
			}
		}()
		h.ServeHTTP(w, r)
	})
}

// reply is an HTTP response, read whole.
type reply struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r *reply) replayed() bool { return r.Header.Get("Idempotent-Replayed") == "true" }

func (r *reply) String() string {
	return fmt.Sprintf("%d (replayed=%v) %s", r.Status, r.replayed(), bytes.TrimSpace(r.Body))
}

// payment decodes the body of a 201.
func (r *reply) payment() (payment, error) {
	var p payment
	err := json.Unmarshal(r.Body, &p)
	return p, err
}

// client sends requests without keeping connections (a crashed child leaves none open).
var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}

// post sends POST path with the key and body, as account.
func post(ctx context.Context, base, path, account, key, body string) (*reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewBufferString(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(accountHeader, account)
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &reply{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

const paymentBody = `{"amount_cents": 1250}`

// checkDone checks a payment that completed once: exactly one provider charge, recorded
// charge, payment row and queued receipt, the key completed at finished; and, unless first is nil, that
// first is an original 201 naming them.
func checkDone(tl tally, first *reply) error {
	var errs []error
	if tl.Charges != 1 || tl.Recorded != 1 || tl.Payments != 1 || tl.Outbox != 1 {
		errs = append(errs, fmt.Errorf("want exactly one charge, recorded charge, payment and receipt: %v", tl))
	}
	if tl.State != string(storage.StateCompleted) || tl.Point != atFinished || tl.Leased {
		errs = append(errs, fmt.Errorf("key row %q at %q (leased %v), want completed at finished, no lease", tl.State, tl.Point, tl.Leased))
	}
	if first != nil {
		if first.Status != http.StatusCreated || first.replayed() {
			errs = append(errs, fmt.Errorf("the completing response is %v, want an original 201", first))
		}
		errs = append(errs, checkNames(tl, first))
	}
	return errors.Join(errs...)
}

// checkNames checks that the 201 r names the provider's charge and the payment row.
func checkNames(tl tally, r *reply) error {
	p, err := r.payment()
	switch {
	case r.Status != http.StatusCreated:
		return fmt.Errorf("%v, want 201", r)
	case err != nil:
		return fmt.Errorf("the 201's body %q: %w", r.Body, err)
	case p.ChargeID != tl.ChargeID || p != tl.Payment || p.AmountCents != 1250:
		return fmt.Errorf("the 201 says %+v; the provider has %q and the payment row is %+v", p, tl.ChargeID, tl.Payment)
	case r.Header.Get("Location") != "/v1/payments/"+p.ID:
		return fmt.Errorf("Location %q for payment %s", r.Header.Get("Location"), p.ID)
	}
	return nil
}

// checkReplay checks that r replays first byte for byte.
func checkReplay(first, r *reply) error {
	switch {
	case r.Status != first.Status || !r.replayed():
		return fmt.Errorf("replay %v, want %d with Idempotent-Replayed", r, first.Status)
	case !bytes.Equal(r.Body, first.Body):
		return fmt.Errorf("replayed body %q, first %q", r.Body, first.Body)
	case r.Header.Get("Location") != first.Header.Get("Location") || r.Header.Get("Content-Type") != first.Header.Get("Content-Type"):
		return fmt.Errorf("replayed headers %v, first %v", r.Header, first.Header)
	}
	return nil
}

// checkInProgress checks a 409 problem with Retry-After.
func checkInProgress(r *reply) error {
	if r.Status != http.StatusConflict || r.Header.Get("Retry-After") == "" {
		return fmt.Errorf("%v (Retry-After %q), want 409 with Retry-After", r, r.Header.Get("Retry-After"))
	}
	return nil
}
