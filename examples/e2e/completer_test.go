package e2e

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The completer trials. IDEM_COMPLETER_TRIALS sets how many crashes each server makes on
// each database (default 1).
const (
	completerLoad     = 6 // payments in flight when the server dies, one account each
	completerLease    = time.Second
	completerGrace    = 500 * time.Millisecond
	completerInterval = 250 * time.Millisecond
	// completeWithin bounds, from the restarted server's first log line, the wait for
	// every abandoned payment: the dead attempts' lease, the grace, a pass, and a -race
	// binary on a loaded machine.
	completeWithin = 30 * time.Second
)

// TestCompleterAfterCrash: a server with -completer dies under a load of payments, the
// first to commit its charge_created phase making it exit at once (-crash-after
// charge_created: os.Exit, the other requests cut wherever they were); it is restarted
// and nobody retries. Every payment whose claim committed is finished by the completer:
// each account ends with exactly one provider charge, one payment and (on PostgreSQL)
// its receipt sent, and a client retry afterwards is a replay of what the completer
// recorded. Every other trial the clients' retries race the completer instead, and the
// same holds: one charge, one payment per key, whoever finished it.
func TestCompleterAfterCrash(t *testing.T) {
	trials := 1
	if v := os.Getenv("IDEM_COMPLETER_TRIALS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "IDEM_COMPLETER_TRIALS")
		require.Positive(t, n, "IDEM_COMPLETER_TRIALS")
		trials = n
	}
	completer := []string{"-lease", completerLease.String(), "-completer",
		"-completer-grace", completerGrace.String(), "-completer-interval", completerInterval.String()}
	eachExample(t, func(t *testing.T, app string, st storage) {
		dir, env := st.setup(t)
		var total completerCounts
		for i := range trials {
			race := i%2 == 1
			c := completerTrial(t, app, dir, env, st, completer, race)
			t.Logf("%s/%s trial %d/%d (retries racing: %v): %s", app, st.name, i+1, trials, race, c)
			total.add(c)
			if t.Failed() {
				break
			}
		}
		t.Logf("%s/%s, %d crashes: %s", app, st.name, trials, total)
		require.Positive(t, total.byCompleter, "the completer finished no payment")
	})
}

// completerCounts are what trials saw.
type completerCounts struct {
	keys        int           // payments sent
	finished    int           // of them, finished after the restart (by the completer or a retry)
	byCompleter int           // finished with nobody retrying (or before the racing retry)
	slowest     time.Duration // the longest wait, from the restart, for a payment to finish
}

func (c *completerCounts) add(o completerCounts) {
	c.keys += o.keys
	c.finished += o.finished
	c.byCompleter += o.byCompleter
	c.slowest = max(c.slowest, o.slowest)
}

func (c completerCounts) String() string {
	return fmt.Sprintf("%d payments sent, %d finished after the restart, %d of them by the completer; slowest %s after the restart",
		c.keys, c.finished, c.byCompleter, c.slowest.Round(time.Millisecond))
}

