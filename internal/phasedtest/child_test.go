package phasedtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/internal/syncbuf"
)

// The child server: the test binary re-executed with childEnv set. TestMain then serves
// the application instead of running tests, on a free loopback port it prints to stdout,
// until it is killed, or exits with crashStatus at the hook point envCrashAfter names.
const (
	childEnv       = "PHASEDTEST_CHILD"
	envCrashAfter  = "PHASEDTEST_CRASH_AFTER"
	envLease       = "PHASEDTEST_LEASE"
	envFramework   = "PHASEDTEST_FRAMEWORK"
	readyPrefix    = "phasedtest child listening on "
	crashStatus    = 3
	childLifetime  = 2 * time.Minute // a child never outlives a run that lost it
	childStopLimit = 10 * time.Second
)

// runChild is the child's main: it returns only on a failure to serve.
func runChild() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "phasedtest child:", err)
		return 2
	}
	s, err := specFromEnv()
	if err != nil {
		return fail(err)
	}
	lease, err := time.ParseDuration(os.Getenv(envLease))
	if err != nil {
		return fail(fmt.Errorf("%s: %w", envLease, err))
	}
	fw := framework(os.Getenv(envFramework))
	crashAfter := os.Getenv(envCrashAfter)
	time.AfterFunc(childLifetime, func() {
		fmt.Fprintln(os.Stderr, "phasedtest child: lifetime over, exiting")
		os.Exit(4)
	})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var p pools
	switch s.Kind {
	case kindPgx:
		if p.store, err = openPool(ctx, childPoolSize); err != nil {
			return fail(err)
		}
	case kindGormPostgres:
		if p.gormPG, err = openGormPG(childPoolSize); err != nil {
			return fail(err)
		}
	}
	if p.aux, err = openPool(ctx, 2); err != nil {
		return fail(err)
	}
	be, err := connect(s, p)
	if err != nil {
		return fail(err)
	}
	a := newApp(be, lease, func(_ context.Context, _ *core.Operation, at string) error {
		if at == crashAfter {
			// A crash: no response, no rollback, no release. What committed stays.
			os.Exit(crashStatus)
		}
		return nil
	})
	if crashAfter == atRecorded {
		a.hooks = core.HookFunc(func(_ context.Context, ev core.Event) {
			if ev.Outcome == core.OutcomeCompleted {
				os.Exit(crashStatus) // recorded and committed; the client never gets it
			}
		})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	fmt.Printf("%s%s\n", readyPrefix, ln.Addr())
	srv := &http.Server{Handler: a.handler(fw), ReadHeaderTimeout: 10 * time.Second}
	return fail(srv.Serve(ln))
}

// child is a running child server.
type child struct {
	cmd    *exec.Cmd
	url    string
	stderr syncbuf.Buffer
	done   chan struct{} // closed when the process has exited and been waited for
	err    error         // Wait's error; read after done
}

// childOptions configure a child server.
type childOptions struct {
	fw         framework
	lease      time.Duration
	crashAfter string // a hook point, or "" for none
}

// startChild starts a child server for s and waits until it listens. The test's cleanup
// kills it and waits for it, if the caller did not stop it before.
func startChild(t testing.TB, s spec, o childOptions) (*child, error) {
	c := &child{done: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), childEnv+"=1", envLease+"="+o.lease.String(),
		envFramework+"="+string(o.fw), envCrashAfter+"="+o.crashAfter)
	c.cmd.Env = append(c.cmd.Env, s.env()...)
	ready := &lineWriter{line: make(chan string, 1)}
	c.cmd.Stdout = ready
	c.cmd.Stderr = &c.stderr
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the child: %w", err)
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(c.stop)
	select {
	case line := <-ready.line:
		addr, ok := strings.CutPrefix(line, readyPrefix)
		if !ok {
			c.stop()
			return nil, fmt.Errorf("child said %q, want %q…; stderr: %s", line, readyPrefix, c.stderr.String())
		}
		c.url = "http://" + addr
		return c, nil
	case <-c.done:
		return nil, fmt.Errorf("child exited before listening (%v); stderr: %s", c.err, c.stderr.String())
	case <-time.After(waitTimeout):
		c.stop()
		return nil, fmt.Errorf("child not listening after %v; stderr: %s", waitTimeout, c.stderr.String())
	}
}

// stop kills the child if it still runs and waits for it, at most childStopLimit.
func (c *child) stop() {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Kill()
	select {
	case <-c.done:
	case <-time.After(childStopLimit):
		fmt.Fprintf(os.Stderr, "phasedtest: child %d not reaped %v after SIGKILL\n", c.cmd.Process.Pid, childStopLimit)
	}
}

// exitCode waits at most limit for the child to exit by itself and returns its status.
func (c *child) exitCode(limit time.Duration) (int, error) {
	select {
	case <-c.done:
	case <-time.After(limit):
		c.stop()
		return -1, fmt.Errorf("child still running %v after it should have crashed", limit)
	}
	var ee *exec.ExitError
	switch {
	case c.err == nil:
		return 0, nil
	case errors.As(c.err, &ee):
		return ee.ExitCode(), nil
	}
	return -1, c.err
}

// raced reports a data race the child's race detector printed.
func (c *child) raced() error {
	if s := c.stderr.String(); strings.Contains(s, "WARNING: DATA RACE") {
		return fmt.Errorf("the child reported a data race:\n%s", s)
	}
	return nil
}

// lineWriter sends the first line written to it.
type lineWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	sent bool
	line chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.sent {
		w.buf.Write(p)
		if line, _, ok := strings.Cut(w.buf.String(), "\n"); ok {
			w.sent = true
			w.line <- line
		}
	}
	return len(p), nil
}
