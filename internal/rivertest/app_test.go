package rivertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/idemriver"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgxstore"
)

// kind is a store with the River driver that shares its transaction.
type kind string

const (
	kindPgx  kind = "pgx"           // pgxstore; River on riverpgxv5, InsertTx on pgxstore.MustTx(ctx)
	kindGorm kind = "gorm-postgres" // gormstore; River on riverdatabasesql, InsertTx on gormstore.SQLTx(gormstore.MustDB(ctx))
)

var kinds = []kind{kindPgx, kindGorm}

const keyTable = "idempotency_keys"

// receiptArgs is a job that must happen once: its args embed idemriver.Key, so River keeps
// one receipt per operation and effect.
type receiptArgs struct {
	idemriver.Key
	Account string `json:"account"`
}

func (receiptArgs) Kind() string { return "receipt" }

// auditArgs is a job with no uniqueness: River inserts every one it is given, so an
// insert that ran twice shows as two rows.
type auditArgs struct {
	Scope string `json:"idem_scope"`
	Key   string `json:"idem_key"`
}

func (auditArgs) Kind() string { return "audit" }

// backend is a store and the River client that inserts in its transaction, on the tables
// of one schema.
type backend struct {
	kind   kind
	schema string
	p      pools
	store  storage.Store
	// insert enqueues args with InsertTx in the store's transaction that ctx carries.
	insert func(ctx context.Context, args river.JobArgs) (*rivertype.JobInsertResult, error)
	// exec and queryRow run SQL (? placeholders) in the store's transaction that ctx carries.
	exec     func(ctx context.Context, query string, args ...any) error
	queryRow func(ctx context.Context, query string, args ...any) interface{ Scan(...any) error }
}

var quiet = slog.New(slog.DiscardHandler)

