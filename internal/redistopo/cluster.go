package redistopo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// NodeTimeout is the cluster-node-timeout of the clusters StartCluster makes: a master
// unreachable for that long is failed, and its replica promoted (about twice that after
// the master dies).
const NodeTimeout = 2 * time.Second

// clusterConf is a cluster node's configuration after its port lines: no persistence
// (a restarted node comes back empty and takes its data from its master), failover even
// of a replica that lost its link a while ago, and replication that starts at once.
var clusterConf = `cluster-enabled yes
cluster-config-file nodes.conf
cluster-node-timeout ` + strconv.FormatInt(NodeTimeout.Milliseconds(), 10) + `
cluster-replica-validity-factor 0
save ""
appendonly no
protected-mode no
repl-diskless-sync yes
repl-diskless-sync-delay 0
`

// Cluster is a running Redis Cluster of masters, each with one replica (three masters
// unless started with StartClusterOf).
type Cluster struct {
	// Nodes are the cluster's nodes: at the start Nodes[i] (i < the number of masters)
	// is a master and Nodes[i+masters] its replica; a failover swaps the roles (Masters
	// tells them).
	Nodes   []*Server
	masters int
	root    string
	once    sync.Once
	err     error
}

// StartCluster starts a cluster of three masters, each with a replica, in a new
// temporary directory and waits until it is healthy (Cluster.WaitHealthy). On failure
// it stops what it started.
func StartCluster(ctx context.Context) (*Cluster, error) { return StartClusterOf(ctx, 3) }

// StartClusterOf starts a cluster of masters masters, each with a replica, the slots
// split evenly between the masters, as StartCluster does.
func StartClusterOf(ctx context.Context, masters int) (*Cluster, error) {
	if masters < 1 {
		return nil, fmt.Errorf("redistopo: a cluster of %d masters", masters)
	}
	root, err := os.MkdirTemp("", "idem-redis-cluster-")
	if err != nil {
		return nil, fmt.Errorf("redistopo: %w", err)
	}
	c := &Cluster{root: root, masters: masters}
	if err := c.start(ctx); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context) error {
	m := c.masters
	for i := range 2 * m {
		s, err := newServer(c.root, "node"+strconv.Itoa(i), clusterConf, true)
		if err != nil {
			return err
		}
		c.Nodes = append(c.Nodes, s)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(c.Nodes))
	for i, s := range c.Nodes {
		wg.Go(func() { errs[i] = s.firstStart(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	ids := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		id, err := s.Do(ctx, "cluster", "myid")
		if err != nil {
			return fmt.Errorf("redistopo: CLUSTER MYID on %s: %w", s.Addr, err)
		}
		ids[i], _ = id.(string)
	}
	for i := range m { // the slots in m ranges
		lo, hi := i*Slots/m, (i+1)*Slots/m-1
		if _, err := c.Nodes[i].Do(ctx, "cluster", "addslotsrange", lo, hi); err != nil {
			return fmt.Errorf("redistopo: CLUSTER ADDSLOTSRANGE on %s: %w", c.Nodes[i].Addr, err)
		}
	}
	for _, s := range c.Nodes[1:] {
		if _, err := c.Nodes[0].Do(ctx, "cluster", "meet", "127.0.0.1", s.Port, s.BusPort); err != nil {
			return fmt.Errorf("redistopo: CLUSTER MEET %s: %w", s.Addr, err)
		}
	}
	// A replica can follow a master only once it knows it.
	if err := poll(ctx, func(ctx context.Context) (string, error) {
		for _, s := range c.Nodes[m:] {
			nodes, err := s.Do(ctx, "cluster", "nodes")
			if err != nil {
				return s.Addr + ": " + err.Error(), nil
			}
			for _, id := range ids[:m] {
				if !strings.Contains(fmt.Sprint(nodes), id) {
					return s.Addr + " does not know master " + id, nil
				}
			}
		}
		return "", nil
	}); err != nil {
		return fmt.Errorf("redistopo: cluster nodes never met: %w", err)
	}
	for i, s := range c.Nodes[m:] {
		if _, err := s.Do(ctx, "cluster", "replicate", ids[i]); err != nil {
			return fmt.Errorf("redistopo: CLUSTER REPLICATE on %s: %w", s.Addr, err)
		}
	}
	return c.WaitHealthy(ctx)
}

// Addrs returns the address of every node, the seed list a ClusterClient takes.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr
	}
	return addrs
}

// Stop kills every node and removes the cluster's directory. Later calls return the
// first call's result.
func (c *Cluster) Stop() error {
	c.once.Do(func() { c.err = stopAll(c.root, c.Nodes) })
	return c.err
}

// byAddr returns the node at addr ("host:port", a "@bus" suffix ignored).
func (c *Cluster) byAddr(addr string) *Server {
	addr, _, _ = strings.Cut(addr, "@")
	for _, s := range c.Nodes {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr, flags, master, link string
	slots                         bool
}

// nodesView returns a node's CLUSTER NODES.
func nodesView(ctx context.Context, s *Server) ([]clusterNode, error) {
	v, err := s.Do(ctx, "cluster", "nodes")
	if err != nil {
		return nil, err
	}
	var out []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(fmt.Sprint(v)), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		out = append(out, clusterNode{id: f[0], addr: f[1], flags: f[2], master: f[3], link: f[7], slots: len(f) > 8})
	}
	return out, nil
}

// Masters returns the nodes that serve slots as masters, as a running node sees them.
func (c *Cluster) Masters(ctx context.Context) ([]*Server, error) {
	var firstErr error
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		view, err := nodesView(ctx, s)
		if err != nil {
			firstErr = cmpOr(firstErr, err)
			continue
		}
		var ms []*Server
		for _, n := range view {
			if strings.Contains(n.flags, "master") && n.slots && !strings.Contains(n.flags, "fail") {
				if m := c.byAddr(n.addr); m != nil {
					ms = append(ms, m)
				}
			}
		}
		return ms, nil
	}
	return nil, fmt.Errorf("redistopo: no running node answered CLUSTER NODES: %w", cmpOr(firstErr, errors.New("none runs")))
}

