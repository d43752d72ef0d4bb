//go:build idem_knownbugs

// Tests for bugs found by this package and not yet fixed (see the report of issue 9):
// they fail until the fix lands. Run them with
//
//	go test -race -tags idem_knownbugs -run 'Bounded' -v ./internal/reliability/
//
// and drop the build tag once they pass.

package reliability_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/core"
)

// unbounded is how long a test waits before calling an answer unbounded: far beyond the
// lock wait (2s) plus any sane network margin.
const unbounded = 30 * time.Second

// TestPausedDatabaseDuringCommitIsBounded (BUG 1): the database stops answering just as
// the store sends the completion and COMMIT. The engine records the outcome with
// context.WithoutCancel(r.Context()), which drops the request's deadline too, and
// pgxstore's Complete adds none: the request hangs for as long as the database is paused.
// Want: a bounded 503 + Retry-After (the commit's outcome is unknown; the retry replays
// or re-runs it), and one order after the retry.
func TestPausedDatabaseDuringCommitIsBounded(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceConfig{deadline: time.Second})
	in.tracer.arm("stall-commit", completeBatch, false, in.proxy.Stall)
	ch := make(chan reply, 1)
	go func() { ch <- in.post("acct", "stall-commit", "", jsonBody(1)) }()
	r, ok := waitReply(ch, unbounded)
	in.proxy.Resume()
	if !ok {
		t.Errorf("no answer after %v while the database was paused during COMMIT: unbounded (then: %v)", unbounded, <-ch)
	} else {
		mustProblem(t, r, http.StatusServiceUnavailable, core.ProblemNotRecorded, true)
	}
	rs := in.retryUntilDone("acct", "stall-commit", "", jsonBody(1), 30)
	if last := rs[len(rs)-1]; last.status != http.StatusCreated {
		t.Fatalf("after the database came back: %v", rs)
	}
	if n := d.orders("acct", "stall-commit"); n != 1 {
		t.Fatalf("%d orders, want 1", n)
	}
}

// TestPausedDatabaseWithoutDeadlineIsBounded (BUG 2): the database stops answering and the
// request has no deadline of its own (net/http gives none by default). The claim's lock
// wait is enforced by the server (lock_timeout), which never sees the statement, and
// pgxstore sets no deadline of its own: the claim waits for ever and the goroutines pile
// up. Want: 503 + Retry-After once the lock wait (plus a margin) has passed, the handler
// not run.
func TestPausedDatabaseWithoutDeadlineIsBounded(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceConfig{})
	if r := in.post("acct", "before", "", jsonBody(1)); r.status != http.StatusCreated {
		t.Fatalf("before the pause: %v", r)
	}
	in.proxy.Stall()
	ch := make(chan reply, 1)
	go func() { ch <- in.post("acct", "paused", "", jsonBody(2)) }()
	r, ok := waitReply(ch, unbounded)
	in.proxy.Resume()
	if !ok {
		t.Fatalf("no answer after %v while the database was paused: the claim is unbounded (then: %v)", unbounded, <-ch)
	}
	mustProblem(t, r, http.StatusServiceUnavailable, core.ProblemStoreUnavailable, true)
	if in.calls.Load() != 1 {
		t.Fatalf("the handler ran %d times, want 1 (before the pause)", in.calls.Load())
	}
}

// TestWWWAuthenticateNeverReplayable (BUG 3): Config.Validate refuses credential headers
// in ReplayHeaders by comparing http.CanonicalHeaderKey(h) with "WWW-Authenticate", but
// the canonical form is "Www-Authenticate", so WWW-Authenticate (in any spelling) is
// accepted: the engine then stores it in the key table and replays it to every retry.
// Want: core.New refuses it with ErrInvalidConfig, as it does Set-Cookie and Authorization.
func TestWWWAuthenticateNeverReplayable(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceConfig{direct: true})
	for _, h := range []string{"WWW-Authenticate", "www-authenticate", "Www-Authenticate"} {
		cfg := core.Config{Store: in.store, Scope: func(r *http.Request) string { return r.Header.Get("X-Account") },
			ReplayHeaders: []string{"Location", "Content-Type", h}}
		eng, err := core.New(cfg)
		if errors.Is(err, core.ErrInvalidConfig) {
			continue
		}
		// Accepted: show what it costs.
		srv := httptest.NewServer(eng.Middleware(http.HandlerFunc(in.orders)))
		key := "www-" + h
		send := func() *http.Response {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders?secrets=1", strings.NewReader(jsonBody(1)))
			req.Header.Set("X-Account", "acct")
			req.Header.Set("Idempotency-Key", key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp
		}
		send()
		replay := send()
		row, _ := d.key("acct", key)
		srv.Close()
		http.DefaultClient.CloseIdleConnections()
		t.Errorf("ReplayHeaders with %q accepted (err %v): stored headers %q; replay (Idempotent-Replayed %q) carries WWW-Authenticate %q",
			h, err, row.headers, replay.Header.Get("Idempotent-Replayed"), replay.Header.Get("WWW-Authenticate"))
	}
}