// connect opens kind's store and an insert-only River client on schema, on p.
func connect(k kind, schema string, p pools) (*backend, error) {
	b := &backend{kind: k, schema: schema, p: p}
	cfg := &river.Config{Schema: schema, Logger: quiet}
	switch k {
	case kindPgx:
		client, err := river.NewClient(riverpgxv5.New(p.pgx), cfg)
		if err != nil {
			return nil, err
		}
		b.store = pgxstore.New(p.pgx, pgxstore.WithTable(schema+"."+keyTable))
		b.insert = func(ctx context.Context, args river.JobArgs) (*rivertype.JobInsertResult, error) {
			return client.InsertTx(ctx, pgxstore.MustTx(ctx), args, nil)
		}
		b.exec = func(ctx context.Context, query string, args ...any) error {
			_, err := pgxstore.MustTx(ctx).Exec(ctx, dollars(query), args...)
			return err
		}
		b.queryRow = func(ctx context.Context, query string, args ...any) interface{ Scan(...any) error } {
			return pgxstore.MustTx(ctx).QueryRow(ctx, dollars(query), args...)
		}
	case kindGorm:
		sqlDB, err := p.gorm.DB()
		if err != nil {
			return nil, err
		}
		client, err := river.NewClient(riverdatabasesql.New(sqlDB), cfg)
		if err != nil {
			return nil, err
		}
		b.store = gormstore.New(p.gorm, gormstore.WithTable(schema+"."+keyTable))
		b.insert = func(ctx context.Context, args river.JobArgs) (*rivertype.JobInsertResult, error) {
			tx, err := gormstore.SQLTx(gormstore.MustDB(ctx))
			if err != nil {
				return nil, err
			}
			return client.InsertTx(ctx, tx, args, nil)
		}
		b.exec = func(ctx context.Context, query string, args ...any) error {
			return gormstore.MustDB(ctx).Exec(query, args...).Error
		}
		b.queryRow = func(ctx context.Context, query string, args ...any) interface{ Scan(...any) error } {
			q := gormstore.MustDB(ctx).Raw(query, args...)
			if q.Error != nil {
				return errRow{q.Error}
			}
			return q.Row()
		}
	default:
		return nil, fmt.Errorf("unknown kind %q", k)
	}
	return b, nil
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// newBackend gives the test a schema of its own with River's tables (rivermigrate), the
// key table and the application's tables, and kind's backend on it.
func newBackend(t testing.TB, k kind) *backend {
	t.Helper()
	p := sharedPools(t)
	_, schema := testdb.PostgresSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	migrator, err := rivermigrate.New(riverpgxv5.New(p.pgx), &rivermigrate.Config{Schema: schema, Logger: quiet})
	if err != nil {
		t.Fatalf("rivermigrate: %v", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		t.Fatalf("rivermigrate: migrate %s: %v", schema, err)
	}
	b, err := connect(k, schema, p)
	if err != nil {
		t.Fatalf("connect %s: %v", k, err)
	}
	switch st := b.store.(type) {
	case *pgxstore.Store:
		err = st.Migrate(ctx)
	case *gormstore.Store:
		err = st.Migrate(ctx)
	}
	if err != nil {
		t.Fatalf("%s: migrate the key table: %v", k, err)
	}
	// No unique constraints: a duplicate must show up as a second row.
	for _, table := range []string{"charges", "payments", "orders"} {
		_, err := p.pgx.Exec(ctx, `CREATE TABLE `+schema+`.`+table+
			` (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, account text NOT NULL, idem_key text NOT NULL)`)
		if err != nil {
			t.Fatalf("create %s: %v", table, err)
		}
	}
	return b
}

// table returns the schema-qualified name of one of the application's tables.
func (b *backend) table(name string) string { return b.schema + "." + name }

// The points of a request at which a test hooks in to fail, panic, block or be killed.
const (
	// atEnqueued: inside the phased route's finished phase, the payment written and both
	// jobs inserted; the phase has not committed.
	atEnqueued = "enqueued"
	// atFinished: the finished phase committed; the response is not recorded.
	atFinished = "finished"
	// atOrderEnqueued: in the atomic route, the order written and both jobs inserted in a
	// phase (a savepoint of the request's transaction); nothing has committed.
	atOrderEnqueued = "order_enqueued"
)

// hook runs at each point of a request. A non-nil error makes the handler answer 500.
type hook func(ctx context.Context, op *core.Operation, at string) error

// app is the application under test: phased payments, atomic orders, each enqueueing a
// receipt (unique) and an audit job (not unique).
type app struct {
	be    *backend
	lease time.Duration
	hook  hook
}

func newApp(be *backend, lease time.Duration, h hook) *app {
	if h == nil {
		h = func(context.Context, *core.Operation, string) error { return nil }
	}
	return &app{be: be, lease: lease, hook: h}
}

const accountHeader = "X-Account"

// enqueue inserts the operation's two jobs for its effect suffix in the store's
// transaction that ctx carries.
func (a *app) enqueue(ctx context.Context, op *core.Operation, suffix string) error {
	if _, err := a.be.insert(ctx, receiptArgs{Key: idemriver.KeyFor(op, suffix), Account: op.Scope()}); err != nil {
		return fmt.Errorf("enqueue the receipt: %w", err)
	}
	if _, err := a.be.insert(ctx, auditArgs{Scope: op.Scope(), Key: op.DerivedKey(suffix)}); err != nil {
		return fmt.Errorf("enqueue the audit job: %w", err)
	}
	return nil
}

// createPayment: phase charged writes a charge row; phase finished writes the payment and
// enqueues the receipt in its transaction; the 201 is read from the payment row in the
// final transaction, recorded with it.
func (a *app) createPayment(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	op := core.MustOperation(ctx)
	account := r.Header.Get(accountHeader)
	err := op.Phase(ctx, "charged", func(ctx context.Context) error {
		return a.be.exec(ctx, `INSERT INTO `+a.be.table("charges")+` (account, idem_key) VALUES (?, ?)`, account, op.Key())
	})
	if failed(w, err) {
		return
	}
	err = op.Phase(ctx, atFinished, func(ctx context.Context) error {
		if err := a.be.exec(ctx, `INSERT INTO `+a.be.table("payments")+` (account, idem_key) VALUES (?, ?)`, account, op.Key()); err != nil {
			return err
		}
		if err := a.enqueue(ctx, op, "receipt"); err != nil {
			return err
		}
		return a.hook(ctx, op, atEnqueued)
	})
	if failed(w, err) || failed(w, a.hook(ctx, op, atFinished)) {
		return
	}
	var id int64
	err = a.be.queryRow(ctx, `SELECT id FROM `+a.be.table("payments")+` WHERE account = ? AND idem_key = ?`, account, op.Key()).Scan(&id)
	if failed(w, err) {
		return
	}
	writeJSON(w, http.StatusCreated, map[string]string{"id": strconv.FormatInt(id, 10)})
}

// orderPhase is the orders route's phase, in which it enqueues.
const orderPhase = "confirmed"

// errPhaseOnly, returned by a hook inside the orders route's phase, fails the phase only:
// the handler goes on without its jobs and answers 201.
var errPhaseOnly = errors.New("the phase failed; the request goes on")

// createOrder: the order in the request's transaction, and its jobs in a phase of it (a
// savepoint in atomic mode), all committed with the recorded 201.
func (a *app) createOrder(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	op := core.MustOperation(ctx)
	account := r.Header.Get(accountHeader)
	err := a.be.exec(ctx, `INSERT INTO `+a.be.table("orders")+` (account, idem_key) VALUES (?, ?)`, account, op.Key())
	if failed(w, err) {
		return
	}
	err = op.Phase(ctx, orderPhase, func(ctx context.Context) error {
		if err := a.enqueue(ctx, op, "confirmation"); err != nil {
			return err
		}
		return a.hook(ctx, op, atOrderEnqueued)
	})
	if !errors.Is(err, errPhaseOnly) && failed(w, err) {
		return
	}
	writeJSON(w, http.StatusCreated, map[string]string{"order": op.Key()})
}

// failed answers 500 when err is not nil (the middleware answers 409 instead when err
// is a lost lease).
func failed(w http.ResponseWriter, err error) bool {
	if err == nil {
		return false
	}
	writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// handler serves the application: payments on a phased engine, orders on an atomic one,
// both on the backend's store; a panic is answered 500, as a framework's recovery does.
func (a *app) handler() http.Handler {
	phased, err := core.New(core.Config{Store: a.be.store, Mode: core.ModePhased, Lease: a.lease})
	if err != nil {
		panic(err)
	}
	atomic, err := core.New(core.Config{Store: a.be.store})
	if err != nil {
		panic(err)
	}
	scope := func(r *http.Request) string { return r.Header.Get(accountHeader) }
	mux := http.NewServeMux()
	mux.Handle("POST /v1/payments", phased.Middleware(scope)(http.HandlerFunc(a.createPayment)))
	mux.Handle("POST /v1/orders", atomic.Middleware(scope)(http.HandlerFunc(a.createOrder)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				writeJSON(w, http.StatusInternalServerError, map[string]string{"error": fmt.Sprint(p)})
			}
		}()
		mux.ServeHTTP(w, r)
	})
}

// tally is what the database holds for one operation (one account, one key).
type tally struct {
	Receipts, Audits int // River jobs of the account, by kind
	Rows             int // payment or order rows of the account
	// The key row: State is "" when there is none.
	State, Point string
}

func (tl tally) String() string {
	return fmt.Sprintf("receipts=%d audits=%d rows=%d key=%q/%q", tl.Receipts, tl.Audits, tl.Rows, tl.State, tl.Point)
}

// count reads account's tally from outside any request; table is "payments" or "orders".
func (b *backend) count(ctx context.Context, table, account, key string) (tally, error) {
	var tl tally
	err := b.p.pgx.QueryRow(ctx, `SELECT count(*) FILTER (WHERE kind = 'receipt'), count(*) FILTER (WHERE kind = 'audit')
		FROM `+b.table("river_job")+` WHERE args->>'idem_scope' = $1`, account).Scan(&tl.Receipts, &tl.Audits)
	if err != nil {
		return tl, fmt.Errorf("river_job: %w", err)
	}
	if err := b.p.pgx.QueryRow(ctx, `SELECT count(*) FROM `+b.table(table)+` WHERE account = $1`, account).Scan(&tl.Rows); err != nil {
		return tl, fmt.Errorf("%s: %w", table, err)
	}
	err = b.p.pgx.QueryRow(ctx, `SELECT state, recovery_point FROM `+b.table(keyTable)+` WHERE scope = $1 AND idem_key = $2`,
		account, key).Scan(&tl.State, &tl.Point)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return tl, fmt.Errorf("key row: %w", err)
	}
	return tl, nil
}

