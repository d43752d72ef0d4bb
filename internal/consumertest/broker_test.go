package consumertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/testdb"
)

const (
	defaultNATS = "nats://127.0.0.1:4222"
	startNATS   = "start it with: start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server"
	// msgIDHeader carries the message ID. Not Nats-Msg-Id: JetStream would drop the
	// duplicates this package publishes on purpose (within its duplicate window), and
	// the point is what the consumer does with the duplicates that get through anyway.
	msgIDHeader = "Message-Id"
	// scope is the key space of the messages: one consumer's.
	scope = "orders-consumer"
	// ackWait is the consumer's AckWait: how soon a message delivered and never
	// acknowledged (its consumer crashed) is delivered again.
	ackWait = time.Second
	// waitTimeout bounds every wait for something another process does.
	waitTimeout = 60 * time.Second
)

// natsURL is the server tests use: TEST_NATS_URL or the local default.
func natsURL() string {
	if u := os.Getenv("TEST_NATS_URL"); u != "" {
		return u
	}
	return defaultNATS
}

// connect opens a connection to the broker; the caller closes it.
func connect() (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(natsURL(), nats.Timeout(5*time.Second), nats.MaxReconnects(0))
	if err != nil {
		return nil, nil, fmt.Errorf("NATS at %s is unreachable (%w); %s", natsURL(), err, startNATS)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// queue is one test's stream, subject and durable consumer, deleted at cleanup.
type queue struct {
	Stream, Subject, Durable string
}

// newQueue connects for the test and creates a stream and a durable pull consumer of
// its own, with explicit acks and an AckWait of ackWait.
func newQueue(t *testing.T) (queue, jetstream.JetStream) {
	t.Helper()
	nc, js, err := connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	name := testdb.Name("IDEM")
	q := queue{Stream: name, Subject: name + ".orders", Durable: name + "_apply"}
	ctx := t.Context()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: q.Stream, Subjects: []string{q.Subject}, Storage: jetstream.MemoryStorage})
	require.NoError(t, err, "create stream on NATS at %s; is JetStream on (-js)? %s", natsURL(), startNATS)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, q.Stream); err != nil {
			t.Errorf("delete stream %s: %v", q.Stream, err)
		}
	})
	_, err = js.CreateOrUpdateConsumer(ctx, q.Stream, jetstream.ConsumerConfig{
		Durable: q.Durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: -1,
	})
	require.NoError(t, err)
	return q, js
}

// publishWithDuplicates publishes unique messages, then dups copies of randomly chosen
// ones (same ID, same payload), each at a random place after its original, as a
// producer that retries its publishes does. It returns the IDs in publishing order.
func publishWithDuplicates(t *testing.T, js jetstream.JetStream, q queue, unique, dups int) []string {
	t.Helper()
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 0))
	order := make([]int, unique)
	for i := range order {
		order[i] = i
	}
	for _, d := range rng.Perm(unique)[:dups] {
		at := d + 1 + rng.IntN(len(order)-d) // after the original, which only moves later
		order = append(order[:at], append([]int{d}, order[at:]...)...)
	}
	ids := make([]string, len(order))
	for i, n := range order {
		ids[i] = "msg-" + strconv.Itoa(n)
		m := nats.NewMsg(q.Subject)
		m.Header.Set(msgIDHeader, ids[i])
		m.Data = []byte(fmt.Sprintf(`{"order":%d,"amount":%d}`, n, 100+n))
		_, err := js.PublishMsg(t.Context(), m)
		require.NoError(t, err)
	}
	t.Logf("published %d messages: %d unique, %d duplicates (seed %d)", len(ids), unique, dups, seed)
	return ids
}

// counts are what one consumer did, message by message.
type counts struct {
	Delivered   int64 // deliveries received, redeliveries included
	Redelivered int64 // deliveries of a message the broker had delivered before
	Applied     int64 // Do ran the business write and recorded it: acked
	Duplicated  int64 // Do replayed a recorded outcome, the write did not run: acked
	InProgress  int64 // Do returned ErrInProgress: NAK with a delay
	Reused      int64 // Do returned ErrKeyReused: terminated
	Failed      int64 // any other error: NAK
}

