package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/redisstore"
)

// AccountHeader carries the caller's account: a stand-in for real authentication.
// Idempotency keys are scoped by it.
const AccountHeader = "X-Account-ID"

// App is the demo's domain: orders, payments and a fake payment provider on one
// database, with the idempotency stores that protect the keyed routes (the database's,
// and Redis for the payments with -store redis). Its methods are
// the handlers' logic; the servers only route requests to them and write their Reply.
type App struct {
	cfg      Config
	log      *slog.Logger
	be       *backend
	provider *provider
	obs      *observer // /metrics and the access log
	openapi  []byte    // the OpenAPI document, GET /openapi.json
	// The engines of the keyed routes, one per contract (store, mode, key source), each
	// built once (see OrdersIdem, PaymentsIdem, WebhooksIdem).
	orders, payments, webhooks *core.Engine
	// crash ends the process after a phase committed, or the payment row was written
	// (-crash-after).
	crash func(phase string)
	// receipts sends the payments' receipts through River (PostgreSQL only; nil otherwise).
	receipts *receipts
}

// Open connects to the database cfg names, creates the schema when missing (business
// tables and key table) and returns the App. Close it when done.
func Open(ctx context.Context, cfg Config, log *slog.Logger) (*App, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	obs, err := newObserver(log)
	if err != nil {
		return nil, err
	}
	be, err := openBackend(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	if err := be.createSchema(ctx); err != nil {
		be.close()
		return nil, err
	}
	a := &App{cfg: cfg, log: log, be: be, provider: &provider{be: be}, obs: obs}
	if a.receipts, err = openReceipts(ctx, be, log); err != nil {
		be.close()
		return nil, err
	}
	// The worker runs until Close, not until ctx (which only bounds the start).
	if err := a.receipts.run(context.WithoutCancel(ctx)); err != nil {
		be.close()
		return nil, err
	}
	if err := a.buildEngines(); err != nil {
		be.close()
		return nil, err
	}
	if a.openapi, err = a.openAPIJSON(ctx); err != nil {
		be.close()
		return nil, err
	}
	a.crash = func(phase string) {
		log.Warn("crash injected: exiting with status 3 after " + phase)
		os.Exit(3)
	}
	return a, nil
}

// Close stops the receipts' worker and closes the database.
func (a *App) Close() {
	a.receipts.close(a.log)
	a.be.close()
}

// StoreName says which database and store the App runs on, for the log.
func (a *App) StoreName() string { return a.be.name }

// Completer finishes, through handler (the server's router), the payments whose clients
// never came back; nil unless Config.Completer.
func (a *App) Completer(handler http.Handler) *core.Completer {
	if !a.cfg.Completer {
		return nil
	}
	grace, interval := a.cfg.CompleterGrace, a.cfg.CompleterInterval
	if grace <= 0 {
		grace = 10 * time.Second
	}
	if interval <= 0 {
		interval = 5 * time.Second
	}
	return &core.Completer{Engine: a.payments, Handler: handler, Grace: grace, Interval: interval, Logger: a.log}
}

// Sweeper deletes expired keys every interval, logging each sweep at debug level. It
// sweeps the database: keys in Redis (-store redis) expire by themselves.
func (a *App) Sweeper() *core.Sweeper {
	return &core.Sweeper{Store: a.be.store, Interval: sweepInterval, Logger: a.log}
}

// OrdersIdem is the engine of POST /v1/orders: atomic mode, so the order row and the
// key's completion commit in one transaction.
func (a *App) OrdersIdem() *core.Engine { return a.orders }

// PaymentsIdem is the engine of POST /v1/payments: phased mode, so the provider call is
// recorded by its own committed phase and a retry after a crash resumes after it. Its
// keys are in Redis with -store redis, in the database otherwise.
func (a *App) PaymentsIdem() *core.Engine { return a.payments }

// WebhooksIdem is the engine of POST /v1/webhooks/provider: the key is the body's "id",
// and atomic mode, so the event row commits with it or not at all.
func (a *App) WebhooksIdem() *core.Engine { return a.webhooks }

// buildEngines builds the three engines: each route's contract differs (its store, its
// mode, where its key is), and an engine is one contract.
func (a *App) buildEngines() error {
	orders, payments, webhooks := a.idem(), a.idem(), a.idem()
	orders.Mode = core.ModeAtomic
	payments.Store, payments.Mode = a.be.payments, core.ModePhased
	// With the completer, a payment's request is kept beside its key (its body and
	// Content-Type; the account is its scope), so a crashed payment can be finished
	// without its client.
	payments.KeepRequest = a.cfg.Completer
	if a.cfg.Completer {
		payments.KeepHeaders = []string{"Content-Type"}
	}
	webhooks.Mode, webhooks.Key = core.ModeAtomic, core.KeyFromJSON("id")
	var err error
	if a.orders, err = core.New(orders); err != nil {
		return fmt.Errorf("orders: %w", err)
	}
	if a.payments, err = core.New(payments); err != nil {
		return fmt.Errorf("payments: %w", err)
	}
	if a.webhooks, err = core.New(webhooks); err != nil {
		return fmt.Errorf("webhooks: %w", err)
	}
	return nil
}

func (a *App) idem() core.Config {
	return core.Config{
		Store:  a.be.store,
		Lease:  a.cfg.Lease,
		Logger: a.log,
		Hooks: core.JoinHooks(a.obs.hooks, core.HookFunc(func(ctx context.Context, ev core.Event) {
			if a.log.Enabled(ctx, slog.LevelDebug) {
				a.log.LogAttrs(ctx, slog.LevelDebug, "idem: "+string(ev.Outcome), slog.String("account", ev.Scope),
					slog.String("key", ev.Key), slog.String("route", clip(ev.Method)+" "+clip(ev.Path)), slog.Int("status", ev.Status),
					slog.Any("error", ev.Err))
			}
		})),
	}
}

// maxAccount is the longest account ID the demo accepts: the accounts it would issue are
// 1 to 64 characters of printable ASCII. Anything else is refused before it reaches a
// store: an account is the idempotency scope, and a scope a store cannot hold (too long,
// not UTF-8, a byte PostgreSQL's text refuses) is, to the engine, a server's
// misconfiguration (500), not a client's mistake.
const maxAccount = 64

// Authenticate returns the caller's account from the X-Account-ID header, or the 401
// problem to answer when there is none the demo would issue: the header missing, empty,
// sent twice (which of two accounts is ambiguous), over maxAccount bytes or holding a byte
// outside printable ASCII (0x20-0x7E).
//
// A request core.Completer runs (a payment whose client never came back) carries no
// credentials: its account is the scope the key was claimed under, authenticated then.
func Authenticate(r *http.Request) (account string, reject *Reply) {
	if c, ok := core.CompletionFromContext(r.Context()); ok {
		return c.Scope, nil
	}
	values := r.Header.Values(AccountHeader)
	var detail string
	switch {
	case len(values) == 0 || len(values) == 1 && values[0] == "":
		detail = "Every /v1 request needs an " + AccountHeader + " header naming the caller's account."
	case len(values) > 1:
		detail = "The request has more than one " + AccountHeader + " header: send one, naming the caller's account."
	case !issuable(values[0]):
		detail = "The " + AccountHeader + " header is not an account ID: 1 to " + strconv.Itoa(maxAccount) +
			" characters of printable ASCII."
	default:
		return values[0], nil
	}
	rep := problem(http.StatusUnauthorized, ProblemUnauthenticated, "Unauthenticated", detail)
	rep.Header.Set("WWW-Authenticate", AccountHeader)
	return "", &rep
}

// issuable reports whether account is an ID the demo would issue: 1 to maxAccount bytes,
// each printable ASCII.
func issuable(account string) bool {
	if len(account) == 0 || len(account) > maxAccount {
		return false
	}
	for i := 0; i < len(account); i++ {
		if account[i] < 0x20 || account[i] > 0x7e {
			return false
		}
	}
	return true
}

// readBody reads the request body: the copy the idempotency middleware hands over after
// reading it once, bounded.
func (a *App) readBody(r *http.Request) ([]byte, *Reply) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		rep := a.fail(r.Context(), "reading the request body", err)
		return nil, &rep
	}
	return body, nil
}