// mustCount is count for the test's goroutine.
func (b *backend) mustCount(t testing.TB, table, account, key string) tally {
	t.Helper()
	tl, err := b.count(context.Background(), table, account, key)
	if err != nil {
		t.Fatalf("%s: count: %v", b.kind, err)
	}
	return tl
}

// once is the tally of an operation that completed once.
func once(point string) tally {
	return tally{Receipts: 1, Audits: 1, Rows: 1, State: string(storage.StateCompleted), Point: point}
}

// takeOver makes the key's lease another worker's, as a takeover does: a fresh fencing
// token, and a lease that has run out, so the next retry takes the key over at once.
func (b *backend) takeOver(t testing.TB, account, key string) {
	t.Helper()
	tag, err := b.p.pgx.Exec(context.Background(), `UPDATE `+b.table(keyTable)+
		` SET lease_token = gen_random_uuid(), locked_until = now() - interval '1 second' WHERE scope = $1 AND idem_key = $2 AND state = 'started'`,
		account, key)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("take the lease of %s/%s over: %v (%d rows)", account, key, err, tag.RowsAffected())
	}
}

// dollars numbers the ? placeholders of query for pgx ($1, $2…).
func dollars(query string) string {
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func newID(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// operation returns a fresh account and key: one operation of its own.
func operation() (account, key string) { return newID("acct_"), newID("key_") }

// reply is an HTTP response, read whole.
type reply struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r *reply) String() string { return fmt.Sprintf("%d %s", r.Status, bytes.TrimSpace(r.Body)) }

// client keeps no connections: a killed child leaves none behind.
var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}

// post sends POST path as account with key.
func post(ctx context.Context, base, path, account, key string) (*reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, strings.NewReader(`{}`))
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

// waitTimeout bounds every wait for something another goroutine or process does.
const waitTimeout = 20 * time.Second

// postUntilDone sends the request until it gets its final answer: a 409 (a live lease or
// a held lock) is retried after a short back-off, as a client following Retry-After does.
func postUntilDone(ctx context.Context, base, path, account, key string) (*reply, error) {
	deadline := time.Now().Add(waitTimeout)
	for {
		r, err := post(ctx, base, path, account, key)
		if err != nil || r.Status != http.StatusConflict {
			return r, err
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("still 409 after %v: %v", waitTimeout, r)
		}
		time.Sleep(50 * time.Millisecond) // the client's back-off while the lease is live
	}
}
