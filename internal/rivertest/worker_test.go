package rivertest

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/idemriver"
)

// mailbox is a receiver that deduplicates by Message-ID, as a mail system can: it counts
// every delivery and keeps one message per Message-ID.
type mailbox struct {
	mu         sync.Mutex
	deliveries map[string]int // Message-ID → deliveries
}

func (m *mailbox) deliver(messageID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.deliveries[messageID]++
}

func (m *mailbox) counts() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := make(map[string]int, len(m.deliveries))
	for id, n := range m.deliveries {
		c[id] = n
	}
	return c
}

// receiptWorker sends the receipt to the mailbox with the Key's Message-ID. Its first
// attempt of each job fails right after the send, as a worker does that crashes before
// River records the job as completed: River runs the job again and the email goes out
// twice, with one Message-ID.
type receiptWorker struct {
	river.WorkerDefaults[receiptArgs]
	mail *mailbox
}

var errAfterSend = errors.New("the worker failed after the send")

func (w *receiptWorker) Work(_ context.Context, job *river.Job[receiptArgs]) error {
	w.mail.deliver(job.Args.MessageID("mail.example.com"))
	if job.Attempt == 1 {
		return errAfterSend
	}
	return nil
}

// auditWorker's effect is a row in the application's database, written in one
// transaction with the job's completion (river.JobCompleteTx). Its first attempt of each
// job writes the row and completes the job, then rolls back and fails: nothing of it
// stays, and River runs the job again.
type auditWorker struct {
	river.WorkerDefaults[auditArgs]
	be *backend
}

func (w *auditWorker) Work(ctx context.Context, job *river.Job[auditArgs]) error {
	insert := `INSERT INTO ` + w.be.table("ledger") + ` (idem_scope, idem_key) VALUES ($1, $2)`
	switch w.be.kind {
	case kindPgx:
		tx, err := w.be.p.pgx.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // a no-op once committed
		if _, err := tx.Exec(ctx, insert, job.Args.Scope, job.Args.Key); err != nil {
			return err
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return err
		}
		if job.Attempt == 1 {
			return errInjected
		}
		return tx.Commit(ctx)
	default:
		sqlDB, err := w.be.p.gorm.DB()
		if err != nil {
			return err
		}
		tx, err := sqlDB.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // a no-op once committed
		if _, err := tx.ExecContext(ctx, insert, job.Args.Scope, job.Args.Key); err != nil {
			return err
		}
		if _, err := river.JobCompleteTx[*riverdatabasesql.Driver](ctx, tx, job); err != nil {
			return err
		}
		if job.Attempt == 1 {
			return errInjected
		}
		return tx.Commit()
	}
}

// now retries a failed job at once.
type now struct{}

func (now) NextRetry(*rivertype.JobRow) time.Time { return time.Now() }

// startWorkers starts a River client that works be's jobs with the mailbox and the
// ledger, on be's driver, until the test ends, and returns its completion events.
func startWorkers(t *testing.T, be *backend, mail *mailbox) <-chan *river.Event {
	t.Helper()
	workers := river.NewWorkers()
	river.AddWorker(workers, &receiptWorker{mail: mail})
	river.AddWorker(workers, &auditWorker{be: be})
	cfg := &river.Config{
		Schema: be.schema, Logger: quiet, Workers: workers, RetryPolicy: now{},
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}},
		FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond,
	}
	ctx := context.Background()
	var (
		subscribe func(...river.EventKind) (<-chan *river.Event, func())
		start     func(context.Context) error
		stop      func(context.Context) error
	)
	switch be.kind {
	case kindPgx:
		c, err := river.NewClient(riverpgxv5.New(be.p.pgx), cfg)
		require.NoError(t, err)
		subscribe, start, stop = c.Subscribe, c.Start, c.Stop
	default:
		sqlDB, err := be.p.gorm.DB()
		require.NoError(t, err)
		c, err := river.NewClient(riverdatabasesql.New(sqlDB), cfg)
		require.NoError(t, err)
		subscribe, start, stop = c.Subscribe, c.Start, c.Stop
	}
	events, cancel := subscribe(river.EventKindJobCompleted)
	require.NoError(t, start(ctx))
	t.Cleanup(func() {
		cancel()
		stopCtx, done := context.WithTimeout(ctx, waitTimeout)
		defer done()
		assert.NoError(t, stop(stopCtx))
	})
	return events
}

// TestWorkersHandTheKeyOn: a payment's receipt and audit jobs, enqueued in its phase, are
// worked once each in the end. The receipt goes out twice (its worker failed after the
// send) under one Message-ID, which the receiver deduplicates by; the audit row, written
// with the job's completion in one transaction, exists once although its first attempt
// had written it and completed the job before rolling back.
func TestWorkersHandTheKeyOn(t *testing.T) {
	eachKind(t, func(t *testing.T, be *backend) {
		_, err := be.p.pgx.Exec(context.Background(), `CREATE TABLE `+be.table("ledger")+` (idem_scope text NOT NULL, idem_key text NOT NULL)`)
		require.NoError(t, err)
		mail := &mailbox{deliveries: map[string]int{}}
		events := startWorkers(t, be, mail)
		base := serve(t, newApp(be, 0, nil))
		account, key := operation()
		r := mustPost(t, base, "/v1/payments", account, key)
		require.Equal(t, http.StatusCreated, r.Status, "%v", r)

		completed := map[string]int{}
		for completed["receipt"] == 0 || completed["audit"] == 0 {
			select {
			case ev := <-events:
				completed[ev.Job.Kind]++
				assert.Equal(t, 2, ev.Job.Attempt, "%s: completed on its second attempt", ev.Job.Kind)
			case <-time.After(waitTimeout):
				t.Fatalf("jobs completed after %v: %v", waitTimeout, completed)
			}
		}
		assert.Equal(t, map[string]int{"receipt": 1, "audit": 1}, completed)

		sent := idemriver.Key{Scope: account, DerivedKey: key + ":receipt"} // idemriver.KeyFor(op, "receipt")
		assert.Equal(t, map[string]int{sent.MessageID("mail.example.com"): 2}, mail.counts(),
			"two deliveries, one Message-ID: the receiver keeps one email")
		var rows int
		require.NoError(t, be.p.pgx.QueryRow(context.Background(), `SELECT count(*) FROM `+be.table("ledger")+
			` WHERE idem_scope = $1 AND idem_key = $2`, account, key+":receipt").Scan(&rows))
		assert.Equal(t, 1, rows, "the audit row, written with the job's completion")
		var states []string
		require.NoError(t, be.p.pgx.QueryRow(context.Background(), `SELECT array_agg(state::text ORDER BY kind) FROM `+be.table("river_job")+
			` WHERE args->>'idem_scope' = $1`, account).Scan(&states))
		assert.Equal(t, []string{"completed", "completed"}, states)
	})
}
