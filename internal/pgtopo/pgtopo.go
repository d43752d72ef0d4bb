// Package pgtopo starts a PostgreSQL primary with a streaming standby for tests, from the
// machine's PostgreSQL binaries (pg_config --bindir, or IDEM_PG_BIN) on free loopback
// ports, in a directory the test owns: initdb, pg_basebackup -R -X stream, and a
// promotion with pg_promote. Replication is synchronous (synchronous_standby_names '*')
// or asynchronous. A test SIGKILLs the primary (KillPrimary), promotes the standby
// (Promote) and rebuilds the killed node as the new primary's standby on its old port
// (Heal), so a multi-host URL over both ports (URL) stays valid across any number of
// failovers.
//
// Every server runs in a process group of its own, killed with its group when the
// topology stops or the test binary dies (internal/testproc). Run as root, the servers
// run as the postgres user.
//
// The servers run with fsync off: the tests kill processes, not the machine, and the
// page cache survives a SIGKILL. The standby sets wal_retrieve_retry_interval to 100ms:
// with the default 5s a promotion right after the primary's death waits that long.
//
// Test support only.
package pgtopo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/testproc"
)

// StartTimeout bounds the start of a topology and a Heal: a few seconds on an idle
// machine, much more on a loaded one.
const StartTimeout = 2 * time.Minute

// Database is the database every node serves (initdb's own).
const Database = "postgres"

// Cluster is a running primary and standby.
type Cluster struct {
	// Nodes are the two servers: Nodes[0] is the primary at the start; a failover swaps
	// the roles (Primary and Standby tell them).
	Nodes [2]*Node
	// Sync reports synchronous replication: a commit on the primary returns once the
	// standby has flushed it.
	Sync bool

	root string
	bin  string
	as   testproc.User

	mu      sync.Mutex
	primary int // index in Nodes
	once    sync.Once
	err     error
}

// Node is one server. Its port stays the same across Kill and a rebuild by Heal.
type Node struct {
	// Port is the server's port on 127.0.0.1.
	Port int
	name string
	c    *Cluster

	// Slot holds the server's process: Running, Kill.
	testproc.Slot

	mu  sync.Mutex
	dir string // the current data directory (a rebuild makes a new one)
	gen int
}

// New starts a topology in a directory of the test's own, stopped when the test ends. It
// fails the test when the topology cannot start.
func New(t testing.TB, sync bool) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	c, err := Start(ctx, t.TempDir(), sync)
	if err != nil {
		t.Fatalf("pgtopo: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("pgtopo: stop: %v", err)
		}
	})
	return c
}

// Start starts a primary and a standby under root and waits until the standby streams
// (and, with sync, until the primary counts it as its synchronous standby). On failure it
// stops what it started.
func Start(ctx context.Context, root string, sync bool) (*Cluster, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	as, err := testproc.As("postgres")
	if err != nil {
		return nil, err
	}
	c := &Cluster{Sync: sync, root: root, bin: bin, as: as}
	if err := as.Own(root); err != nil {
		return nil, err
	}
	if err := c.start(ctx); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	return c, nil
}