// completerTrial runs one crash and its recovery.
func completerTrial(t *testing.T, app, dir string, env []string, st storage, completer []string, race bool) completerCounts {
	t.Helper()
	accts, keys := make([]string, completerLoad), make([]string, completerLoad)
	for i := range accts {
		accts[i], keys[i] = newAccount(), newKey()
	}
	s := start(t, app, dir, env, append([]string{"-crash-after", "charge_created"}, completer...)...)
	var wg sync.WaitGroup
	for i := range accts {
		wg.Go(func() {
			r, err := s.try(http.MethodPost, "/v1/payments", payment,
				"Content-Type", "application/json", "X-Account-ID", accts[i], "Idempotency-Key", keys[i])
			if err == nil {
				t.Errorf("a payment answered %s by a server that crashes at its first charge", r)
			}
		})
	}
	wg.Wait()
	require.Equal(t, 3, s.exitCode(t), "the server crashes after the first charge_created")

	s = start(t, app, dir, env, completer...)
	restarted := time.Now()
	retried := make([]*response, completerLoad) // the racing retries' 201s
	if race {
		for i := range accts {
			// The retries start around when the completer's grace ends (the dead
			// attempts' lease ended about when the server restarted), spread over most of
			// a second, so some land before its pass, some during, some after.
			at := restarted.Add(completerLease + completerGrace - 500*time.Millisecond + time.Duration(i)*150*time.Millisecond)
			wg.Go(func() {
				time.Sleep(time.Until(at)) // the client's own timing, not synchronisation
				retried[i] = retryUntilDone(t, s, accts[i], keys[i], restarted.Add(completeWithin))
			})
		}
	}

	c := completerCounts{keys: completerLoad}
	done := make([]bool, completerLoad)
	for pending := completerLoad; pending > 0; {
		if time.Since(restarted) > completeWithin {
			break
		}
		for i := range accts {
			if done[i] {
				continue
			}
			// The payments first: a payment read implies its charge committed before it,
			// while a charge read first may be followed by a payment made in between.
			payments := list(t, s.get(t, "/v1/payments", accts[i]), "payments")
			charges := len(list(t, s.get(t, "/v1/provider/charges", accts[i]), "charges"))
			require.LessOrEqual(t, charges, 1, "account %s: charged twice", accts[i])
			require.LessOrEqual(t, len(payments), 1, "account %s: paid twice", accts[i])
			if len(payments) == 1 {
				require.Equal(t, 1, charges, "account %s: a payment without its charge", accts[i])
				done[i], pending = true, pending-1
				c.finished++
				c.slowest = max(c.slowest, time.Since(restarted))
			}
		}
		time.Sleep(100 * time.Millisecond) // polling what the completer does on its own
	}
	wg.Wait()

	for i := range accts {
		if !done[i] { // never claimed (sent after the crash began): nothing to complete
			require.Zero(t, len(list(t, s.get(t, "/v1/provider/charges", accts[i]), "charges")),
				"account %s: a charge whose payment was never finished within %s", accts[i], completeWithin)
			continue
		}
		again := s.post(t, "/v1/payments", accts[i], keys[i], payment)
		requireStatus(t, again, http.StatusCreated)
		if retried[i] == nil || retried[i].Header.Get("Idempotent-Replayed") == "true" {
			c.byCompleter++ // nobody retried, or the retry found the completer's answer
		}
		if retried[i] != nil {
			requireReplay(t, retried[i], again)
		} else if v := again.Header.Get("Idempotent-Replayed"); v != "true" {
			t.Fatalf("account %s: the retry after the completer ran it again: %s", accts[i], again)
		}
		payments := list(t, s.get(t, "/v1/payments", accts[i]), "payments")
		require.Len(t, payments, 1)
		requireSameFields(t, payments[0], again.Body)
		requireOneCharge(t, s, accts[i], keys[i], str(t, again.Body, "charge_id"), 1250)
		requireReceipt(t, s, st, accts[i], again)
	}
	s.shutdown(t)
	return c
}

// retryUntilDone is a client retrying its payment after the restart, racing the
// completer: 409 (the dead attempt's lease, or the completer holding the key) is waited
// out; it returns the 201.
func retryUntilDone(t *testing.T, s *server, acct, key string, deadline time.Time) *response {
	for time.Now().Before(deadline) {
		r, err := s.try(http.MethodPost, "/v1/payments", payment,
			"Content-Type", "application/json", "X-Account-ID", acct, "Idempotency-Key", key)
		switch {
		case err != nil:
			t.Errorf("account %s: retry: %v", acct, err)
			return nil
		case r.Status == http.StatusCreated:
			return r
		case r.Status != http.StatusConflict:
			t.Errorf("account %s: retry: %s", acct, r)
			return nil
		}
		time.Sleep(50 * time.Millisecond) // Retry-After is 1s; retry sooner, to race
	}
	t.Errorf("account %s: the retry still got 409 at the deadline", acct)
	return nil
}
