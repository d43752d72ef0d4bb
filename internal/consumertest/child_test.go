package consumertest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/internal/syncbuf"
)

// A child consumer is the test binary re-executed with childEnv set: TestMain then runs
// one consumer on the queue and backend childSpec names, until the durable has nothing
// left (it prints its counts and exits 0), or it exits with crashStatus right after the
// crashAfter-th business write committed, before acknowledging that message.
const (
	childEnv      = "CONSUMERTEST_CHILD"
	envSpec       = "CONSUMERTEST_SPEC"
	envCrashAfter = "CONSUMERTEST_CRASH_AFTER"
	countsPrefix  = "consumertest counts "
	crashStatus   = 3
	childLifetime = 2 * time.Minute // a child never outlives a run that lost it
)

// childSpec is what a child is told, as JSON in envSpec.
type childSpec struct {
	Backend spec
	Queue   queue
}

// runChild is the child's main.
func runChild() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "consumertest child:", err)
		return 2
	}
	var cs childSpec
	if err := json.Unmarshal([]byte(os.Getenv(envSpec)), &cs); err != nil {
		return fail(fmt.Errorf("%s: %w", envSpec, err))
	}
	crashAfter, _ := strconv.ParseInt(os.Getenv(envCrashAfter), 10, 64)
	time.AfterFunc(childLifetime, func() {
		fmt.Fprintln(os.Stderr, "consumertest child: lifetime over, exiting")
		os.Exit(4)
	})
	ctx := context.Background()
	be, err := open(ctx, cs.Backend, false)
	if err != nil {
		return fail(err)
	}
	defer be.close()
	nc, js, err := connect()
	if err != nil {
		return fail(err)
	}
	defer nc.Close()
	var completed atomic.Int64
	hooks := core.HookFunc(func(_ context.Context, ev core.Event) {
		if ev.Outcome == core.OutcomeCompleted && completed.Add(1) == crashAfter {
			// A crash: the business write and the message's record have committed; the
			// ack is never sent, so the broker delivers the message again.
			fmt.Fprintf(os.Stderr, "consumertest child: crashing after committing %s\n", ev.Key)
			os.Exit(crashStatus)
		}
	})
	c, err := newConsumer(ctx, js, cs.Queue, be, hooks)
	if err != nil {
		return fail(err)
	}
	if err := c.run(ctx); err != nil {
		return fail(err)
	}
	out, _ := json.Marshal(c.counts())
	fmt.Printf("%s%s\n", countsPrefix, out)
	return 0
}

// child is a running child consumer.
type child struct {
	cmd    *exec.Cmd
	stdout syncbuf.Buffer
	stderr syncbuf.Buffer
	done   chan struct{}
	err    error // Wait's; read after done
}

// startChild starts a child consumer on q and b; crashAfter > 0 makes it crash after that
// many committed messages. The test's cleanup kills it if it still runs.
func startChild(t *testing.T, b spec, q queue, crashAfter int) *child {
	t.Helper()
	js, err := json.Marshal(childSpec{Backend: b, Queue: q})
	if err != nil {
		t.Fatal(err)
	}
	c := &child{done: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), childEnv+"=1", envSpec+"="+string(js), envCrashAfter+"="+strconv.Itoa(crashAfter))
	c.cmd.Stdout, c.cmd.Stderr = &c.stdout, &c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start a child consumer: %v", err)
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	})
	return c
}

// wait waits for the child to exit and returns its exit status and, when it finished,
// its counts.
func (c *child) wait(t *testing.T) (int, counts) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(waitTimeout):
		_ = c.cmd.Process.Kill()
		<-c.done
		t.Fatalf("child consumer still running after %v; stderr:\n%s", waitTimeout, c.stderr.String())
	}
	if s := c.stderr.String(); strings.Contains(s, "WARNING: DATA RACE") {
		t.Fatalf("the child reported a data race:\n%s", s)
	}
	code := 0
	var ee *exec.ExitError
	switch {
	case c.err == nil:
	case errors.As(c.err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("child consumer: %v", c.err)
	}
	var n counts
	sc := bufio.NewScanner(strings.NewReader(c.stdout.String()))
	for sc.Scan() {
		if js, ok := strings.CutPrefix(sc.Text(), countsPrefix); ok {
			if err := json.Unmarshal([]byte(js), &n); err != nil {
				t.Fatalf("child counts %q: %v", js, err)
			}
		}
	}
	if code != 0 && code != crashStatus {
		t.Fatalf("child consumer exited %d; stderr:\n%s", code, c.stderr.String())
	}
	return code, n
}
