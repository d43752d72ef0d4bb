package consumertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgxstore"
)

// docs/webhooks.md's NATS JetStream consumer, run as a test: the regions between
// "snippet" markers are the document's text (internal/doccheck compares them).

// snippet:begin order
// Order is the message's payload, as JSON.
type Order struct {
	Item   string `json:"item"`
	Amount int    `json:"amount"`
}

// snippet:end order

// snippet:begin stream
// orderQueue names what the consumer works with. In an application these are constants
// ({Stream: "ORDERS", Subject: "orders.created", DeadStream: "ORDERS_DEAD",
// DeadSubject: "orders.dead", Durable: "apply-orders"}); each test gets its own.
type orderQueue struct {
	Stream, Subject, DeadStream, DeadSubject, Durable string
}

// maxDeliver bounds how often JetStream delivers one message; the consumer dead-letters
// the message on its last delivery instead of naking it.
const maxDeliver = 5

// createOrderStreams creates the orders stream, the stream that keeps the messages the
// consumer gives up on, and the durable consumer that applies the orders.
func createOrderStreams(ctx context.Context, js jetstream.JetStream, q orderQueue) (jetstream.Consumer, error) {
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:     q.Stream,
		Subjects: []string{q.Subject},
		// The window in which a publish whose Nats-Msg-Id the stream has seen is dropped
		// (2 minutes unless set). Do covers what comes later: redeliveries, late re-publishes.
		Duplicates: 2 * time.Minute,
	})
	if err != nil {
		return nil, err
	}
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: q.DeadStream, Subjects: []string{q.DeadSubject}})
	if err != nil {
		return nil, err
	}
	return js.CreateOrUpdateConsumer(ctx, q.Stream, jetstream.ConsumerConfig{
		Durable:    q.Durable,
		AckPolicy:  jetstream.AckExplicitPolicy,
		AckWait:    30 * time.Second, // longer than Do takes, or a slow message is delivered twice at once
		MaxDeliver: maxDeliver,
	})
}

// snippet:end stream

// snippet:begin publish
// publishOrder publishes an order under the producer's ID for it, the same on every
// retry of the publish. The PubAck says whether the stream kept it: Duplicate is true
// when the stream had already stored that ID within its window and dropped this copy.
func publishOrder(ctx context.Context, js jetstream.JetStream, subject, orderID string, o Order) (*jetstream.PubAck, error) {
	data, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	return js.Publish(ctx, subject, data, jetstream.WithMsgID(orderID)) // sets the Nats-Msg-Id header
}

// snippet:end publish

// snippet:begin consumer
// errBadOrder marks a message that can never apply (its payload does not decode).
var errBadOrder = errors.New("bad order")

// orderConsumer applies each order message once through eng.Do (atomic mode on
// pgxstore: the order row commits with the message's record, or neither does).
type orderConsumer struct {
	eng         *core.Engine
	js          jetstream.JetStream
	deadSubject string
	retryDelay  time.Duration // how long a message that failed waits for its redelivery
}

func (c *orderConsumer) handle(ctx context.Context, msg jetstream.Msg) {
	id := msg.Headers().Get(jetstream.MsgIDHeader) // the producer's ID, set by jetstream.WithMsgID
	_, _, err := c.eng.Do(ctx, "orders", id, msg.Data(), func(ctx context.Context) ([]byte, error) {
		var o Order
		if err := json.Unmarshal(msg.Data(), &o); err != nil {
			return nil, fmt.Errorf("%w: %w", errBadOrder, err)
		}
		_, err := pgxstore.MustTx(ctx).Exec(ctx,
			`INSERT INTO orders (message_id, item, amount) VALUES ($1, $2, $3)`, id, o.Item, o.Amount)
		return nil, err
	})
	switch {
	case err == nil:
		_ = msg.DoubleAck(ctx) // applied now, or before (a redelivery): done. A lost ack is a redelivery Do answers.
	case errors.Is(err, core.ErrInvalidKey), errors.Is(err, core.ErrEmptyScope), errors.Is(err, core.ErrInvalidScope),
		errors.Is(err, core.ErrKeyReused), errors.Is(err, errBadOrder):
		// No usable ID (a producer bug), an ID applied before with another payload, or a
		// payload that fails the same way on every delivery: it can never succeed.
		c.deadLetter(ctx, msg, err)
	case errors.Is(err, storage.ErrInProgress):
		_ = msg.NakWithDelay(time.Second) // another consumer is applying it right now
	case lastDelivery(msg):
		c.deadLetter(ctx, msg, err) // failed on every delivery: a poison message, or an outage longer than the retries
	default:
		_ = msg.NakWithDelay(c.retryDelay) // fn or the store failed; nothing committed: try again
	}
}

