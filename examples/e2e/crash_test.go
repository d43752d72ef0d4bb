package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCrashRecovery kills a payment right after its charge_created phase committed
// (-crash-after charge_created: exit status 3, no response), restarts the server, and
// retries: while the crashed attempt's lease is live the key answers 409 (and 422 for
// another body); once it has passed, the retry resumes after the recorded phase and
// completes the payment exactly once, with the one provider charge made before the crash.
// A crash right after the claim (-crash-after started) is taken over the same way and
// runs from the start. A crash right after the payment row was written, before its 201
// was recorded (-crash-after payment_written), leaves the row committed when the keys
// are in Redis (rolled back with the key's transaction otherwise): the retry finds it
// and answers with it, and the key still has one payment.
func TestCrashRecovery(t *testing.T) {
	const lease = 2 * time.Second
	eachExample(t, func(t *testing.T, app string, st storage) {
		dir, env := st.setup(t)

		// A crash with the default 60s lease, set by the environment: its key stays in
		// progress for the whole test.
		held, heldKey := newAccount(), newKey()
		s := start(t, app, dir, append(env, "IDEM_CRASH_AFTER=charge_created"))
		crash(t, s, held, heldKey)

		// A crash with a short lease, set by flags.
		acct, key := newAccount(), newKey()
		s = start(t, app, dir, env, "-crash-after", "charge_created", "-lease", lease.String())
		crashed := time.Now()
		crash(t, s, acct, key)

		// A crash right after the claim, before any phase.
		early, earlyKey := newAccount(), newKey()
		s = start(t, app, dir, env, "-crash-after", "started", "-lease", lease.String())
		crash(t, s, early, earlyKey)

		// A crash right after the payment row, before the 201 was recorded.
		late, lateKey := newAccount(), newKey()
		s = start(t, app, dir, env, "-crash-after", "payment_written", "-lease", lease.String())
		lateCrashed := time.Now()
		crash(t, s, late, lateKey)

		s = start(t, app, dir, env, "-lease", lease.String())

		// The held key: in progress, so 409 with Retry-After: 1; another body is 422.
		r := s.post(t, "/v1/payments", held, heldKey, payment)
		requireProblem(t, r, http.StatusConflict)
		if ra := r.Header.Get("Retry-After"); ra != "1" {
			t.Fatalf("Retry-After %q, want 1", ra)
		}
		requireProblem(t, s.post(t, "/v1/payments", held, heldKey, `{"amount_cents":1,"currency":"EUR"}`), http.StatusUnprocessableEntity)

		// The charge_created phase committed before the crash: the provider has the charge;
		// the crash after the claim left none.
		charges := list(t, s.get(t, "/v1/provider/charges", acct), "charges")
		if len(charges) != 1 {
			t.Fatalf("%d provider charges after the crash, want 1", len(charges))
		}
		chargeID := str(t, charges[0], "id")
		if n := len(list(t, s.get(t, "/v1/provider/charges", early), "charges")); n != 0 {
			t.Fatalf("%d provider charges after a crash before any phase, want 0", n)
		}

		done := resume(t, s, acct, key, crashed, lease)
		if got := str(t, done.Body, "charge_id"); got != chargeID {
			t.Fatalf("the payment has charge %s, want %s, made before the crash", got, chargeID)
		}
		requireOneCharge(t, s, acct, key, chargeID, 1250)
		requireReceipt(t, s, st, acct, done)

		earlyDone := resume(t, s, early, earlyKey, crashed, lease)
		requireOneCharge(t, s, early, earlyKey, str(t, earlyDone.Body, "charge_id"), 1250)
		requireReceipt(t, s, st, early, earlyDone)

		// The row written before the crash committed on its own with Redis, and is what
		// the retry answers (same id, same created_at); with a SQL store it rolled back.
		written := list(t, s.get(t, "/v1/payments", late), "payments")
		want := 0
		if st.redis {
			want = 1
		}
		require.Len(t, written, want, "payments written before the crash")
		lateDone := resume(t, s, late, lateKey, lateCrashed, lease)
		requireOneCharge(t, s, late, lateKey, str(t, lateDone.Body, "charge_id"), 1250)
		if st.redis {
			requireSameFields(t, lateDone.Body, written[0])
		}
		requireReceipt(t, s, st, late, lateDone)

		// The held key's account has its one charge and no payment.
		requireOneCharge(t, s, held, heldKey, "", 1250)
		if n := len(list(t, s.get(t, "/v1/payments", held), "payments")); n != 0 {
			t.Fatalf("%d payments for the key still in progress, want 0", n)
		}
		s.shutdown(t)
	})
}

// resume retries a crashed payment until the crashed attempt's lease has passed (409
// before) and requires the 201 that resumes it to be fresh, then replayed, and to be the
// account's one payment.
func resume(t *testing.T, s *server, acct, key string, crashed time.Time, lease time.Duration) *response {
	t.Helper()
	// 20s from when the lease ran out, or from now if the servers started since the crash
	// took longer than the lease (a -race binary on a loaded machine starts in seconds).
	deadline := crashed.Add(lease)
	if now := time.Now(); now.After(deadline) {
		deadline = now
	}
	deadline = deadline.Add(20 * time.Second)
	conflicts := 0
	for {
		if time.Now().After(deadline) {
			t.Fatalf("no 201 within %s of the crash (%d conflicts)", time.Since(crashed).Round(time.Millisecond), conflicts)
		}
		r := s.post(t, "/v1/payments", acct, key, payment)
		switch r.Status {
		case http.StatusConflict:
			requireProblem(t, r, http.StatusConflict)
			if time.Since(crashed) > lease+10*time.Second {
				t.Fatalf("still 409 %s after the crash, with a lease of %s", time.Since(crashed).Round(time.Millisecond), lease)
			}
			conflicts++
			time.Sleep(200 * time.Millisecond)
			continue
		case http.StatusCreated:
		default:
			t.Fatalf("retry after the crash: %s", r)
		}
		t.Logf("resumed %s after the crash, after %d conflicts", time.Since(crashed).Round(time.Millisecond), conflicts)
		requireFresh(t, r) // a resume runs the operation: not a replay
		requireReplay(t, r, s.post(t, "/v1/payments", acct, key, payment))
		payments := list(t, s.get(t, "/v1/payments", acct), "payments")
		if len(payments) != 1 {
			t.Fatalf("%d payments, want 1", len(payments))
		}
		requireSameFields(t, payments[0], r.Body)
		return r
	}
}

// crash sends a payment to a server started with -crash-after: the process must exit
// with status 3 without answering.
func crash(t *testing.T, s *server, acct, key string) {
	t.Helper()
	r, err := s.try(http.MethodPost, "/v1/payments", payment,
		"Content-Type", "application/json", "X-Account-ID", acct, "Idempotency-Key", key)
	if err == nil {
		t.Fatalf("a response from a server told to crash: %s", r)
	}
	if code := s.exitCode(t); code != 3 {
		t.Fatalf("exit status %d, want 3:\n%s", code, s.out.String())
	}
}
