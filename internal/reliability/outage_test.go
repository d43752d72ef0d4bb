package reliability_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
		if typ := r.problemType(); typ != core.DefaultProblemBase+string(core.ProblemStoreUnavailable) {
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

// TestClientHangsUp: the client goes away while its handler runs. The server cancels
// the request's context; the engine rolls back (no key, no order) instead of recording a
// response nobody received, and the client's retry with the same key runs it once.
func TestClientHangsUp(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceConfig{direct: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var hungUp atomic.Bool
	in.setHooks(hooks{afterWrite: func(r *http.Request) int {
		if core.MustOperation(r.Context()).Key() != "hang-up" || hungUp.Swap(true) {
			return 0
		}
		cancel() // the client hangs up
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
		return 0
	}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, in.srv.URL+"/orders?", strings.NewReader(jsonBody(1)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Account", "acct")
	req.Header.Set("Idempotency-Key", "hang-up")
	if r := in.do(req); r.err == nil {
		t.Fatalf("the client hung up but got %v", r)
	}
	// The server finishes the request on its own time: wait until its key is released.
	deadline := time.Now().Add(10 * time.Second)
	for d.count(`SELECT count(*) FROM idempotency_keys`) != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if _, ok := d.key("acct", "hang-up"); ok || d.orders("acct", "hang-up") != 0 {
		t.Fatal("a request whose client hung up left its key or its order")
	}
	r := in.post("acct", "hang-up", "", jsonBody(1))
	if r.status != http.StatusCreated || r.replayed() || d.orders("acct", "hang-up") != 1 {
		t.Fatalf("retry: %v", r)
	}
}
