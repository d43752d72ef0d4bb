// Package redistopo starts real Redis topologies for tests, with the machine's
// redis-server on free loopback ports in a temporary directory: a Redis Cluster of three
// masters with one replica each (StartCluster), and a Sentinel group of a master, a
// replica and three sentinels (StartSentinel). Nothing is mocked; a test can SIGKILL a
// master (Server.Kill) and bring it back as a replica (Cluster.Heal, Sentinel.Heal).
//
// Every process runs in a process group of its own, is killed with its group when the
// topology stops, and gets SIGKILL from the kernel if the test binary dies first (a
// panic, a timeout, a SIGKILL; internal/testproc): no redis-server outlives the tests
// that started it. A
// test binary shares one cluster and one sentinel group between its tests through
// SharedCluster and SharedSentinel, stopped by StopShared in its TestMain; a test that
// kills a node starts a topology of its own (NewCluster, NewSentinel).
//
// Test support only.
package redistopo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testproc"
)

// Binary is the redis-server command the topologies run (a sentinel is redis-server
// with --sentinel).
const Binary = "redis-server"

// pollEvery is how often a readiness check looks again.
const pollEvery = 20 * time.Millisecond

// Server is one redis-server process (a data node or a sentinel) of a topology. Its
// port, directory and configuration stay the same across Kill and Start, so a restarted
// node keeps its cluster identity (nodes.conf).
type Server struct {
	// Addr is the server's host:port on the loopback interface.
	Addr string
	// Port is Addr's port; BusPort the cluster bus port (cluster nodes only).
	Port, BusPort int

	dir  string // working directory: configuration, log, nodes.conf
	conf string // configuration file
	body string // the configuration after the port lines
	bus  bool   // a cluster node: it has a bus port
	args []string

	mu   sync.Mutex
	proc *testproc.Process // nil when the server does not run
}

// newServer prepares a server in a directory of its own under root, on a free port,
// writing conf (without its port lines) to its configuration file. Nothing runs yet.
func newServer(root, name, conf string, bus bool, extraArgs ...string) (*Server, error) {
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("redistopo: %w", err)
	}
	s := &Server{dir: dir, conf: filepath.Join(dir, "redis.conf"), body: conf, bus: bus, args: extraArgs}
	if err := s.pickPorts(); err != nil {
		return nil, err
	}
	return s, nil
}

// pickPorts chooses free loopback ports and writes the configuration with them.
func (s *Server) pickPorts() error {
	port, err := freePort()
	if err != nil {
		return err
	}
	s.Port, s.Addr = port, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	head := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\n", port, s.dir)
	if s.bus {
		if s.BusPort, err = freePort(); err != nil {
			return err
		}
		head += fmt.Sprintf("cluster-port %d\n", s.BusPort)
	}
	if err := os.WriteFile(s.conf, []byte(head+s.body), 0o644); err != nil {
		return fmt.Errorf("redistopo: %w", err)
	}
	return nil
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redistopo: find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// logFile is the server's output.
func (s *Server) logFile() string { return filepath.Join(s.dir, "redis.log") }

// Log returns the end of the server's output, for a failure message.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.logFile())
	const tail = 2000
	if len(b) > tail {
		b = b[len(b)-tail:]
	}
	return string(b)
}

// Running reports whether the server's process runs.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil
}

// errPortTaken reports that another process answers on a server's port.
var errPortTaken = errors.New("another process answers on the port")

// firstStart starts a new server, choosing other ports when another process took its
// own between pickPorts and the start.
func (s *Server) firstStart(ctx context.Context) error {
	for try := 0; ; try++ {
		err := s.Start(ctx)
		if err == nil || try == 4 || !errors.Is(err, errPortTaken) && !strings.Contains(s.Log(), "Address already in use") {
			return err
		}
		if err := os.Truncate(s.logFile(), 0); err != nil {
			return fmt.Errorf("redistopo: %w", err)
		}
		if err := s.pickPorts(); err != nil {
			return err
		}
	}
}

