package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/internal/syncbuf"
	"github.com/idemkit/idem/internal/testdb"
)

// bin is the quickstart built once by TestMain, as a user's go build would.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "idem-quickstart-")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "quickstart")
	code := 1
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		os.Stderr.Write(append([]byte("go build ./examples/quickstart: "+err.Error()+"\n"), out...))
	} else {
		code = m.Run()
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// process is a running quickstart.
type process struct {
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
	done chan struct{}
	err  error // cmd.Wait's, once done is closed
}

// start runs the quickstart with env (on top of a clean PATH and HOME); it is killed,
// if still running, when the test ends.
func start(t *testing.T, env ...string) *process {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "GIN_MODE=release"}, env...)
	p := &process{cmd: cmd, out: &syncbuf.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	require.NoError(t, cmd.Start())
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("quickstart output:\n%s", p.out)
		}
	})
	return p
}

// exitCode waits (bounded) for the process to end and returns its status.
func (p *process) exitCode(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the quickstart did not exit within 30s:\n%s", p.out)
	}
	var ee *exec.ExitError
	if p.err == nil {
		return 0
	}
	require.True(t, errors.As(p.err, &ee) && ee.Exited(), "the quickstart ended abnormally: %v", p.err)
	return ee.ExitCode()
}

// freeAddr returns a loopback address with a port nothing listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// waitListening polls addr until it accepts a connection, the process exits, or the
// deadline passes.
func (p *process) waitListening(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			require.NoError(t, conn.Close())
			return
		}
		select {
		case <-p.done:
			t.Fatalf("the quickstart exited before listening on %s (%v):\n%s", addr, p.err, p.out)
		case <-time.After(20 * time.Millisecond): // the polling interval, not a synchronisation
		}
		if time.Now().After(deadline) {
			t.Fatalf("the quickstart did not listen on %s within 60s:\n%s", addr, p.out)
		}
	}
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func send(t *testing.T, method, url, body string, header ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return reply{resp.StatusCode, resp.Header, b}
}

// TestQuickstartRequiresDatabaseURL: without DATABASE_URL the quickstart says so and
// exits, instead of letting pgx connect to a database named after the OS user.
func TestQuickstartRequiresDatabaseURL(t *testing.T) {
	p := start(t, "ADDR="+freeAddr(t))
	assert.Equal(t, 1, p.exitCode(t))
	assert.Contains(t, p.out.String(), "DATABASE_URL is not set")
}

// TestQuickstartReplaysARetry runs the quickstart against the local PostgreSQL, in a
// schema of its own: one POST sent twice creates one order, answered 201 and then
// replayed byte for byte; SIGTERM stops the server cleanly.
func TestQuickstartReplaysARetry(t *testing.T) {
	dbURL, schema := testdb.PostgresSchema(t) // fails the test when PostgreSQL is down
	addr := freeAddr(t)
	p := start(t, "DATABASE_URL="+dbURL, "ADDR="+addr)
	p.waitListening(t, addr)
	base := "http://" + addr

	const order = `{"item":"book"}`
	unauthenticated := send(t, http.MethodPost, base+"/v1/orders", order, "Idempotency-Key", "k-1")
	assert.Equal(t, http.StatusUnauthorized, unauthenticated.status)

	noKey := send(t, http.MethodPost, base+"/v1/orders", order, "X-Account-ID", "alice", "Content-Type", "application/json")
	require.Equal(t, http.StatusBadRequest, noKey.status, "%s", noKey.body)
	assert.Equal(t, "application/problem+json", noKey.header.Get("Content-Type"))
	assert.Contains(t, string(noKey.body), "docs/problems.md#key-missing")

	h := []string{"X-Account-ID", "alice", "Idempotency-Key", "8e03978e-40d5-43e8-bc93-6894a57f9324", "Content-Type", "application/json"}
	first := send(t, http.MethodPost, base+"/v1/orders", order, h...)
	require.Equal(t, http.StatusCreated, first.status, "%s", first.body)
	assert.Empty(t, first.header.Values("Idempotent-Replayed"))
	var created struct {
		ID   int64  `json:"id"`
		Item string `json:"item"`
	}
	require.NoError(t, json.Unmarshal(first.body, &created))
	assert.Equal(t, "book", created.Item)
	assert.NotEmpty(t, first.header.Get("Location"))

	again := send(t, http.MethodPost, base+"/v1/orders", order, h...)
	require.Equal(t, http.StatusCreated, again.status, "%s", again.body)
	assert.Equal(t, []string{"true"}, again.header.Values("Idempotent-Replayed"))
	assert.Equal(t, first.body, again.body, "the replay's body, byte for byte")
	assert.Equal(t, first.header.Get("Location"), again.header.Get("Location"))

	got := send(t, http.MethodGet, base+first.header.Get("Location"), "", "X-Account-ID", "alice")
	assert.Equal(t, http.StatusOK, got.status, "%s", got.body)

	// One order and one key, in the quickstart's own tables.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var orders, keys int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.quickstart_orders`).Scan(&orders))
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.quickstart_idempotency_keys`).Scan(&keys))
	assert.Equal(t, 1, orders, "orders created")
	assert.Equal(t, 1, keys, "keys recorded")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, p.exitCode(t), "exit status after SIGTERM")
}
