package consumertest

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The broker tests: a JetStream stream with a durable pull consumer of its own, and
// consumers that apply each message through Engine.Do on a real store in atomic mode (the
// business row and the message's record commit together). Each test publishes, consumes
// until the durable has nothing left, then checks what committed and what the broker
// says was acknowledged.

const (
	unique     = 1000
	duplicates = 300 // 30% of unique
)

// requireAllAcked checks that the durable delivered every one of published messages and
// has none awaiting an ack: each was acknowledged (or terminated, which the caller checks
// did not happen).
func requireAllAcked(t *testing.T, js jetstream.JetStream, q queue, published int) *jetstream.ConsumerInfo {
	t.Helper()
	cons, err := js.Consumer(t.Context(), q.Stream, q.Durable)
	require.NoError(t, err)
	info, err := cons.Info(t.Context())
	require.NoError(t, err)
	assert.Zero(t, info.NumPending, "messages never delivered")
	assert.Zero(t, info.NumAckPending, "messages delivered and not acknowledged")
	assert.Equal(t, uint64(published), info.AckFloor.Stream, "the ack floor is the last message")
	return info
}

func requireRows(t *testing.T, b *backend, want int) {
	t.Helper()
	rows, distinct, err := b.count(t.Context())
	require.NoError(t, err)
	assert.Equal(t, want, distinct, "messages applied")
	assert.Equal(t, want, rows, "business rows: a message applied twice shows as two")
}

func forEachBackend(t *testing.T, test func(t *testing.T, kind string)) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			test(t, kind)
		})
	}
}

// TestDuplicatesAreAppliedOnce: 1,000 messages and 300 duplicates of them published, one
// consumer: exactly 1,000 business rows, every delivery acknowledged.
func TestDuplicatesAreAppliedOnce(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, kind string) {
		q, js := newQueue(t)
		_, b := setup(t, kind)
		ids := publishWithDuplicates(t, js, q, unique, duplicates)

		c, err := newConsumer(t.Context(), js, q, b, nil)
		require.NoError(t, err)
		require.NoError(t, c.run(t.Context()))
		n := c.counts()
		t.Logf("%s, one consumer: %v", kind, n)

		requireRows(t, b, unique)
		requireAllAcked(t, js, q, len(ids))
		assert.Equal(t, int64(unique), n.Applied)
		assert.GreaterOrEqual(t, n.Duplicated, int64(duplicates), "every published duplicate was recognised")
		assert.Equal(t, n.Delivered, n.Applied+n.Duplicated+n.InProgress, "every delivery acked or retried")
		assert.Zero(t, n.Reused+n.Failed, "last error: %v", c.lastErr.Load())
		assert.Equal(t, int64(len(ids)), n.Delivered-n.Redelivered)
	})
}

// TestTwoConsumerProcessesShareADurable: the same 1,300 messages consumed by two
// processes pulling from one durable consumer, each with its own connection, engine and
// pool: still 1,000 rows, every message acknowledged.
func TestTwoConsumerProcessesShareADurable(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, kind string) {
		q, js := newQueue(t)
		s, b := setup(t, kind)
		ids := publishWithDuplicates(t, js, q, unique, duplicates)

		children := []*child{startChild(t, s, q, 0), startChild(t, s, q, 0)}
		var total counts
		for i, c := range children {
			code, n := c.wait(t)
			require.Zero(t, code)
			t.Logf("%s, consumer process %d: %v", kind, i+1, n)
			total.add(n)
		}
		t.Logf("%s, two consumer processes: %v", kind, total)

		requireRows(t, b, unique)
		requireAllAcked(t, js, q, len(ids))
		assert.Equal(t, int64(unique), total.Applied)
		assert.GreaterOrEqual(t, total.Duplicated, int64(duplicates))
		assert.Zero(t, total.Reused+total.Failed)
	})
}

// TestCrashAfterCommitBeforeAck: a consumer process exits right after a message's
// business write committed, before it acknowledged the message. The broker delivers it
// again to the next consumer, which acknowledges it without applying it a second time.
// CONSUMERTEST_CRASH_TRIALS sets how many crashes each store gets (default 1).
func TestCrashAfterCommitBeforeAck(t *testing.T) {
	t.Parallel()
	trials := 1
	if v := os.Getenv("CONSUMERTEST_CRASH_TRIALS"); v != "" {
		var err error
		trials, err = strconv.Atoi(v)
		require.NoError(t, err, "CONSUMERTEST_CRASH_TRIALS")
	}
	const messages = 20
	forEachBackend(t, func(t *testing.T, kind string) {
		for trial := range trials {
			q, js := newQueue(t)
			s, b := setup(t, kind)
			ids := publishWithDuplicates(t, js, q, messages, 0)
			crashAfter := 1 + rand.IntN(messages)
			crashed := ids[crashAfter-1] // one consumer handles them in order

			code, _ := startChild(t, s, q, crashAfter).wait(t)
			require.Equal(t, crashStatus, code, "the child was to crash after committing %s", crashed)
			applied, err := b.rowsOf(t.Context(), crashed)
			require.NoError(t, err)
			require.Equal(t, 1, applied, "the crashed consumer's write of %s committed", crashed)

			c, err := newConsumer(t.Context(), js, q, b, nil)
			require.NoError(t, err)
			require.NoError(t, c.run(t.Context()))
			n := c.counts()
			t.Logf("%s, crash trial %d: the child committed %d messages and crashed before acking %s; the next consumer: %v",
				kind, trial+1, crashAfter, crashed, n)

			requireRows(t, b, messages)
			requireAllAcked(t, js, q, messages)
			applied, err = b.rowsOf(t.Context(), crashed)
			require.NoError(t, err)
			assert.Equal(t, 1, applied, "%s applied once", crashed)
			assert.GreaterOrEqual(t, n.Redelivered, int64(1), "the unacknowledged message was delivered again")
			assert.Equal(t, int64(messages-crashAfter), n.Applied, "the messages the child never got to")
			// At least once, not exactly: under load a delivery can outlast the 1s AckWait
			// and come again, and every such redelivery of an applied message is a replay too.
			// That the crashed message was not applied again is the row count above and
			// Applied: the new consumer applied only the messages the child never got to.
			assert.GreaterOrEqual(t, n.Duplicated, int64(1), "the committed, unacknowledged message: acked, not applied again")
			assert.Equal(t, n.Delivered, n.Applied+n.Duplicated+n.InProgress, "every delivery acked or retried")
			assert.Zero(t, n.Reused+n.Failed)
		}
	})
}

// TestDoRollsBackTheBusinessWriteOnFailure: in atomic mode fn's write commits with the
// message's record or not at all, so a failed attempt leaves nothing and the redelivery
// applies the message once.
func TestDoRollsBackTheBusinessWriteOnFailure(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, kind string) {
		_, b := setup(t, kind)
		c := &consumer{be: b}
		eng, err := newEngine(b)
		require.NoError(t, err)
		c.eng = eng
		boom := assert.AnError
		_, _, err = eng.Do(t.Context(), scope, "m1", []byte("p"), func(ctx context.Context) ([]byte, error) {
			require.NoError(t, b.apply(ctx, "m1", []byte("p")))
			return nil, boom
		})
		require.ErrorIs(t, err, boom)
		requireRows(t, b, 0)

		for range 2 {
			_, _, err = eng.Do(t.Context(), scope, "m1", []byte("p"), func(ctx context.Context) ([]byte, error) {
				return []byte("ok"), b.apply(ctx, "m1", []byte("p"))
			})
			require.NoError(t, err)
		}
		requireRows(t, b, 1)
	})
}
