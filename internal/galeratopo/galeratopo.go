// Package galeratopo starts a three-node MariaDB Galera cluster for tests, from the
// machine's mariadbd and the Galera provider its packages install
// (/usr/lib/galera/libgalera_smm.so, or IDEM_GALERA_PROVIDER), on free loopback ports in a
// directory the test owns. The first node bootstraps the cluster; the others join it with
// an rsync state transfer. A test SIGKILLs nodes (Node.Kill) and brings them back (Heal,
// each rejoining with a state transfer).
//
// Every server runs in a process group of its own, killed with its group (the state
// transfer's rsync included) when the cluster stops or the test binary dies
// (internal/testproc). Run as root, the servers run as the mysql user.
//
// The nodes run with innodb_autoinc_lock_mode=2 and binlog_format=ROW, as Galera
// requires, and innodb_flush_log_at_trx_commit=0: the tests kill processes, and Galera's
// durability is the other nodes.
//
// Its tests are internal/failover's TestGalera (start, kill, quorum lost; Heal between
// kills with IDEM_GALERA_KILLS above 1): a cluster takes half a minute to start, so it
// starts once.
//
// Test support only.
package galeratopo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/internal/testproc"
)

// StartTimeout bounds the start of a cluster and a Heal: about 10 s on an idle machine.
const StartTimeout = 3 * time.Minute

// Size is the number of nodes.
const Size = 3

// Database is the database StartCluster creates on the cluster for the tests.
const Database = "idem"

// defaultProvider is where Debian's galera-4 package installs the provider.
const defaultProvider = "/usr/lib/galera/libgalera_smm.so"

// Cluster is a running Galera cluster of Size nodes.
type Cluster struct {
	Nodes [Size]*Node

	root     string
	provider string
	as       testproc.User
	once     sync.Once
	err      error
}

// Node is one mariadbd of the cluster. Its ports and data directory stay the same across
// Kill and Heal.
type Node struct {
	// Port is the node's SQL port on 127.0.0.1.
	Port int
	// GaleraPort is its group communication port.
	GaleraPort int
	istPort    int
	sstPort    int
	name       string
	dir        string
	c          *Cluster

	// Slot holds the server's process: Running, Kill.
	testproc.Slot
}

// New starts a cluster in a directory of the test's own, stopped when the test ends. It
// fails the test when the cluster cannot start.
func New(t testing.TB) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	c, err := Start(ctx, t.TempDir())
	if err != nil {
		t.Fatalf("galeratopo: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("galeratopo: stop: %v", err)
		}
	})
	return c
}

// Start starts a cluster under root, waits until every node is synced in one primary
// component, and creates Database. On failure it stops what it started.
func Start(ctx context.Context, root string) (*Cluster, error) {
	provider := os.Getenv("IDEM_GALERA_PROVIDER")
	if provider == "" {
		provider = defaultProvider
	}
	if _, err := os.Stat(provider); err != nil {
		return nil, fmt.Errorf("galeratopo: the Galera provider (install galera-4, or set IDEM_GALERA_PROVIDER): %w", err)
	}
	as, err := testproc.As("mysql")
	if err != nil {
		return nil, err
	}
	c := &Cluster{root: root, provider: provider, as: as}
	if err := as.Own(root); err != nil {
		return nil, err
	}
	if err := c.start(ctx); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context) error {
	for i := range c.Nodes {
		n := &Node{name: "node" + strconv.Itoa(i), c: c}
		n.dir = filepath.Join(c.root, n.name)
		for _, p := range []*int{&n.Port, &n.GaleraPort, &n.istPort, &n.sstPort} {
			port, err := testproc.FreePort()
			if err != nil {
				return err
			}
			*p = port
		}
		if err := c.as.Own(n.dir); err != nil {
			return err
		}
		if err := c.as.Own(n.dataDir()); err != nil {
			return err
		}
		c.Nodes[i] = n
	}
	first := c.Nodes[0]
	if err := c.as.Run(ctx, "mariadb-install-db", "--no-defaults", "--datadir="+first.dataDir(),
		"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve"); err != nil {
		return err
	}
	if err := first.start(ctx, "--wsrep-new-cluster"); err != nil {
		return err
	}
	if err := c.WaitSynced(ctx, first); err != nil {
		return err
	}
	for _, n := range c.Nodes[1:] {
		if err := n.start(ctx); err != nil {
			return err
		}
	}
	if err := c.WaitSynced(ctx, c.Nodes[:]...); err != nil {
		return err
	}
	db, err := first.open("")
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+Database); err != nil {
		return fmt.Errorf("galeratopo: %w", err)
	}
	return nil
}

// Stop kills every node. Later calls return the first call's result.
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

// Heal starts every node that does not run (it rejoins the running ones with a state
// transfer) and waits until all are synced in one primary component.
func (c *Cluster) Heal(ctx context.Context) error {
	for _, n := range c.Nodes {
		if !n.Running() {
			if err := n.start(ctx); err != nil {
				return err
			}
		}
	}
	return c.WaitSynced(ctx, c.Nodes[:]...)
}

