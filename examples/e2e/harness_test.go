package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/internal/testdb"
)

// apps are the example servers under test, by directory name.
var apps = []string{"gin-orders", "echo-orders"}

// bins holds each app's binary, built once by TestMain.
var bins = map[string]string{}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "idem-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := 1
	if err := build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = m.Run()
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// build compiles every app into dir, in parallel.
func build(dir string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("e2e: the go command is needed to build the examples: %w", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(apps))
	for i, app := range apps {
		bins[app] = filepath.Join(dir, app)
		args := []string{"build"}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, "-o", bins[app], "github.com/idemkit/idem/examples/"+app)
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			if out, err := exec.CommandContext(ctx, goBin, args...).CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("e2e: go %s: %w\n%s", strings.Join(args, " "), err, out)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// storage is a database an app runs against: what it needs in its environment.
type storage struct {
	name string
	// setup returns the app's working directory and environment for a fresh database.
	setup func(t *testing.T) (dir string, env []string)
	// redis: the payments' keys are in Redis (-store redis), so a payment's rows commit
	// on their own, before its recovery point or its response.
	redis bool
}

var (
	sqlite = storage{name: "sqlite", setup: func(t *testing.T) (string, []string) {
		return t.TempDir(), nil // no DATABASE_URL: the default orders.db in the working directory
	}}
	postgresPgx = storage{name: "postgres-pgx", setup: func(t *testing.T) (string, []string) {
		url, _ := testdb.PostgresSchema(t)                  // fails the test when PostgreSQL is unreachable
		return t.TempDir(), []string{"DATABASE_URL=" + url} // IDEM_STORE unset: pgx by default
	}}
	postgresGorm = storage{name: "postgres-gorm", setup: func(t *testing.T) (string, []string) {
		url, _ := testdb.PostgresSchema(t)
		return t.TempDir(), []string{"DATABASE_URL=" + url, "IDEM_STORE=gorm"}
	}}
	mariadb = storage{name: "mariadb", setup: func(t *testing.T) (string, []string) {
		return t.TempDir(), []string{"DATABASE_URL=" + mysqlURL(t)} // gormstore: the only store for MySQL
	}}
)

var storages = []storage{
	sqlite, postgresPgx, postgresGorm, mariadb,
	onRedis("sqlite-redis", sqlite), onRedis("postgres-redis", postgresPgx), onRedis("mariadb-redis", mariadb),
}

// onRedis is db with -store redis, called name: the payments' keys in the test Redis,
// under a prefix of the test's own whose keys are deleted when it ends; every other key
// stays in db's database, with its default store. db must leave IDEM_STORE unset.
func onRedis(name string, db storage) storage {
	return storage{name: name, redis: true, setup: func(t *testing.T) (string, []string) {
		dir, env := db.setup(t)
		client, prefix := testdb.Redis(t) // fails the test when Redis is unreachable
		// Every test sends payments: their keys must be in Redis (checked before testdb's
		// cleanup deletes them).
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			if !iter.Next(ctx) && iter.Err() == nil {
				t.Errorf("no Redis key under %s: the payments' keys did not go to Redis", prefix)
			}
		})
		return dir, append(env, "IDEM_STORE=redis", "REDIS_ADDR="+testdb.RedisAddr(), "IDEM_REDIS_PREFIX="+prefix)
	}}
}

// mysqlURL creates a database of the test's own on the MariaDB/MySQL server and returns
// it as the mysql:// URL the README documents (the servers take the DSN form too).
func mysqlURL(t *testing.T) string {
	dsn, _ := testdb.MySQLDatabase(t) // fails the test when MariaDB is unreachable
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("parse %s: %v", dsn, err)
	}
	u := url.URL{Scheme: "mysql", User: url.User(cfg.User), Host: cfg.Addr, Path: "/" + cfg.DBName}
	if cfg.Passwd != "" {
		u.User = url.UserPassword(cfg.User, cfg.Passwd)
	}
	return u.String()
}

// eachExample runs f as a parallel subtest for every app on every storage.
func eachExample(t *testing.T, f func(t *testing.T, app string, st storage)) {
	for _, app := range apps {
		for _, st := range storages {
			t.Run(app+"/"+st.name, func(t *testing.T) {
				t.Parallel()
				f(t, app, st)
			})
		}
	}
}

