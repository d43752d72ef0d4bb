package rivertest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/syncbuf"
)

// The child server: the test binary re-executed with childEnv set. TestMain then serves
// the application on a free loopback port, which it prints, and when a request reaches
// the hook point envHoldAt names it prints that and holds the request until it is killed.
const (
	childEnv      = "RIVERTEST_CHILD"
	envKind       = "RIVERTEST_KIND"
	envSchema     = "RIVERTEST_SCHEMA"
	envHoldAt     = "RIVERTEST_HOLD_AT"
	listeningLine = "rivertest child listening on "
	heldLine      = "rivertest child held at "
	childLifetime = 2 * time.Minute // a child never outlives a run that lost it
	// killLease is the child's phased lease: a retry takes a killed attempt over once it
	// has run out.
	killLease = time.Second
)

// runChild is the child's main: it returns only on a failure to serve.
func runChild() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "rivertest child:", err)
		return 2
	}
	time.AfterFunc(childLifetime, func() { os.Exit(4) })
	p, err := openPools(2)
	if err != nil {
		return fail(err)
	}
	be, err := connect(kind(os.Getenv(envKind)), os.Getenv(envSchema), p)
	if err != nil {
		return fail(err)
	}
	holdAt := os.Getenv(envHoldAt)
	var out sync.Mutex
	a := newApp(be, killLease, func(ctx context.Context, _ *core.Operation, at string) error {
		if at == holdAt {
			out.Lock()
			fmt.Println(heldLine + at)
			out.Unlock()
			<-ctx.Done() // until SIGKILL: what committed stays, nothing else does
			return ctx.Err()
		}
		return nil
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	out.Lock()
	fmt.Println(listeningLine + ln.Addr().String())
	out.Unlock()
	srv := &http.Server{Handler: a.handler(), ReadHeaderTimeout: 10 * time.Second}
	return fail(srv.Serve(ln))
}

// child is a running child server.
type child struct {
	cmd    *exec.Cmd
	url    string
	lines  chan string // the child's stdout, line by line
	stderr syncbuf.Buffer
	done   chan struct{} // closed once the process has exited and been waited for
	err    error         // Wait's error, read after done
}

// startChild starts a child server for be that holds requests at holdAt, and waits until
// it listens. The test's cleanup kills it if it still runs.
func startChild(t testing.TB, be *backend, holdAt string) (*child, error) {
	c := &child{lines: make(chan string, 8), done: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), childEnv+"=1", envKind+"="+string(be.kind), envSchema+"="+be.schema, envHoldAt+"="+holdAt)
	c.cmd.Stderr = &c.stderr
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the child: %w", err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(c.kill)
	line, err := c.next()
	if err != nil {
		c.kill()
		return nil, err
	}
	addr, ok := strings.CutPrefix(line, listeningLine)
	if !ok {
		c.kill()
		return nil, fmt.Errorf("child said %q, want %q…; stderr: %s", line, listeningLine, c.stderr.String())
	}
	c.url = "http://" + addr
	return c, nil
}

// next returns the child's next line of output.
func (c *child) next() (string, error) {
	select {
	case line := <-c.lines:
		return line, nil
	case <-c.done:
		return "", fmt.Errorf("child exited (%v); stderr: %s", c.err, c.stderr.String())
	case <-time.After(waitTimeout):
		return "", fmt.Errorf("child silent for %v; stderr: %s", waitTimeout, c.stderr.String())
	}
}

// kill sends SIGKILL and waits for the process to be reaped.
func (c *child) kill() {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Kill() // SIGKILL: no deferred function, no rollback, no release
	select {
	case <-c.done:
	case <-time.After(waitTimeout):
		fmt.Fprintf(os.Stderr, "rivertest: child %d not reaped %v after SIGKILL\n", c.cmd.Process.Pid, waitTimeout)
	}
}

// boundary is a point at which a child is killed, and what must be in the database then.
type boundary struct {
	at, path, table string
	left            tally // what the killed attempt leaves
}

var boundaries = []boundary{
	// Inside the finished phase, both jobs inserted, uncommitted: nothing of the phase
	// stays; the key stays at charged, leased, until a retry takes it over.
	{atEnqueued, "/v1/payments", "payments", tally{State: string(storage.StateStarted), Point: "charged"}},
	// The finished phase committed: its jobs stay; the retry skips the phase.
	{atFinished, "/v1/payments", "payments", tally{Receipts: 1, Audits: 1, Rows: 1, State: string(storage.StateStarted), Point: atFinished}},
	// Atomic: the order and both jobs inserted in the request's transaction: the killed
	// connection rolls all back, the key included.
	{atOrderEnqueued, "/v1/orders", "orders", tally{}},
}

const (
	// envTrials sets the kill trials per boundary and store. Default: defaultTrials.
	envTrials     = "RIVERTEST_TRIALS"
	defaultTrials = 2
	// killConcurrency bounds the trials running at once (each runs one child).
	killConcurrency = 4
)