// lastDelivery reports whether JetStream will not deliver msg again after this delivery.
func lastDelivery(msg jetstream.Msg) bool {
	md, err := msg.Metadata()
	return err == nil && md.NumDelivered >= maxDeliver
}

// deadLetter keeps msg on the dead-letter stream, with its ID and the reason, for a person
// to look at (and republish once fixed), then stops its redelivery. If the publish fails
// it naks instead: the message stays in the orders stream (past MaxDeliver JetStream
// delivers it no more and names it in its max-deliveries advisory), never dropped.
func (c *orderConsumer) deadLetter(ctx context.Context, msg jetstream.Msg, reason error) {
	dead := nats.NewMsg(c.deadSubject)
	dead.Data = msg.Data()
	for k, v := range msg.Headers() {
		if k != jetstream.MsgIDHeader { // the dead-letter stream keeps every copy; it must not dedupe them
			dead.Header[k] = v
		}
	}
	dead.Header.Set("Dead-Msg-Id", msg.Headers().Get(jetstream.MsgIDHeader))
	dead.Header.Set("Dead-Reason", reason.Error())
	if md, err := msg.Metadata(); err == nil {
		dead.Header.Set("Dead-Deliveries", strconv.FormatUint(md.NumDelivered, 10))
	}
	if _, err := c.js.PublishMsg(ctx, dead); err != nil {
		_ = msg.NakWithDelay(c.retryDelay)
		return
	}
	_ = msg.Term() // (TermWithReason is ignored by servers before 2.10.4: the message would come back)
}

// snippet:end consumer

// TestTheDocsConsumer runs docs/webhooks.md's consumer on NATS JetStream and pgxstore:
//
//   - an order published twice under one Nats-Msg-Id is dropped by JetStream at publish
//     time (the first layer), and applied once;
//   - an order whose row committed while its ack was lost (applied through Do before it
//     reaches this consumer) is acknowledged without a second row (the second layer);
//   - a message without Nats-Msg-Id (ErrInvalidKey) and one whose payload does not decode
//     are dead-lettered at their first delivery;
//   - an order the database refuses on every delivery (a poison message) is delivered
//     maxDeliver times, then dead-lettered;
//
// and at the end nothing is pending or awaiting an ack.
func TestTheDocsConsumer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	nc, js, err := connect()
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	name := testdb.Name("DOCS")
	q := orderQueue{Stream: name, Subject: name + ".created", DeadStream: name + "_DEAD", DeadSubject: name + ".dead", Durable: name + "_apply"}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, s := range []string{q.Stream, q.DeadStream} {
			if err := js.DeleteStream(ctx, s); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				t.Errorf("delete stream %s: %v", s, err)
			}
		}
	})
	cons, err := createOrderStreams(ctx, js, q)
	require.NoError(t, err, "NATS at %s: is JetStream on (-js)? %s", natsURL(), startNATS)

	db, _ := setup(t, kindPgx) // a schema of the test's own
	pool, err := pgxpool.New(ctx, db.DSN)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store := pgxstore.New(pool)
	require.NoError(t, store.Migrate(ctx))
	_, err = pool.Exec(ctx, `CREATE TABLE orders (message_id text NOT NULL, item text NOT NULL, amount int NOT NULL CHECK (amount > 0))`)
	require.NoError(t, err)
	eng, err := core.New(core.Config{Store: store})
	require.NoError(t, err)

	// The first layer: JetStream drops the second publish of order-1.
	ack, err := publishOrder(ctx, js, q.Subject, "order-1", Order{Item: "book", Amount: 1})
	require.NoError(t, err)
	assert.False(t, ack.Duplicate, "the first publish is stored")
	ack, err = publishOrder(ctx, js, q.Subject, "order-1", Order{Item: "book", Amount: 1})
	require.NoError(t, err)
	assert.True(t, ack.Duplicate, "JetStream dropped the re-publish within its window")
	_, err = publishOrder(ctx, js, q.Subject, "order-2", Order{Item: "pen", Amount: 2})
	require.NoError(t, err)
	// The second layer: order-3 was applied by a consumer that committed and never acked.
	applied := []byte(`{"item":"lamp","amount":3}`)
	_, _, err = eng.Do(ctx, "orders", "order-3", applied, func(ctx context.Context) ([]byte, error) {
		_, err := pgxstore.MustTx(ctx).Exec(ctx, `INSERT INTO orders (message_id, item, amount) VALUES ('order-3', 'lamp', 3)`)
		return nil, err
	})
	require.NoError(t, err)
	_, err = js.Publish(ctx, q.Subject, applied, jetstream.WithMsgID("order-3"))
	require.NoError(t, err)
	// Dead letters: no ID, an undecodable payload, and a poison order (amount 0 breaks the CHECK).
	_, err = js.Publish(ctx, q.Subject, []byte(`{"item":"no id","amount":4}`))
	require.NoError(t, err)
	_, err = js.Publish(ctx, q.Subject, []byte(`{"item":`), jetstream.WithMsgID("order-bad-json"))
	require.NoError(t, err)
	_, err = publishOrder(ctx, js, q.Subject, "order-poison", Order{Item: "free", Amount: 0})
	require.NoError(t, err)

	// snippet:begin run
	c := &orderConsumer{eng: eng, js: js, deadSubject: q.DeadSubject, retryDelay: 10 * time.Millisecond}
	cc, err := cons.Consume(func(msg jetstream.Msg) { c.handle(ctx, msg) })
	// snippet:end run
	require.NoError(t, err)
	awaitSettled(t, js, q)
	cc.Drain()
	<-cc.Closed()

	rows, err := pool.Query(ctx, `SELECT message_id, count(*) FROM orders GROUP BY message_id ORDER BY message_id`)
	require.NoError(t, err)
	got := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		require.NoError(t, rows.Scan(&id, &n))
		got[id] = n
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, map[string]int{"order-1": 1, "order-2": 1, "order-3": 1}, got, "each order applied once")

	dead := deadLetters(t, js, q)
	assert.Len(t, dead, 3)
	assert.Equal(t, strconv.Itoa(maxDeliver), dead["order-poison"].deliveries, "the poison order was delivered maxDeliver times")
	assert.Contains(t, dead["order-poison"].reason, "check", "the database's refusal is the reason")
	assert.Equal(t, "1", dead["order-bad-json"].deliveries, "an undecodable order is dead-lettered at once")
	assert.Contains(t, dead["order-bad-json"].reason, errBadOrder.Error())
	assert.Equal(t, "1", dead[""].deliveries, "a message without an ID is dead-lettered at once")
	assert.Contains(t, dead[""].reason, core.ErrInvalidKey.Error())
	assert.Equal(t, `{"item":"free","amount":0}`, dead["order-poison"].data, "the dead letter keeps the payload")
}