// server is a running example process.
type server struct {
	t      *testing.T
	url    string
	cmd    *exec.Cmd
	out    *output
	done   chan struct{} // closed when the process has exited
	err    error         // cmd.Wait's, once done is closed
	client *http.Client
}

const (
	startTimeout = 90 * time.Second // a -race binary on a busy machine
	stopTimeout  = 20 * time.Second
)

var listening = regexp.MustCompile(`listening on (127\.0\.0\.1:[0-9]+)`)

// output collects a process's output and reports the address of its "listening on" line.
type output struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	ready chan string
	seen  bool
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf.Write(p)
	if !o.seen {
		if m := listening.FindSubmatch(o.buf.Bytes()); m != nil {
			o.seen = true
			o.ready <- string(m[1])
		}
	}
	return len(p), nil
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// cleanEnv is the test's environment without anything that configures the servers.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case name == "ADDR", name == "DATABASE_URL", name == "REDIS_ADDR", name == "LOG_LEVEL", strings.HasPrefix(name, "IDEM_"), name == "GORACE":
			continue
		}
		env = append(env, kv)
	}
	// A -race binary sleeps a second before exiting by default.
	return append(env, "GORACE=atexit_sleep_ms=50")
}

// start runs app in dir with env and args on a free loopback port, and waits until it
// logs "listening on". The process is killed, if still running, when the test ends.
func start(t *testing.T, app, dir string, env []string, args ...string) *server {
	t.Helper()
	cmd := exec.Command(bins[app], append([]string{"-addr", "127.0.0.1:0"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), env...)
	out := &output{ready: make(chan string, 1)}
	cmd.Stdout, cmd.Stderr = out, out
	s := &server{t: t, cmd: cmd, out: out, done: make(chan struct{}),
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 32}}}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", app, err)
	}
	go func() {
		s.err = cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		s.client.CloseIdleConnections()
		select {
		case <-s.done:
		default:
			_ = cmd.Process.Kill()
			select {
			case <-s.done:
			case <-time.After(stopTimeout):
				t.Errorf("%s (pid %d) did not exit after SIGKILL", app, cmd.Process.Pid)
			}
		}
		s.checkOutput()
		if t.Failed() {
			t.Logf("%s output:\n%s", app, out.String())
		}
	})
	select {
	case addr := <-out.ready:
		s.url = "http://" + addr
		t.Logf("%s listening on %s after %s", app, addr, time.Since(began).Round(time.Millisecond))
	case <-s.done:
		t.Fatalf("%s exited before listening (%v):\n%s", app, s.err, out.String())
	case <-time.After(startTimeout):
		t.Fatalf("%s did not log \"listening on\" within %s:\n%s", app, startTimeout, out.String())
	}
	return s
}

// checkOutput fails the test on a data race or a panic in the server's output.
func (s *server) checkOutput() {
	out := s.out.String()
	for _, bad := range []string{"WARNING: DATA RACE", "panic:"} {
		if strings.Contains(out, bad) {
			s.t.Errorf("the server's output shows %q", bad)
		}
	}
}

// exitCode waits for the process to exit and returns its status.
func (s *server) exitCode(t *testing.T) int {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(stopTimeout):
		t.Fatalf("the server did not exit within %s", stopTimeout)
	}
	var ee *exec.ExitError
	switch {
	case s.err == nil:
		return 0
	case errors.As(s.err, &ee) && ee.Exited():
		return ee.ExitCode()
	default:
		t.Fatalf("the server ended abnormally: %v", s.err)
		return -1
	}
}

// shutdown sends SIGTERM and requires a clean exit (status 0).
func (s *server) shutdown(t *testing.T) {
	t.Helper()
	// Connections the client opened but never used count as active to the server's
	// Shutdown for a few seconds: close them first.
	s.client.CloseIdleConnections()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	began := time.Now()
	defer func() { t.Logf("exited after %s", time.Since(began).Round(time.Millisecond)) }()
	if code := s.exitCode(t); code != 0 {
		t.Fatalf("exit status %d after SIGTERM, want 0:\n%s", code, s.out.String())
	}
}

// response is what a request got back.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r *response) String() string {
	return fmt.Sprintf("%d %v %s", r.Status, r.Header, r.Body)
}

