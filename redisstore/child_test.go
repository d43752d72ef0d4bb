package redisstore_test

import (
	"bufio"
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
	"github.com/idemkit/idem/redisstore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The child server: this test binary run again with childEnv set. TestMain then serves the
// payments application on a free loopback port, which it prints, and exits with
// crashStatus at the crash point envCrashAt names: no response, no release; what Redis
// recorded stays.
const (
	childEnv      = "REDISSTORE_CHILD"
	envPrefix     = "REDISSTORE_CHILD_PREFIX"
	envRedis      = "REDISSTORE_CHILD_REDIS" // the deployment's spec (clientFor)
	envProvider   = "REDISSTORE_CHILD_PROVIDER"
	envCrashAt    = "REDISSTORE_CHILD_CRASH_AT"
	readyPrefix   = "redisstore child listening on "
	crashStatus   = 3
	childLease    = 300 * time.Millisecond
	childLifetime = time.Minute // a child never outlives a run that lost it
	atRecorded    = "recorded"  // the response was recorded, the client never got it
)

func runChild() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "redisstore child:", err)
		return 2
	}
	time.AfterFunc(childLifetime, func() { os.Exit(4) })
	crashAt := os.Getenv(envCrashAt)
	crash := func(point string) {
		if point == crashAt {
			os.Exit(crashStatus)
		}
	}
	client, err := clientFor(os.Getenv(envRedis))
	if err != nil {
		return fail(err)
	}
	store := redisstore.New(client, redisstore.WithPrefix(os.Getenv(envPrefix)))
	cfg := core.Config{Lease: childLease}
	if crashAt == atRecorded {
		cfg.Hooks = core.HookFunc(func(_ context.Context, ev core.Event) {
			if ev.Outcome == core.OutcomeCompleted {
				os.Exit(crashStatus)
			}
		})
	}
	mw, err := middleware(store, cfg)
	if err != nil {
		return fail(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	fmt.Printf("%s%s\n", readyPrefix, ln.Addr())
	srv := &http.Server{Handler: mw(payments(os.Getenv(envProvider), crash, nil)), ReadHeaderTimeout: 10 * time.Second}
	return fail(srv.Serve(ln))
}

// startChild starts a child server on the Redis deployment spec names (clientFor) that
// crashes at crashAt, and returns its URL and a function waiting for its exit status.
// The test's cleanup kills it if it still runs.
func startChild(t *testing.T, spec, prefix, providerURL, crashAt string) (string, func() (int, error)) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", envRedis+"="+spec, envPrefix+"="+prefix, envProvider+"="+providerURL,
		envCrashAt+"="+crashAt)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	var mu sync.Mutex
	cmd.Stderr = writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return stderr.Write(p) })
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	var waitErr error
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		for sc.Scan() {
		}
		waitErr = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	select {
	case l, ok := <-line:
		addr, found := strings.CutPrefix(l, readyPrefix)
		if !ok || !found {
			<-done
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("child did not start (said %q, %v): %s", l, waitErr, stderr.String())
		}
		exit := func() (int, error) {
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				return -1, errors.New("child still running 10s after it should have crashed")
			}
			var ee *exec.ExitError
			if errors.As(waitErr, &ee) {
				return ee.ExitCode(), nil
			}
			return 0, waitErr
		}
		return "http://" + addr, exit
	case <-time.After(20 * time.Second):
		t.Fatal("child not listening after 20s")
	}
	return "", nil
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestCrashMidOperationChargesOnce: an instance crashes (its process exits) at each point
// of a payment: before its phase, after the provider charged but before the phase was
// recorded, after the phase, after the response was recorded. A second instance then
// serves the retry: 409 while the crashed attempt's lease is live, then a takeover that
// resumes where the crash left off (or the replay of the recorded response). The provider
// has exactly one charge for the operation, the one the 201 names, and the 201 replays
// identically. On one Redis, a Redis Cluster and a Sentinel group.
func TestCrashMidOperationChargesOnce(t *testing.T) {
	t.Parallel()
	for _, topo := range []topology{single, cluster, sentinel} {
		t.Run(topo.name, func(t *testing.T) {
			t.Parallel()
			spec := topo.spec(t)
			for _, at := range []string{atClaimed, atProviderCalled, atCharged, atRecorded} {
				t.Run(at, func(t *testing.T) {
					t.Parallel()
					crashMidOperation(t, spec, at)
				})
			}
		})
	}
}

func crashMidOperation(t *testing.T, spec, at string) {
	prov := newProvider(t)
	prefix := newPrefix(t)
	url, exit := startChild(t, spec, prefix, prov.srv.URL, at)
	key := "pay-" + at
	_, err := post(t.Context(), url, "acct", key, `{"amount":100}`)
	require.Error(t, err, "the child answered instead of crashing at %s", at)
	code, err := exit()
	require.NoError(t, err)
	require.Equal(t, crashStatus, code, "the child's exit status")

	other := redisstore.New(topoClient(t, spec), redisstore.WithPrefix(prefix))
	srv := serve(t, other, core.Config{Lease: childLease}, payments(prov.srv.URL, noCrash, nil))
	first, seen, err := untilCreated(t.Context(), srv.URL, "acct", key, `{"amount":100}`, 10*time.Second, false)
	require.NoError(t, err)
	t.Logf("answers after the crash: %v", seen)
	assert.Equal(t, at == atRecorded, first.replayed(), "only a recorded response is replayed on the first retry")
	charges := prov.charges(key)
	require.Len(t, charges, 1, "charges of the operation")
	assert.Contains(t, string(first.Body), charges[0])
	again, err := post(t.Context(), srv.URL, "acct", key, `{"amount":100}`)
	require.NoError(t, err)
	assert.True(t, again.replayed())
	assert.Equal(t, first.Body, again.Body)
	assert.Equal(t, first.Header.Get("Location"), again.Header.Get("Location"))
}