// awaitSettled waits until the durable has delivered every message and has none awaiting
// an ack, and the dead-letter stream holds the three messages the test dead-letters. It
// asks the broker again every 20ms, bounded by waitTimeout.
func awaitSettled(t *testing.T, js jetstream.JetStream, q orderQueue) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	last := "no answer from the broker yet"
	for {
		settled, status, err := settledOnce(ctx, js, q)
		if err == nil && settled {
			return
		}
		if err != nil {
			status = err.Error()
		}
		if status != "" {
			last = status
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the consumer did not settle within %s: %s", waitTimeout, last)
		case <-tick.C:
		}
	}
}

// settledOnce asks the broker once whether the durable is done and the dead letters are in.
func settledOnce(ctx context.Context, js jetstream.JetStream, q orderQueue) (bool, string, error) {
	cons, err := js.Consumer(ctx, q.Stream, q.Durable)
	if err != nil {
		return false, "", err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return false, "", err
	}
	stream, err := js.Stream(ctx, q.DeadStream)
	if err != nil {
		return false, "", err
	}
	dead, err := stream.Info(ctx)
	if err != nil {
		return false, "", err
	}
	status := fmt.Sprintf("%d pending, %d awaiting an ack, %d redelivered, %d dead letters",
		info.NumPending, info.NumAckPending, info.NumRedelivered, dead.State.Msgs)
	return info.NumPending == 0 && info.NumAckPending == 0 && dead.State.Msgs == 3, status, nil
}

// deadLetter is one message of the dead-letter stream.
type deadLetter struct{ reason, deliveries, data string }

// deadLetters reads the dead-letter stream, by the ID of each message.
func deadLetters(t *testing.T, js jetstream.JetStream, q orderQueue) map[string]deadLetter {
	t.Helper()
	ctx := t.Context()
	stream, err := js.Stream(ctx, q.DeadStream)
	require.NoError(t, err)
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	out := map[string]deadLetter{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		require.NoError(t, err)
		assert.Empty(t, m.Header.Get(jetstream.MsgIDHeader), "a dead letter is not deduplicated by its ID")
		out[m.Header.Get("Dead-Msg-Id")] = deadLetter{reason: strings.ToLower(m.Header.Get("Dead-Reason")),
			deliveries: m.Header.Get("Dead-Deliveries"), data: string(m.Data)}
	}
	return out
}