// ReplicaOf returns the replica of master m, as m sees it.
func (c *Cluster) ReplicaOf(ctx context.Context, m *Server) (*Server, error) {
	view, err := nodesView(ctx, m)
	if err != nil {
		return nil, fmt.Errorf("redistopo: CLUSTER NODES on %s: %w", m.Addr, err)
	}
	var id string
	for _, n := range view {
		if strings.Contains(n.flags, "myself") {
			id = n.id
		}
	}
	for _, n := range view {
		if n.master == id {
			if r := c.byAddr(n.addr); r != nil {
				return r, nil
			}
		}
	}
	return nil, fmt.Errorf("redistopo: %s has no replica", m.Addr)
}

// MasterOf returns the node that serves key's hash slot as master, as a running node
// sees it.
func (c *Cluster) MasterOf(ctx context.Context, key string) (*Server, error) {
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		cl := s.client()
		slot, err := cl.ClusterKeySlot(ctx, key).Result()
		var ranges []redis.ClusterSlot
		if err == nil {
			ranges, err = cl.ClusterSlots(ctx).Result()
		}
		_ = cl.Close()
		if err != nil {
			continue
		}
		for _, r := range ranges {
			if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
				if m := c.byAddr(r.Nodes[0].Addr); m != nil {
					return m, nil
				}
			}
		}
		return nil, fmt.Errorf("redistopo: no master serves slot %d of %q", slot, key)
	}
	return nil, errors.New("redistopo: no running node answered CLUSTER SLOTS")
}