// fail logs err and answers it: 503 + Retry-After when the database was only busy
// (see busy), 500 otherwise. Neither is stored: the key is released, and a retry with it
// runs again.
func (a *App) fail(ctx context.Context, what string, err error) Reply {
	a.log.LogAttrs(ctx, slog.LevelError, what, slog.Any("error", err))
	if busy(err) {
		return Unavailable()
	}
	return Internal()
}

// busy reports whether err says the database was busy rather than broken, so the same
// request may succeed when sent again: a lock wait that ran out (SQLite's busy_timeout,
// which a writer can exhaust under a steady stream of others, MySQL's
// innodb_lock_wait_timeout, PostgreSQL's lock_timeout), a deadlock or a serialization
// failure, or a key store's word for one of those, or Redis unavailable to a phase (down,
// failing over, or its replicas not acknowledging).
func busy(err error) bool {
	if errors.Is(err, storage.ErrInProgress) || errors.Is(err, storage.ErrTransient) || errors.Is(err, redisstore.ErrUnavailable) {
		return true
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code == "55P03" || pg.Code == "40001" || pg.Code == "40P01"
	}
	var my *mysql.MySQLError
	if errors.As(err, &my) {
		return my.Number == 1205 || my.Number == 1213 // ER_LOCK_WAIT_TIMEOUT, ER_LOCK_DEADLOCK
	}
	var lite interface{ Code() int } // the SQLite driver's error
	if errors.As(err, &lite) {
		code := lite.Code() & 0xff    // the primary code of an extended one (517 is SQLITE_BUSY_SNAPSHOT)
		return code == 5 || code == 6 // SQLITE_BUSY, SQLITE_LOCKED
	}
	return false
}