func trialsPerBoundary(t testing.TB) int {
	t.Helper()
	s := os.Getenv(envTrials)
	if s == "" {
		return defaultTrials
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 1000 {
		t.Fatalf("%s=%q: want a number of trials from 1 to 1000", envTrials, s)
	}
	return n
}

// TestKillLeavesOneJob SIGKILLs a child server while a request holds each boundary (inside
// the phase that enqueues, after it committed, inside the atomic request), checks what the
// killed attempt left (its jobs iff what inserted them committed), then lets a server in
// this process finish the operation with the same key (a takeover once the killed lease
// has run out, for the phased route) and checks that the operation ends with exactly one
// receipt and one audit job: the unique job and the one River would have inserted twice.
// RIVERTEST_TRIALS trials per boundary and store (default 2); it logs
// trials=… duplicates=… lost=… and requires both to be 0.
func TestKillLeavesOneJob(t *testing.T) {
	t.Parallel()
	n := trialsPerBoundary(t)
	type trial struct {
		kind kind
		b    boundary
		tl   tally
		err  error
	}
	var trials []*trial
	backends := map[kind]*backend{}
	servers := map[kind]string{}
	for _, k := range kinds {
		be := newBackend(t, k)
		backends[k] = be
		srv := httptest.NewServer(newApp(be, killLease, nil).handler())
		t.Cleanup(srv.Close)
		servers[k] = srv.URL
		for _, b := range boundaries {
			for range n {
				trials = append(trials, &trial{kind: k, b: b})
			}
		}
	}
	sem := make(chan struct{}, killConcurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for _, tr := range trials {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			tr.tl, tr.err = killTrial(t, backends[tr.kind], servers[tr.kind], tr.b)
		})
	}
	wg.Wait()
	duplicates, lost := 0, 0
	for _, tr := range trials {
		duplicates += max(tr.tl.Receipts-1, 0) + max(tr.tl.Audits-1, 0) + max(tr.tl.Rows-1, 0)
		if tr.tl.Receipts == 0 || tr.tl.Audits == 0 || tr.tl.Rows == 0 {
			lost++
		}
		if tr.err != nil {
			t.Errorf("%s/%s: %v", tr.kind, tr.b.at, tr.err)
		}
	}
	t.Logf("trials=%d boundaries=%d stores=%d duplicates=%d lost=%d in %v",
		len(trials), len(boundaries), len(kinds), duplicates, lost, time.Since(start).Round(time.Millisecond))
	if duplicates != 0 || lost != 0 {
		t.Errorf("duplicates=%d lost=%d, want 0 and 0", duplicates, lost)
	}
}

// killTrial runs one trial and returns the tally once the operation completed. It runs on
// a goroutine of its own, so it reports through its error, never t.Fatal.
func killTrial(t *testing.T, be *backend, server string, b boundary) (tally, error) {
	ctx := context.Background()
	account, key := operation()
	c, err := startChild(t, be, b.at)
	if err != nil {
		return tally{}, err
	}
	sent := make(chan error, 1)
	go func() {
		r, err := post(ctx, c.url, b.path, account, key)
		if err == nil {
			err = fmt.Errorf("the child answered %v instead of holding at %s", r, b.at)
		}
		sent <- err
	}()
	line, err := c.next()
	if err != nil {
		return tally{}, err
	}
	if line != heldLine+b.at {
		c.kill()
		return tally{}, fmt.Errorf("child said %q, want %q", line, heldLine+b.at)
	}
	c.kill()
	if err := <-sent; err == nil || strings.Contains(err.Error(), "instead of holding") {
		return tally{}, fmt.Errorf("the request to the killed child: %v", err)
	}
	if s := c.stderr.String(); strings.Contains(s, "WARNING: DATA RACE") {
		return tally{}, fmt.Errorf("the child reported a data race:\n%s", s)
	}

	var errs []error
	// The killed connection's transaction may still be ending on the server: what it
	// inserted is invisible to other sessions either way, committed it never will be.
	left, err := be.count(ctx, b.table, account, key)
	if err != nil {
		return tally{}, err
	}
	if left != b.left {
		errs = append(errs, fmt.Errorf("after the kill: %v, want %v", left, b.left))
	}
	r, err := postUntilDone(ctx, server, b.path, account, key)
	if err != nil {
		return tally{}, errors.Join(append(errs, fmt.Errorf("retry: %w", err))...)
	}
	if r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "" {
		errs = append(errs, fmt.Errorf("retry: %v, want an original 201", r))
	}
	tl, err := be.count(ctx, b.table, account, key)
	if err != nil {
		return tally{}, errors.Join(append(errs, err)...)
	}
	point := atFinished
	if b.path == "/v1/orders" {
		point = orderPhase
	}
	if tl != once(point) {
		errs = append(errs, fmt.Errorf("after the retry: %v, want %v", tl, once(point)))
	}
	return tl, errors.Join(errs...)
}
