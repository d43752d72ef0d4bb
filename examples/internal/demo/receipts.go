package demo

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/idemriver"
	"github.com/idemkit/idem/pgxstore"
)

// mailDomain is the domain of the receipts' Message-IDs.
const mailDomain = "receipts.demo.example"

// receiptArgs is the River job of a payment's receipt email. idemriver.Key makes River
// keep one receipt per payment operation and gives the email its Message-ID.
type receiptArgs struct {
	idemriver.Key
	PaymentID int64 `json:"payment_id"`
}

func (receiptArgs) Kind() string { return "payment_receipt" }

// receipts sends the payments' receipts through River, on PostgreSQL with the payments'
// keys in the database: the job is inserted in the request's final transaction, with the
// payment row and the recorded 201, so it exists if and only if the payment committed. A
// River worker in the same process sends it to the fake mail server (the mailbox table),
// which counts deliveries by Message-ID. SQLite and MySQL have no receipts (River runs on
// PostgreSQL; docs/phased-operations.md shows a plain outbox table for them), nor does
// -store redis, whose payments have no transaction of the store's to insert in.
type receipts struct {
	// insert enqueues args in the store's transaction that ctx carries.
	insert func(ctx context.Context, args river.JobArgs) error
	start  func(ctx context.Context) error
	stop   func(ctx context.Context) error
}

// mailboxSchema is the fake mail server's table: one row per Message-ID, counting the
// deliveries (a receiver that deduplicates by Message-ID keeps one email).
const mailboxSchema = `CREATE TABLE IF NOT EXISTS mailbox (
	message_id text PRIMARY KEY,
	account text NOT NULL,
	payment_id bigint NOT NULL,
	deliveries integer NOT NULL
)`

// openReceipts migrates River's tables and the mailbox, and builds the River client on
// the backend's driver; nil when the backend has no receipts.
func openReceipts(ctx context.Context, be *backend, log *slog.Logger) (*receipts, error) {
	if be.dialect != kindPostgres || !be.paymentsInTx {
		return nil, nil
	}
	if err := be.db.Exec(ctx, mailboxSchema); err != nil {
		return nil, fmt.Errorf("create the mailbox: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &receiptWorker{db: be.db})
	cfg := &river.Config{
		Logger:  log,
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}},
		Workers: workers,
	}
	r := &receipts{}
	switch {
	case be.pool != nil:
		if err := migrateRiver(ctx, riverpgxv5.New(be.pool)); err != nil {
			return nil, err
		}
		client, err := river.NewClient(riverpgxv5.New(be.pool), cfg)
		if err != nil {
			return nil, err
		}
		r.start, r.stop = client.Start, client.Stop
		r.insert = func(ctx context.Context, args river.JobArgs) error {
			_, err := client.InsertTx(ctx, pgxstore.MustTx(ctx), args, nil)
			return err
		}
	default:
		sqlDB, err := be.gorm.DB()
		if err != nil {
			return nil, err
		}
		if err := migrateRiver(ctx, riverdatabasesql.New(sqlDB)); err != nil {
			return nil, err
		}
		client, err := river.NewClient(riverdatabasesql.New(sqlDB), cfg)
		if err != nil {
			return nil, err
		}
		r.start, r.stop = client.Start, client.Stop
		r.insert = func(ctx context.Context, args river.JobArgs) error {
			tx, err := gormstore.SQLTx(gormstore.MustDB(ctx)) // the *sql.Tx under GORM's transaction
			if err != nil {
				return err
			}
			_, err = client.InsertTx(ctx, tx, args, nil)
			return err
		}
	}
	return r, nil
}

// migrateRiver runs River's migrations up (River's own CLI, river migrate-up, does the same).
func migrateRiver[TTx any](ctx context.Context, driver riverdriver.Driver[TTx]) error {
	m, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fmt.Errorf("River's migrations: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("River's migrations: %w", err)
	}
	return nil
}

// run starts the worker; it works the receipts, those a crashed process left included,
// until close.
func (r *receipts) run(ctx context.Context) error {
	if r == nil {
		return nil
	}
	if err := r.start(ctx); err != nil {
		return fmt.Errorf("start River: %w", err)
	}
	return nil
}

// close stops the worker, letting a receipt being sent finish (at most receiptsStopTimeout).
func (r *receipts) close(log *slog.Logger) {
	if r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), receiptsStopTimeout)
	defer cancel()
	if err := r.stop(ctx); err != nil {
		log.Warn("receipts: stop River", "error", err)
	}
}

// receiptsStopTimeout bounds the wait for the receipts being sent when the App closes.
const receiptsStopTimeout = 10 * time.Second

// enqueue inserts payment p's receipt in the store's transaction that ctx carries (the
// request's final one). It does nothing without receipts.
func (r *receipts) enqueue(ctx context.Context, op *core.Operation, p Payment) error {
	if r == nil {
		return nil
	}
	id, _ := parseID(p.ID)
	if err := r.insert(ctx, receiptArgs{Key: idemriver.KeyFor(op, "receipt"), PaymentID: id}); err != nil {
		return fmt.Errorf("enqueue the receipt: %w", err)
	}
	return nil
}

// receiptWorker "sends" a receipt: a delivery to the mailbox under the job's Message-ID.
// River runs a job until it returns nil, so a crash after the delivery and before River
// records the job as completed delivers it again, under the same Message-ID: the mailbox
// then counts 2 deliveries of one email.
type receiptWorker struct {
	river.WorkerDefaults[receiptArgs]
	db querier
}

func (w *receiptWorker) Work(ctx context.Context, job *river.Job[receiptArgs]) error {
	return w.db.Exec(ctx, `INSERT INTO mailbox AS m (message_id, account, payment_id, deliveries) VALUES (?, ?, ?, 1)
		ON CONFLICT (message_id) DO UPDATE SET deliveries = m.deliveries + 1`,
		job.Args.MessageID(mailDomain), job.Args.Scope, job.Args.PaymentID)
}

// receiptOf says whether account's payment id got its receipt: "sent" once the mailbox
// has it, "queued" before; "" without receipts.
func (a *App) receiptOf(ctx context.Context, account string, id int64) (string, error) {
	if a.receipts == nil {
		return "", nil
	}
	var n int
	if err := a.be.db.QueryRow(ctx, `SELECT count(*) FROM mailbox WHERE account = ? AND payment_id = ?`, account, id).Scan(&n); err != nil {
		return "", err
	}
	if n == 0 {
		return "queued", nil
	}
	return "sent", nil
}