// WaitSynced waits until each of nodes is ready, synced, in a primary component of as
// many nodes as run.
func (c *Cluster) WaitSynced(ctx context.Context, nodes ...*Node) error {
	running := 0
	for _, n := range c.Nodes {
		if n != nil && n.Running() {
			running++
		}
	}
	for _, n := range nodes {
		err := testproc.Poll(ctx, 100*time.Millisecond, func(ctx context.Context) (string, error) {
			if !n.Running() {
				return "", fmt.Errorf("%s exited", n.name)
			}
			st, err := n.Status(ctx)
			if err != nil {
				return err.Error(), nil
			}
			if st["wsrep_ready"] != "ON" || st["wsrep_cluster_status"] != "Primary" ||
				st["wsrep_local_state_comment"] != "Synced" || st["wsrep_cluster_size"] != strconv.Itoa(running) {
				return fmt.Sprintf("%s: ready %s, %s, %s, cluster of %s (want %d)", n.name, st["wsrep_ready"],
					st["wsrep_cluster_status"], st["wsrep_local_state_comment"], st["wsrep_cluster_size"], running), nil
			}
			return "", nil
		})
		if err != nil {
			return fmt.Errorf("galeratopo: %w\n%s", err, n.Log())
		}
	}
	return nil
}

// Status returns the node's wsrep status variables.
func (n *Node) Status(ctx context.Context) (map[string]string, error) {
	db, err := n.open("")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SHOW GLOBAL STATUS LIKE 'wsrep%'")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		m[k] = v
	}
	return m, rows.Err()
}

// DSN returns a go-sql-driver/mysql DSN of database db on this node alone, with
// parseTime.
func (n *Node) DSN(db string) string {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr, cfg.DBName, cfg.ParseTime = "root", "tcp", fmt.Sprintf("127.0.0.1:%d", n.Port), db, true
	cfg.Timeout = 2 * time.Second
	return cfg.FormatDSN()
}

// Log returns the end of the node's error log.
func (n *Node) Log() string { return testproc.Tail(filepath.Join(n.dir, "error.log")) }

func (n *Node) dataDir() string { return filepath.Join(n.dir, "data") }
func (n *Node) conf() string    { return filepath.Join(n.dir, "my.cnf") }

// config is the node's my.cnf.
func (n *Node) config() string {
	return fmt.Sprintf(`[mysqld]
datadir=%[1]s/data
socket=%[1]s/mysqld.sock
pid-file=%[1]s/mysqld.pid
log-error=%[1]s/error.log
port=%[2]d
bind-address=127.0.0.1
skip-name-resolve
binlog_format=ROW
default_storage_engine=InnoDB
innodb_autoinc_lock_mode=2
innodb_flush_log_at_trx_commit=0
innodb_buffer_pool_size=32M
innodb_log_file_size=16M
max_connections=200
wsrep_on=ON
wsrep_provider=%[3]s
wsrep_cluster_name=idem
wsrep_cluster_address=gcomm://%[4]s
wsrep_node_name=%[5]s
wsrep_node_address=127.0.0.1:%[6]d
wsrep_node_incoming_address=127.0.0.1:%[2]d
wsrep_provider_options="gcache.size=32M;ist.recv_addr=127.0.0.1:%[7]d"
wsrep_sst_method=rsync
wsrep_sst_receive_address=127.0.0.1:%[8]d
wsrep_slave_threads=2
`, n.dir, n.Port, n.c.provider, peersOf(n.c), n.name, n.GaleraPort, n.istPort, n.sstPort)
}

// peersOf lists every node's group communication address known so far.
func peersOf(c *Cluster) string {
	var peers []string
	for _, p := range c.Nodes {
		if p != nil {
			peers = append(peers, fmt.Sprintf("127.0.0.1:%d", p.GaleraPort))
		}
	}
	return strings.Join(peers, ",")
}

// start runs the node with its configuration (rewritten, so it names every node) and
// extra arguments, and waits until it answers SQL.
func (n *Node) start(ctx context.Context, extra ...string) error {
	if err := os.WriteFile(n.conf(), []byte(n.config()), 0o644); err != nil {
		return fmt.Errorf("galeratopo: %w", err)
	}
	args := append([]string{"--defaults-file=" + n.conf()}, extra...)
	p, err := n.c.as.Start("", filepath.Join(n.dir, "stdout.log"), "mariadbd", args...)
	if err != nil {
		return err
	}
	n.Set(p)
	err = testproc.Poll(ctx, 100*time.Millisecond, func(ctx context.Context) (string, error) {
		if p.Exited() {
			return "", errors.New("mariadbd exited at start")
		}
		db, err := n.open("")
		if err != nil {
			return err.Error(), nil
		}
		defer db.Close()
		var dir string
		if err := db.QueryRowContext(ctx, "SELECT @@datadir").Scan(&dir); err != nil {
			return err.Error(), nil
		}
		if filepath.Clean(dir) != n.dataDir() {
			return "", fmt.Errorf("another server (%s) answers on port %d", dir, n.Port)
		}
		return "", nil
	})
	if err != nil {
		_ = n.Kill()
		return fmt.Errorf("galeratopo: start %s on %d: %w\n%s", n.name, n.Port, err, n.Log())
	}
	return nil
}

// open opens a one-connection pool on the node.
func (n *Node) open(db string) (*sql.DB, error) {
	d, err := sql.Open("mysql", n.DSN(db))
	if err != nil {
		return nil, fmt.Errorf("galeratopo: %w", err)
	}
	d.SetMaxOpenConns(1)
	return d, nil
}
