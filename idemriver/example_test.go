package idemriver_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/idemriver"
	"github.com/idemkit/idem/pgxstore"
)

// snippet:begin args
// ReceiptArgs is the job of a payment's receipt email. Embedding idemriver.Key makes River
// keep one receipt per payment operation, and gives the worker its Message-ID.
type ReceiptArgs struct {
	idemriver.Key
	PaymentID int64 `json:"payment_id"`
}

func (ReceiptArgs) Kind() string { return "payment_receipt" }

// snippet:end args

// The Key of a receipt: the same on every retry, resume and takeover of the operation.
func ExampleKeyFor() {
	eng, err := core.New(core.Config{Store: memstore.New()})
	if err != nil {
		log.Fatal(err)
	}
	_, _, err = eng.Do(context.Background(), "acct_1", "b6f1c4d2", nil, func(ctx context.Context) ([]byte, error) {
		key := idemriver.KeyFor(core.MustOperation(ctx), "receipt")
		fmt.Println(key.Scope, key.DerivedKey)
		fmt.Println(key.MessageID("mail.example.com"))
		fmt.Println(key.IdempotencyKey())
		return nil, nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// acct_1 b6f1c4d2:receipt
	// <211e4f88cbe20f1b8f68a52df2292368@mail.example.com>
	// 47809e466c8e1222:b6f1c4d2:receipt
}

// A phase of a payment handler on pgxstore enqueues the receipt in its own transaction:
// the job exists if and only if the phase commits.
func Example_phase() {
	var riverClient *river.Client[pgx.Tx] // river.NewClient(riverpgxv5.New(pool), config), built once
	createPayment := func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		op := core.MustOperation(ctx)
		// snippet:begin phase
		err := op.Phase(ctx, "finished", func(ctx context.Context) error {
			tx := pgxstore.MustTx(ctx) // the phase's transaction
			var paymentID int64
			err := tx.QueryRow(ctx, `INSERT INTO payments (account, idem_key, amount_cents) VALUES ($1, $2, $3) RETURNING id`,
				op.Scope(), op.Key(), 1250).Scan(&paymentID)
			if err != nil {
				return err
			}
			// Commits with the payment and the recovery point, or not at all.
			_, err = riverClient.InsertTx(ctx, tx, ReceiptArgs{Key: idemriver.KeyFor(op, "receipt"), PaymentID: paymentID}, nil)
			return err
		})
		// snippet:end phase
		if err != nil {
			http.Error(w, "the payment could not be recorded; retry with the same key", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}
	_ = createPayment
}

// The same phase on gormstore: River's riverdatabasesql driver inserts on the *sql.Tx
// under the phase's GORM transaction.
func Example_gormstore() {
	var riverClient *river.Client[*sql.Tx] // river.NewClient(riverdatabasesql.New(sqlDB), config); sqlDB from db.DB()
	var op *core.Operation                 // core.MustOperation(ctx), in a handler
	// snippet:begin gorm-phase
	err := op.Phase(context.Background(), "finished", func(ctx context.Context) error {
		db := gormstore.MustDB(ctx) // the phase's transaction
		payment := map[string]any{"account": op.Scope(), "idem_key": op.Key(), "amount_cents": 1250}
		if err := db.Table("payments").Create(payment).Error; err != nil {
			return err
		}
		tx, err := gormstore.SQLTx(db) // the *sql.Tx under it: do not Commit or Rollback it
		if err != nil {
			return err
		}
		_, err = riverClient.InsertTx(ctx, tx, ReceiptArgs{Key: idemriver.KeyFor(op, "receipt")}, nil)
		return err
	})
	// snippet:end gorm-phase
	_ = err
}

// Mailer sends an email; the Message-ID header identifies it.
type Mailer interface {
	Send(ctx context.Context, messageID, to, subject, body string) error
}

// snippet:begin worker
// ReceiptWorker sends the receipt. River retries a job until its worker returns nil, so
// the email may go out twice (a crash after Send, before River records the job as
// completed): the Message-ID, the same on every attempt, lets the receiver drop the copy.
type ReceiptWorker struct {
	river.WorkerDefaults[ReceiptArgs]
	Mailer Mailer
}

func (w *ReceiptWorker) Work(ctx context.Context, job *river.Job[ReceiptArgs]) error {
	return w.Mailer.Send(ctx, job.Args.MessageID("mail.example.com"), job.Args.Scope,
		"Your receipt", fmt.Sprintf("Payment %d", job.Args.PaymentID))
}

// snippet:end worker

// snippet:begin complete-tx
// LedgerWorker's effect is a write to the application's database: the write and the job's
// completion commit together (river.JobCompleteTx), so it happens exactly once.
type LedgerWorker struct {
	river.WorkerDefaults[ReceiptArgs]
	Pool interface {
		Begin(ctx context.Context) (pgx.Tx, error)
	}
}

func (w *LedgerWorker) Work(ctx context.Context, job *river.Job[ReceiptArgs]) error {
	tx, err := w.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op once committed
	if _, err := tx.Exec(ctx, `INSERT INTO ledger (payment_id) VALUES ($1)`, job.Args.PaymentID); err != nil {
		return err
	}
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// snippet:end complete-tx

// River on the pool pgxstore uses: its tables migrated once, one client per process that
// both inserts (in handlers) and works the jobs.
func Example_client() {
	ctx := context.Background()
	var pool *pgxpool.Pool // pgxpool.New(ctx, os.Getenv("DATABASE_URL")), shared with pgxstore.New(pool)
	var mailer Mailer
	// snippet:begin client
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil { // or River's CLI: river migrate-up
		log.Fatal(err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &ReceiptWorker{Mailer: mailer})
	riverClient, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}},
		Workers: workers,
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := riverClient.Start(ctx); err != nil { // works jobs until riverClient.Stop
		log.Fatal(err)
	}
	// snippet:end client
}