// Start runs the server, if it does not run, and waits until it answers, as itself: a
// server that another process (another test's Redis or proxy) answers for, having taken
// its port, is killed and Start fails with an error wrapping errPortTaken.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.proc != nil {
		s.mu.Unlock()
		return nil
	}
	// The process dies with the test binary however it exits (testproc): a test binary
	// that panics or times out leaves no redis-server behind.
	p, err := testproc.User{}.Start(s.dir, s.logFile(), Binary, append([]string{s.conf}, s.args...)...)
	s.proc = p
	s.mu.Unlock()
	if err != nil {
		return err
	}
	c := s.client()
	defer c.Close()
	err = poll(ctx, func(ctx context.Context) (string, error) {
		select {
		case <-p.Done():
			return "", fmt.Errorf("redis-server %s exited at start", s.Addr)
		default:
		}
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			return "no answer to INFO: " + err.Error(), nil
		}
		if pid := fields(info, ":")["process_id"]; pid != strconv.Itoa(p.Pid) {
			return "", fmt.Errorf("redis-server %s (pid %d): process %s answers: %w", s.Addr, p.Pid, pid, errPortTaken)
		}
		return "", nil
	})
	if err != nil {
		_ = s.Kill()
		return fmt.Errorf("redistopo: start %s: %w\n%s", s.Addr, err, s.Log())
	}
	return nil
}

// Kill SIGKILLs the server's process group (the server and any child it forked to
// replicate) and waits for the server to exit. It does nothing if the server does not
// run.
func (s *Server) Kill() error {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	if err := p.Kill(); err != nil {
		return fmt.Errorf("redistopo: kill %s: %w", s.Addr, err)
	}
	return nil
}

// client returns a new client of the server alone (no cluster redirection), with
// timeouts short enough for polling; the caller closes it.
func (s *Server) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr, DialTimeout: time.Second, ReadTimeout: time.Second,
		WriteTimeout: time.Second, MaxRetries: -1, PoolSize: 2, ContextTimeoutEnabled: true})
}

// Do runs one command on the server alone and returns its reply.
func (s *Server) Do(ctx context.Context, args ...any) (any, error) {
	c := s.client()
	defer c.Close()
	return c.Do(ctx, args...).Result()
}

// info returns the fields of INFO section on the server.
func (s *Server) info(ctx context.Context, section string) (map[string]string, error) {
	c := s.client()
	defer c.Close()
	txt, err := c.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	return fields(txt, ":"), nil
}

// fields parses "name<sep>value" lines.
func fields(txt, sep string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(txt, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), sep); ok {
			m[k] = v
		}
	}
	return m
}

// poll is testproc.Poll at pollEvery.
func poll(ctx context.Context, cond func(ctx context.Context) (missing string, err error)) error {
	return testproc.Poll(ctx, pollEvery, cond)
}

// StartServer starts a standalone redis-server (no persistence) in a new temporary
// directory and waits until it answers; stop kills it and removes the directory.
func StartServer(ctx context.Context) (s *Server, stop func() error, err error) {
	root, err := os.MkdirTemp("", "idem-redis-server-")
	if err != nil {
		return nil, nil, fmt.Errorf("redistopo: %w", err)
	}
	stop = func() error { return stopAll(root, []*Server{s}) }
	if s, err = newServer(root, "server", dataConf, false); err == nil {
		err = s.firstStart(ctx)
	}
	if err != nil {
		if s == nil {
			return nil, nil, errors.Join(err, os.RemoveAll(root))
		}
		return nil, nil, errors.Join(err, stop())
	}
	return s, stop, nil
}

// stopAll kills every server, in parallel, and removes root.
func stopAll(root string, servers []*Server) error {
	var wg sync.WaitGroup
	errs := make([]error, len(servers))
	for i, s := range servers {
		wg.Go(func() { errs[i] = s.Kill() })
	}
	wg.Wait()
	if root != "" {
		errs = append(errs, os.RemoveAll(root))
	}
	return errors.Join(errs...)
}