func (c *counts) add(o counts) {
	c.Delivered += o.Delivered
	c.Redelivered += o.Redelivered
	c.Applied += o.Applied
	c.Duplicated += o.Duplicated
	c.InProgress += o.InProgress
	c.Reused += o.Reused
	c.Failed += o.Failed
}

func (c counts) String() string {
	return fmt.Sprintf("delivered %d (redelivered %d), applied %d, duplicated %d (in progress %d, reused %d, failed %d)",
		c.Delivered, c.Redelivered, c.Applied, c.Duplicated, c.InProgress, c.Reused, c.Failed)
}

// consumer applies the messages of a durable JetStream consumer through Engine.Do, the
// way docs/webhooks.md shows: ack once Do returns nil, NAK with a delay on ErrInProgress,
// terminate on ErrKeyReused, NAK on anything else.
type consumer struct {
	eng     *core.Engine
	be      *backend
	cons    jetstream.Consumer
	n       struct{ delivered, redelivered, applied, duplicated, inProgress, reused, failed atomic.Int64 }
	lastErr atomic.Value // the last unexpected error, for the test's failure message
}

func newConsumer(ctx context.Context, js jetstream.JetStream, q queue, be *backend, hooks core.Hooks) (*consumer, error) {
	eng, err := newEngine(be, hooks)
	if err != nil {
		return nil, err
	}
	cons, err := js.Consumer(ctx, q.Stream, q.Durable)
	if err != nil {
		return nil, err
	}
	return &consumer{eng: eng, be: be, cons: cons}, nil
}

func (c *consumer) handle(ctx context.Context, msg jetstream.Msg) error {
	c.n.delivered.Add(1)
	if md, err := msg.Metadata(); err == nil && md.NumDelivered > 1 {
		c.n.redelivered.Add(1)
	}
	id := msg.Headers().Get(msgIDHeader)
	_, replayed, err := c.eng.Do(ctx, scope, id, msg.Data(), func(ctx context.Context) ([]byte, error) {
		return nil, c.be.apply(ctx, id, msg.Data())
	})
	switch {
	case err == nil:
		if replayed {
			c.n.duplicated.Add(1)
		} else {
			c.n.applied.Add(1)
		}
		return msg.DoubleAck(ctx) // the broker confirmed: the message is done
	case errors.Is(err, storage.ErrInProgress):
		c.n.inProgress.Add(1)
		return msg.NakWithDelay(200 * time.Millisecond)
	case errors.Is(err, core.ErrKeyReused):
		c.n.reused.Add(1)
		return msg.Term()
	default:
		c.n.failed.Add(1)
		c.lastErr.Store(err)
		return msg.Nak()
	}
}

// run fetches and handles messages until the durable has nothing left to deliver and
// nothing awaiting an ack (every message acked or terminated), or ctx ends.
func (c *consumer) run(ctx context.Context) error {
	for {
		batch, err := c.cons.Fetch(10, jetstream.FetchMaxWait(300*time.Millisecond))
		if err != nil {
			return fmt.Errorf("fetch: %w", err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			if err := c.handle(ctx, msg); err != nil {
				return fmt.Errorf("answer the broker: %w", err)
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("fetch: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if n > 0 {
			continue
		}
		info, err := c.cons.Info(ctx)
		if err != nil {
			return fmt.Errorf("consumer info: %w", err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			return nil
		}
	}
}

func (c *consumer) counts() counts {
	return counts{Delivered: c.n.delivered.Load(), Redelivered: c.n.redelivered.Load(), Applied: c.n.applied.Load(), Duplicated: c.n.duplicated.Load(),
		InProgress: c.n.inProgress.Load(), Reused: c.n.reused.Load(), Failed: c.n.failed.Load()}
}

// newEngine is the engine every consumer of this package runs: defaults on b's store
// (atomic mode).
func newEngine(b *backend, hooks ...core.Hooks) (*core.Engine, error) {
	cfg := core.Config{Store: b.store}
	if len(hooks) > 0 {
		cfg.Hooks = hooks[0]
	}
	return core.New(cfg)
}
