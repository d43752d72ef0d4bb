package demo

import (
	"net/http"
	"strconv"
	"sync"

	"github.com/idemkit/idem/core"
)

// The webhook receiver, POST /v1/webhooks/provider: a Stripe-style provider POSTs events
// {"id":"evt_…","type":"…","data":{…}} and sends each again until it gets a 2xx. The
// event's id is the idempotency key (core.KeyFromJSON), scoped by the account, so a
// redelivery of a recorded event gets the recorded 200 and records nothing, and one that
// arrives while the first is in flight waits for it or gets 409 + Retry-After.

// FailFirstType is an event type the receiver answers 500 on its first delivery (per
// account and event, while the server runs), so a demo or a test can watch the
// provider's retry being processed once.
const FailFirstType = "demo.fail_first"

// failedFirst remembers the events of FailFirstType already failed once.
var failedFirst sync.Map

// Event is a received webhook event as the API returns it: one per time it was applied
// (a duplicate application would show as a second entry).
type Event struct {
	Seq        string `json:"seq"`
	ID         string `json:"id"`
	Type       string `json:"type"`
	ReceivedAt string `json:"received_at"`
}

// ReceiveEvent handles POST /v1/webhooks/provider behind the middleware: it records the
// event in the key's transaction and answers 200 with it. A body without a string
// "type" is a 400 problem, recorded and replayed like a success.
func (a *App) ReceiveEvent(r *http.Request, account string) Reply {
	ctx := r.Context()
	body, bad := a.readBody(r)
	if bad != nil {
		return *bad
	}
	m, bad := object(body)
	if bad != nil {
		return *bad
	}
	typ, bad := str(m, "type", "the event's type")
	if bad != nil {
		return *bad
	}
	ev := Event{ID: core.MustOperation(ctx).Key(), Type: typ}
	tx, err := a.be.tx(ctx)
	if err != nil {
		return a.fail(ctx, "webhooks: no idempotency transaction", err)
	}
	received := now()
	seq, err := a.be.insertID(ctx, tx, `INSERT INTO webhook_events (account, event_id, type, received_at) VALUES (?, ?, ?, ?)`,
		account, ev.ID, ev.Type, a.be.createdAt(received))
	if err != nil {
		return a.fail(ctx, "webhooks: insert", err)
	}
	if typ == FailFirstType {
		if _, failed := failedFirst.LoadOrStore(account+"\x00"+ev.ID, true); !failed {
			return Internal() // 500: the row rolls back with the key; the provider retries
		}
	}
	ev.Seq, ev.ReceivedAt = strconv.FormatInt(seq, 10), formatTime(received)
	return jsonReply(http.StatusOK, ev)
}

// ListEvents handles GET /v1/webhooks/provider/events: the account's received events,
// oldest first.
func (a *App) ListEvents(r *http.Request, account string) Reply {
	ctx := r.Context()
	rs, err := a.be.db.Query(ctx, `SELECT id, event_id, type, received_at FROM webhook_events WHERE account = ? ORDER BY id`, account)
	if err != nil {
		return a.fail(ctx, "webhooks: list", err)
	}
	defer rs.Close()
	list := struct {
		Events []Event `json:"events"`
	}{Events: []Event{}}
	for rs.Next() {
		var ev Event
		var seq int64
		if err := rs.Scan(&seq, &ev.ID, &ev.Type, stamp{&ev.ReceivedAt}); err != nil {
			return a.fail(ctx, "webhooks: list", err)
		}
		ev.Seq = strconv.FormatInt(seq, 10)
		list.Events = append(list.Events, ev)
	}
	if err := rs.Err(); err != nil {
		return a.fail(ctx, "webhooks: list", err)
	}
	return jsonReply(http.StatusOK, list)
}

// webhookSchema is the events table, by dialect: no unique constraint on event_id, so
// that an event applied twice would show as two rows.
var webhookSchema = map[string][]string{
	kindPostgres: {
		`CREATE TABLE IF NOT EXISTS webhook_events (
			id bigserial PRIMARY KEY,
			account text NOT NULL,
			event_id text NOT NULL,
			type text NOT NULL,
			received_at timestamptz NOT NULL
		)`,
		`CREATE INDEX IF NOT EXISTS webhook_events_account_id ON webhook_events (account, id)`,
	},
	kindSQLite: {
		`CREATE TABLE IF NOT EXISTS webhook_events (
			id INTEGER PRIMARY KEY AUTOINCREMENT,
			account TEXT NOT NULL,
			event_id TEXT NOT NULL,
			type TEXT NOT NULL,
			received_at TEXT NOT NULL
		)`,
		`CREATE INDEX IF NOT EXISTS webhook_events_account_id ON webhook_events (account, id)`,
	},
	kindMySQL: {
		`CREATE TABLE IF NOT EXISTS webhook_events (
			id BIGINT AUTO_INCREMENT PRIMARY KEY,
			account VARBINARY(255) NOT NULL,
			event_id VARBINARY(255) NOT NULL,
			type TEXT NOT NULL,
			received_at DATETIME(3) NOT NULL,
			INDEX webhook_events_account_id (account, id)
		) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
	},
}