// try sends one request. header holds name/value pairs; a name may repeat, which sends
// the field twice.
func (s *server) try(method, path, body string, header ...string) (*response, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.url+path, rd)
	if err != nil {
		return nil, err
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

func (s *server) do(t testing.TB, method, path, body string, header ...string) *response {
	t.Helper()
	r, err := s.try(method, path, body, header...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// post sends a JSON body as account with key (no Idempotency-Key when key is "").
func (s *server) post(t testing.TB, path, account, key, body string) *response {
	t.Helper()
	h := []string{"Content-Type", "application/json", "X-Account-ID", account}
	if key != "" {
		h = append(h, "Idempotency-Key", key)
	}
	return s.do(t, http.MethodPost, path, body, h...)
}

func (s *server) get(t testing.TB, path, account string) *response {
	t.Helper()
	return s.do(t, http.MethodGet, path, "", "X-Account-ID", account)
}

func random(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func newAccount() string { return random("acct-") }
func newKey() string     { return random("key-") }

// requireStatus fails unless r has status.
func requireStatus(t testing.TB, r *response, status int) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r)
	}
}

// requireProblem fails unless r is an RFC 9457 problem with status.
func requireProblem(t testing.TB, r *response, status int) map[string]any {
	t.Helper()
	requireStatus(t, r, status)
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json: %s", ct, r)
	}
	var p map[string]any
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("problem body: %v: %s", err, r)
	}
	for _, f := range []string{"type", "title", "detail"} {
		if s, ok := p[f].(string); !ok || s == "" {
			t.Fatalf("problem field %q missing or empty: %s", f, r)
		}
	}
	if n, ok := p["status"].(float64); !ok || int(n) != status {
		t.Fatalf("problem status %v, want %d: %s", p["status"], status, r)
	}
	return p
}

// requireFresh fails unless r came from running the operation (no Idempotent-Replayed).
func requireFresh(t testing.TB, r *response) {
	t.Helper()
	if v, ok := r.Header["Idempotent-Replayed"]; ok {
		t.Fatalf("Idempotent-Replayed: %v on a response that was not a replay: %s", v, r)
	}
}

// requireReplay fails unless again is first replayed: the same status, Location,
// Content-Type and body byte for byte, plus Idempotent-Replayed: true.
func requireReplay(t testing.TB, first, again *response) {
	t.Helper()
	if again.Status != first.Status || !bytes.Equal(again.Body, first.Body) {
		t.Fatalf("replay differs:\nfirst: %s\nagain: %s", first, again)
	}
	for _, h := range []string{"Location", "Content-Type"} {
		if got, want := again.Header.Values(h), first.Header.Values(h); !equal(got, want) {
			t.Fatalf("replayed %s %q, first %q", h, got, want)
		}
	}
	if v := again.Header.Values("Idempotent-Replayed"); len(v) != 1 || v[0] != "true" {
		t.Fatalf("Idempotent-Replayed %q on a replay, want true: %s", v, again)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// fields decodes a JSON object into its raw fields, to compare them byte for byte.
func fields(t testing.TB, b []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("not a JSON object: %v: %s", err, b)
	}
	return m
}

// list decodes {"<name>": [ … ]} and requires the array (never null).
func list(t testing.TB, r *response, name string) []json.RawMessage {
	t.Helper()
	requireStatus(t, r, http.StatusOK)
	raw, ok := fields(t, r.Body)[name]
	if !ok || !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("[")) {
		t.Fatalf("%q is not an array: %s", name, r)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		t.Fatalf("%q: %v", name, err)
	}
	return items
}

// requireSameFields fails unless got has exactly want's fields, each byte for byte.
func requireSameFields(t testing.TB, got, want []byte) {
	t.Helper()
	g, w := fields(t, got), fields(t, want)
	if len(g) != len(w) {
		t.Fatalf("fields differ:\ngot  %s\nwant %s", got, want)
	}
	for k, v := range w {
		if !bytes.Equal(g[k], v) {
			t.Fatalf("field %q: got %s, want %s (byte for byte)", k, g[k], v)
		}
	}
}

// str reads a string field.
func str(t testing.TB, b []byte, field string) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(fields(t, b)[field], &s); err != nil || s == "" {
		t.Fatalf("field %q is not a non-empty string: %s", field, b)
	}
	return s
}