// binDir finds the PostgreSQL binaries: IDEM_PG_BIN, or pg_config --bindir.
func binDir() (string, error) {
	if d := os.Getenv("IDEM_PG_BIN"); d != "" {
		return d, nil
	}
	out, err := exec.Command("pg_config", "--bindir").Output()
	if err != nil {
		return "", fmt.Errorf("pgtopo: find the PostgreSQL binaries (set IDEM_PG_BIN, or install pg_config): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func (c *Cluster) start(ctx context.Context) error {
	for i := range c.Nodes {
		c.Nodes[i] = &Node{name: "node" + strconv.Itoa(i), c: c}
	}
	p := c.Nodes[0]
	if err := c.initPrimary(ctx, p); err != nil {
		return err
	}
	return c.rebuild(ctx, c.Nodes[1], p)
}

// conf is every node's configuration after initdb's.
func (c *Cluster) conf(port int) string {
	sync := ""
	if c.Sync {
		sync = "*"
	}
	return fmt.Sprintf(`listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = ''
max_connections = 60
shared_buffers = 16MB
fsync = off
wal_level = replica
max_wal_senders = 4
wal_keep_size = 64MB
hot_standby = on
wal_retrieve_retry_interval = 100ms
wal_receiver_status_interval = 1s
synchronous_standby_names = '%s'
log_min_messages = warning
`, port, sync)
}

// initPrimary makes a new cluster with initdb on a free port and starts it, choosing
// another port when another process took it first.
func (c *Cluster) initPrimary(ctx context.Context, n *Node) error {
	dir := n.nextDir()
	if err := c.as.Own(dir); err != nil {
		return err
	}
	if err := c.as.Run(ctx, filepath.Join(c.bin, "initdb"), "-D", dir, "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"); err != nil {
		return err
	}
	for try := 0; ; try++ {
		port, err := testproc.FreePort()
		if err != nil {
			return err
		}
		n.Port = port
		if err := appendFile(filepath.Join(dir, "postgresql.auto.conf"), c.conf(port)); err != nil {
			return err
		}
		err = n.start(ctx)
		if err == nil || try == 4 || !strings.Contains(testproc.Tail(n.logFile()), "could not bind") {
			return err
		}
	}
}

// rebuild makes n a new standby of primary from a base backup, on n's port (a free one
// for a new node), starts it and waits until it streams.
func (c *Cluster) rebuild(ctx context.Context, n, primary *Node) error {
	if n.Port == 0 {
		port, err := testproc.FreePort()
		if err != nil {
			return err
		}
		n.Port = port
	}
	old := n.dataDir()
	dir := n.nextDir()
	if err := c.as.Own(dir); err != nil {
		return err
	}
	if err := c.as.Run(ctx, filepath.Join(c.bin, "pg_basebackup"), "-h", "127.0.0.1", "-p", strconv.Itoa(primary.Port),
		"-U", "postgres", "-D", dir, "-R", "-X", "stream", "-c", "fast", "--no-sync"); err != nil {
		return err
	}
	if old != "" {
		_ = os.RemoveAll(old)
	}
	// A standby never waits for a standby of its own once promoted: it has none until
	// Heal gives it one and names it synchronous.
	if err := appendFile(filepath.Join(dir, "postgresql.auto.conf"),
		fmt.Sprintf("port = %d\nsynchronous_standby_names = ''\n", n.Port)); err != nil {
		return err
	}
	if err := n.start(ctx); err != nil {
		return err
	}
	return c.awaitStreaming(ctx, primary, n)
}

// awaitStreaming waits until primary sees standby streaming and, with Sync, names it its
// synchronous standby.
func (c *Cluster) awaitStreaming(ctx context.Context, primary, standby *Node) error {
	if c.Sync {
		if err := primary.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = '*'"); err != nil {
			return err
		}
		if err := primary.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
			return err
		}
	}
	want := "async"
	if c.Sync {
		want = "sync"
	}
	err := testproc.Poll(ctx, 50*time.Millisecond, func(ctx context.Context) (string, error) {
		conn, err := primary.connect(ctx)
		if err != nil {
			return "primary: " + err.Error(), nil
		}
		defer conn.Close(context.Background())
		var state, mode string
		err = conn.QueryRow(ctx, `SELECT state, sync_state FROM pg_stat_replication LIMIT 1`).Scan(&state, &mode)
		if err != nil {
			return "pg_stat_replication: " + err.Error(), nil
		}
		if state != "streaming" || mode != want {
			return fmt.Sprintf("standby %s, %s (want streaming, %s)", state, mode, want), nil
		}
		return "", nil
	})
	if err != nil {
		return fmt.Errorf("pgtopo: standby %d does not stream from %d: %w\n%s", standby.Port, primary.Port, err, testproc.Tail(standby.logFile()))
	}
	return nil
}

// Stop kills every server. Later calls return the first call's result.
func (c *Cluster) Stop() error {
	c.once.Do(func() {
		var errs []error
		for _, n := range c.Nodes {
			if n != nil {
				errs = append(errs, n.Kill())
			}
		}
		c.err = errors.Join(errs...)
	})
	return c.err
}

// Primary returns the node that is (or was, until a promotion) the primary.
func (c *Cluster) Primary() *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Nodes[c.primary]
}

// Standby returns the other node.
func (c *Cluster) Standby() *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Nodes[1-c.primary]
}

// URL returns a multi-host URL over both nodes with target_session_attrs=read-write, as
// an application writes it: a connection goes to whichever node accepts writes. params
// are added to the query ("pool_max_conns=4"…).
func (c *Cluster) URL(params ...string) string {
	q := append([]string{"sslmode=disable", "target_session_attrs=read-write"}, params...)
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?%s",
		c.Nodes[0].Port, c.Nodes[1].Port, Database, strings.Join(q, "&"))
}