// WaitHealthy waits until every node runs and agrees on its masters covering every
// slot, each with one replica whose link to it is up.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	err := poll(ctx, func(ctx context.Context) (string, error) {
		var agreed string
		for _, s := range c.Nodes {
			if !s.Running() {
				return s.Addr + " does not run", nil
			}
			info, err := s.Do(ctx, "cluster", "info")
			if err != nil {
				return s.Addr + ": " + err.Error(), nil
			}
			ci := fields(fmt.Sprint(info), ":")
			if ci["cluster_state"] != "ok" || ci["cluster_slots_ok"] != "16384" || ci["cluster_known_nodes"] != strconv.Itoa(len(c.Nodes)) {
				return fmt.Sprintf("%s: cluster_state %s, slots ok %s, known nodes %s", s.Addr,
					ci["cluster_state"], ci["cluster_slots_ok"], ci["cluster_known_nodes"]), nil
			}
			view, err := nodesView(ctx, s)
			if err != nil {
				return s.Addr + ": " + err.Error(), nil
			}
			var roles []string
			masters := 0
			for _, n := range view {
				if strings.Contains(n.flags, "fail") || strings.Contains(n.flags, "handshake") || n.link != "connected" {
					return fmt.Sprintf("%s sees %s as %s, %s", s.Addr, n.addr, n.flags, n.link), nil
				}
				if strings.Contains(n.flags, "master") {
					if !n.slots {
						return fmt.Sprintf("%s sees master %s without slots", s.Addr, n.addr), nil
					}
					masters++
					roles = append(roles, n.id+" master")
				} else {
					roles = append(roles, n.id+" replica of "+n.master)
				}
			}
			slices.Sort(roles)
			if r := strings.Join(roles, ", "); masters != c.masters {
				return fmt.Sprintf("%s sees %d masters", s.Addr, masters), nil
			} else if agreed == "" {
				agreed = r
			} else if agreed != r {
				return "the nodes disagree on the roles", nil
			}
			repl, err := s.info(ctx, "replication")
			if err != nil {
				return s.Addr + ": " + err.Error(), nil
			}
			switch repl["role"] {
			case "master":
				if repl["connected_slaves"] != "1" || !strings.Contains(repl["slave0"], "state=online") {
					return fmt.Sprintf("master %s has %s replicas (%s)", s.Addr, repl["connected_slaves"], repl["slave0"]), nil
				}
			default:
				if repl["master_link_status"] != "up" || repl["master_sync_in_progress"] != "0" {
					return fmt.Sprintf("replica %s: link %s", s.Addr, repl["master_link_status"]), nil
				}
			}
		}
		return "", nil
	})
	if err != nil {
		return fmt.Errorf("redistopo: cluster not healthy: %w", err)
	}
	return nil
}

// WaitFailover waits until every running node sees all the cluster's masters serving
// slots, each of them running: the replica of a killed master has been promoted in its
// place.
func (c *Cluster) WaitFailover(ctx context.Context) error {
	err := poll(ctx, func(ctx context.Context) (string, error) {
		for _, s := range c.Nodes {
			if !s.Running() {
				continue
			}
			view, err := nodesView(ctx, s)
			if err != nil {
				return s.Addr + ": " + err.Error(), nil
			}
			masters := 0
			for _, n := range view {
				if !strings.Contains(n.flags, "master") || !n.slots {
					continue
				}
				if m := c.byAddr(n.addr); m == nil || !m.Running() {
					return fmt.Sprintf("%s sees %s, which does not run, as a master", s.Addr, n.addr), nil
				}
				masters++
			}
			if masters != c.masters {
				return fmt.Sprintf("%s sees %d masters", s.Addr, masters), nil
			}
		}
		return "", nil
	})
	if err != nil {
		return fmt.Errorf("redistopo: no failover: %w", err)
	}
	return nil
}

// Heal waits for the failover of every killed master (WaitFailover), restarts every node
// that does not run (a killed master comes back as the replica of the node promoted in
// its place) and waits until the cluster is healthy.
func (c *Cluster) Heal(ctx context.Context) error {
	if err := c.WaitFailover(ctx); err != nil {
		return err
	}
	for _, s := range c.Nodes {
		if err := s.Start(ctx); err != nil {
			return err
		}
	}
	return c.WaitHealthy(ctx)
}

// Epoch returns the cluster's current epoch as a running node sees it: each failover
// raises it by one.
func (c *Cluster) Epoch(ctx context.Context) (int64, error) {
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		info, err := s.Do(ctx, "cluster", "info")
		if err != nil {
			continue
		}
		return strconv.ParseInt(fields(fmt.Sprint(info), ":")["cluster_current_epoch"], 10, 64)
	}
	return 0, errors.New("redistopo: no running node answered CLUSTER INFO")
}

// cmpOr returns a unless it is nil, else b.
func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
