package reliability_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/idemkit/idem/core"
)

// TestStoreOutageAtStart: the application starts while PostgreSQL is unreachable. Keyed
// requests fail closed (503 + Retry-After, the handler never runs, nothing is written)
// until the database comes back; then the same keys succeed, once each.
func TestStoreOutageAtStart(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceConfig{})
	in.proxy.Down()

	for i := range 5 {
		r := in.post("acct", fmt.Sprintf("start-%d", i), "", jsonBody(i))
		mustProblem(t, r, http.StatusServiceUnavailable, core.ProblemStoreUnavailable, true)
	}
	if n := in.calls.Load(); n != 0 {
		t.Fatalf("the handler ran %d times while the store was down", n)
	}
	// A request without a key on a keyed route is still refused before any store call.
	mustProblem(t, in.post("acct", "", "", jsonBody(0)), http.StatusBadRequest, core.ProblemKeyMissing, false)

	in.proxy.Up()
	for i := range 5 {
		key := fmt.Sprintf("start-%d", i)
		rs := in.retryUntilDone("acct", key, "", jsonBody(i), 30)
		if last := rs[len(rs)-1]; last.status != http.StatusCreated || last.replayed() {
			t.Fatalf("%s after the database came up: %v", key, rs)
		}
		if n := d.orders("acct", key); n != 1 {
			t.Fatalf("%s: %d orders", key, n)
		}
	}
	if n := in.calls.Load(); n != 5 {
		t.Fatalf("the handler ran %d times, want 5", n)
	}
}

// TestStoreOutageMidRun: PostgreSQL goes away while the application serves requests and
// comes back. While it is away every keyed request is 503 + Retry-After and its handler
// never runs; once it is back, earlier keys replay and the refused ones run once.
func TestStoreOutageMidRun(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceConfig{poolSize: 4})

	before := make([]reply, 5)
	for i := range before {
		before[i] = in.post("acct", fmt.Sprintf("mid-ok-%d", i), "", jsonBody(i))
		if before[i].status != http.StatusCreated {
			t.Fatalf("before the outage: %v", before[i])
		}
	}
	calls := in.calls.Load()

	in.proxy.Down()
	for i := range 8 {
		// Keys never seen, and keys already completed: the store cannot tell them apart
		// now, so neither runs nor replays.
		key := fmt.Sprintf("mid-down-%d", i)
		if i%2 == 1 {
			key = fmt.Sprintf("mid-ok-%d", i/2)
		}
		r := in.post("acct", key, "", jsonBody(i))
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
			t.Fatalf("%s during the outage: %v, want 503 + Retry-After", key, r)
		}
		if typ := r.problemType(); typ != core.ProblemStoreUnavailable {
			t.Fatalf("%s during the outage: problem %s", key, typ)
		}
	}
	if n := in.calls.Load(); n != calls {
		t.Fatalf("the handler ran %d times during the outage", n-calls)
	}

	in.proxy.Up()
	for i := range before {
		key := fmt.Sprintf("mid-ok-%d", i)
		rs := in.retryUntilDone("acct", key, "", jsonBody(i), 30)
		last := rs[len(rs)-1]
		if last.status != http.StatusCreated || !last.replayed() || !sameBody(last, before[i]) {
			t.Fatalf("%s after the outage: %v, want the replay of %v", key, rs, before[i])
		}
	}
	for i := 0; i < 8; i += 2 {
		key := fmt.Sprintf("mid-down-%d", i)
		rs := in.retryUntilDone("acct", key, "", jsonBody(i), 30)
		if last := rs[len(rs)-1]; last.status != http.StatusCreated || last.replayed() {
			t.Fatalf("%s after the outage: %v", key, rs)
		}
	}
	if n := d.count(`SELECT count(*) FROM orders`); n != 9 {
		t.Fatalf("%d orders, want 9 (5 before, 4 refused during the outage)", n)
	}
	if n := in.calls.Load(); n != calls+4 {
		t.Fatalf("the handler ran %d times after the outage, want 4", n-calls)
	}
}
