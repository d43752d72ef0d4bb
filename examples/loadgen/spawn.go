package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// spawnApps maps -spawn to the example server's directory under examples/.
var spawnApps = map[string]string{"gin": "gin-orders", "echo": "echo-orders"}

const examplesPkg = "github.com/idemkit/idem/examples/"

const (
	buildTimeout = 10 * time.Minute
	readyTimeout = 90 * time.Second // the server connects and creates its schema first
	stopTimeout  = 15 * time.Second
	maxLog       = 1 << 20 // of the server's output kept, to print when something fails
)

// buildServer compiles the example server app ("gin-orders" or "echo-orders") into dir
// with the go command, which must run inside the idem module, and returns the binary.
func buildServer(ctx context.Context, app, dir string, race bool) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("-spawn needs the go command to build %s: %w", app, err)
	}
	bin := filepath.Join(dir, app)
	args := []string{"build"}
	if race {
		args = append(args, "-race")
	}
	args = append(args, "-o", bin, examplesPkg+app)
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, goBin, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s (run loadgen from inside the idem module): %w\n%s", strings.Join(args, " "), err, out)
	}
	return bin, nil
}

// server is a running example server.
type server struct {
	url   string // http://127.0.0.1:PORT
	store string // which database and store it runs on, from its log
	cmd   *exec.Cmd
	out   *serverLog
	done  chan struct{} // closed when the process has exited
	err   error         // cmd.Wait's, once done is closed
}

var (
	listening = regexp.MustCompile(`listening on (127\.0\.0\.1:[0-9]+)`)
	storeAttr = regexp.MustCompile(`store=("(?:[^"\\]|\\.)*"|\S+)`)
)

// startServer runs bin in dir with args on a free loopback port and waits until it logs
// "listening on". Its environment has none of the variables that configure the example
// servers, so args alone do. Stop it with stop.
func startServer(ctx context.Context, bin, dir string, args ...string) (*server, error) {
	cmd := exec.Command(bin, append([]string{"-addr", "127.0.0.1:0"}, args...)...)
	cmd.Dir = dir
	cmd.Env = serverEnv()
	out := &serverLog{ready: make(chan string, 1)}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &server{cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		s.err = cmd.Wait()
		close(s.done)
	}()
	timer := time.NewTimer(readyTimeout)
	defer timer.Stop()
	select {
	case line := <-out.ready:
		s.url = "http://" + listening.FindStringSubmatch(line)[1]
		if m := storeAttr.FindStringSubmatch(line); m != nil {
			s.store = strings.Trim(m[1], `"`)
		}
		return s, nil
	case <-s.done:
		return nil, fmt.Errorf("%s exited before listening (%v):\n%s", filepath.Base(bin), s.err, out)
	case <-timer.C:
		err := fmt.Errorf("%s did not log \"listening on\" within %s:\n%s", filepath.Base(bin), readyTimeout, out)
		_ = s.stop()
		return nil, err
	case <-ctx.Done():
		_ = s.stop()
		return nil, ctx.Err()
	}
}

// stop sends SIGTERM, waits for the exit, and kills the process if it takes longer than
// stopTimeout. It returns an error unless the server exited with status 0.
func (s *server) stop() error {
	select {
	case <-s.done:
		return s.exitErr()
	default:
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		_ = s.cmd.Process.Kill()
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-s.done:
		return s.exitErr()
	case <-timer.C:
		_ = s.cmd.Process.Kill()
		<-s.done
		return fmt.Errorf("the server did not exit within %s of SIGTERM: killed", stopTimeout)
	}
}

func (s *server) exitErr() error {
	if s.err != nil {
		return fmt.Errorf("the server exited: %w", s.err)
	}
	return nil
}

// serverEnv is this process's environment without what configures the example servers.
// A -race server (the tests build one) exits without the race runtime's default 1 s
// sleep unless GORACE says otherwise.
func serverEnv() []string {
	var env []string
	if _, set := os.LookupEnv("GORACE"); !set {
		env = append(env, "GORACE=atexit_sleep_ms=50")
	}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name == "ADDR" || name == "DATABASE_URL" || name == "REDIS_ADDR" || name == "LOG_LEVEL" || strings.HasPrefix(name, "IDEM_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// serverLog keeps the server's output (up to maxLog bytes) and sends its "listening on"
// line to ready once.
type serverLog struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	ready chan string
	seen  bool
}

func (o *serverLog) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if room := maxLog - o.buf.Len(); room > 0 {
		o.buf.Write(p[:min(len(p), room)])
	}
	if !o.seen {
		for line := range bytes.Lines(o.buf.Bytes()) {
			if bytes.HasSuffix(line, []byte("\n")) && listening.Match(line) { // a whole line: the port is complete
				o.seen = true
				o.ready <- string(line)
				break
			}
		}
	}
	return len(p), nil
}

func (o *serverLog) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// spawn builds the server cfg.spawn names into a temporary directory and starts it
// there. cleanup stops it and removes the directory.
func spawn(ctx context.Context, cfg config) (s *server, cleanup func() error, err error) {
	dir, err := os.MkdirTemp("", "idem-loadgen-")
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	bin, err := buildServer(ctx, spawnApps[cfg.spawn], dir, false)
	if err != nil {
		return nil, nil, err
	}
	var args []string
	if cfg.db != "" {
		args = append(args, "-db", cfg.db)
	}
	if cfg.store != "" {
		args = append(args, "-store", cfg.store)
	}
	s, err = startServer(ctx, bin, dir, args...)
	if err != nil {
		return nil, nil, err
	}
	return s, func() error {
		err := s.stop()
		if err != nil {
			err = errors.Join(err, fmt.Errorf("its output:\n%s", s.out))
		}
		return errors.Join(err, os.RemoveAll(dir))
	}, nil
}