// KillPrimary SIGKILLs the primary's process group and reports when the signal was sent
// and when the postmaster had exited.
func (c *Cluster) KillPrimary() (sent, exited time.Time, err error) {
	p := c.Primary()
	sent = time.Now()
	err = p.Kill()
	return sent, time.Now(), err
}

// Promote promotes the standby (pg_promote, waiting for its end) and makes it the
// primary. It returns when the node accepts writes.
func (c *Cluster) Promote(ctx context.Context) error {
	s := c.Standby()
	var ok bool
	err := testproc.Poll(ctx, 20*time.Millisecond, func(ctx context.Context) (string, error) {
		conn, err := s.connect(ctx)
		if err != nil {
			return "standby: " + err.Error(), nil
		}
		defer conn.Close(context.Background())
		if err := conn.QueryRow(ctx, "SELECT pg_promote(true, 60)").Scan(&ok); err != nil {
			return "pg_promote: " + err.Error(), nil
		}
		return "", nil
	})
	if err == nil && !ok {
		err = errors.New("pg_promote answered false")
	}
	if err != nil {
		return fmt.Errorf("pgtopo: promote %d: %w\n%s", s.Port, err, testproc.Tail(s.logFile()))
	}
	c.mu.Lock()
	c.primary = 1 - c.primary
	c.mu.Unlock()
	return nil
}

// Heal rebuilds every node that does not run as a standby of the primary, on its own
// port, and waits until it streams (synchronously with Sync). Call it after Promote.
func (c *Cluster) Heal(ctx context.Context) error {
	p, s := c.Primary(), c.Standby()
	if !p.Running() {
		return fmt.Errorf("pgtopo: heal: the primary %d does not run; promote the standby first", p.Port)
	}
	_ = s.Kill()
	return c.rebuild(ctx, s, p)
}

// URL returns a URL of this node alone.
func (n *Node) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", n.Port, Database)
}

// Exec runs a statement on this node alone.
func (n *Node) Exec(ctx context.Context, sql string, args ...any) error {
	conn, err := n.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("pgtopo: %d: %s: %w", n.Port, sql, err)
	}
	return nil
}

// Log returns the end of the node's server log.
func (n *Node) Log() string { return testproc.Tail(n.logFile()) }

func (n *Node) logFile() string { return filepath.Join(n.c.root, n.name+".log") }

func (n *Node) dataDir() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.dir
}

// nextDir names a new data directory for the node.
func (n *Node) nextDir() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.gen++
	n.dir = filepath.Join(n.c.root, fmt.Sprintf("%s-%d", n.name, n.gen))
	return n.dir
}

// start runs the server on the node's data directory and waits until it answers as
// itself (its data_directory).
func (n *Node) start(ctx context.Context) error {
	dir := n.dataDir()
	p, err := n.c.as.Start("", n.logFile(), filepath.Join(n.c.bin, "postgres"), "-D", dir)
	if err != nil {
		return err
	}
	n.Set(p)
	err = testproc.Poll(ctx, 20*time.Millisecond, func(ctx context.Context) (string, error) {
		if p.Exited() {
			return "", errors.New("postgres exited at start")
		}
		conn, err := n.connect(ctx)
		if err != nil {
			return err.Error(), nil
		}
		defer conn.Close(context.Background())
		var got string
		if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&got); err != nil {
			return err.Error(), nil
		}
		if got != dir {
			return "", fmt.Errorf("another server (%s) answers on port %d", got, n.Port)
		}
		return "", nil
	})
	if err != nil {
		_ = n.Kill()
		return fmt.Errorf("pgtopo: start %s on %d: %w\n%s", dir, n.Port, err, n.Log())
	}
	return nil
}

func (n *Node) connect(ctx context.Context) (*pgx.Conn, error) {
	return pgx.Connect(ctx, n.URL()+"&connect_timeout=2")
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pgtopo: %w", err)
	}
	_, err = f.WriteString(text)
	return errors.Join(err, f.Close())
}

// CutReplicationWaits cancels, every 20ms until stop is called, every backend of the
// node that waits for its synchronous standby (pg_cancel_backend, as an operator
// would): PostgreSQL then answers its COMMIT with success and the warning that the
// transaction "might not have been replicated". stop waits for the loop to end.
func (n *Node) CutReplicationWaits() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond): // polling pg_stat_activity for waiters
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = n.Exec(ctx, `SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'`)
			cancel()
		}
	})
	return func() { close(done); wg.Wait() }
}
