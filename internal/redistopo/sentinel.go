package redistopo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MasterName is the name the sentinels of StartSentinel monitor their master by
// (redis.FailoverOptions.MasterName).
const MasterName = "idem"

// DownAfter is the sentinels' down-after-milliseconds: a master that does not answer for
// that long is subjectively down; the failover follows within a second or two. Much less
// lets a sentinel on a loaded machine, whose link to a just-promoted master has not
// answered yet, fail that master over again, onto the replica still syncing from it.
const DownAfter = 2 * time.Second

// freshPing is how recent the sentinels' last answered PING to each data node must be
// for the group to count as healthy.
const freshPing = DownAfter / 2

// dataConf is the configuration of a Sentinel group's master and replica after their
// port lines.
const dataConf = `save ""
appendonly no
protected-mode no
repl-diskless-sync yes
repl-diskless-sync-delay 0
`

// Sentinel is a running Sentinel group: a master, its replica and three sentinels
// (quorum two) watching them.
type Sentinel struct {
	// Data are the master (Data[0] at the start) and the replica; a failover swaps
	// their roles (Master tells which is which).
	Data []*Server
	// Sentinels are the three sentinels.
	Sentinels []*Server
	root      string
	once      sync.Once
	err       error
}

// StartSentinel starts a Sentinel group in a new temporary directory and waits until it
// is healthy (Sentinel.WaitHealthy). On failure it stops what it started.
func StartSentinel(ctx context.Context) (*Sentinel, error) {
	root, err := os.MkdirTemp("", "idem-redis-sentinel-")
	if err != nil {
		return nil, fmt.Errorf("redistopo: %w", err)
	}
	s := &Sentinel{root: root}
	if err := s.start(ctx); err != nil {
		return nil, errors.Join(err, s.Stop())
	}
	return s, nil
}

func (s *Sentinel) start(ctx context.Context) error {
	master, err := newServer(s.root, "master", dataConf, false)
	if err != nil {
		return err
	}
	s.Data = append(s.Data, master)
	if err := master.firstStart(ctx); err != nil {
		return err
	}
	replica, err := newServer(s.root, "replica", dataConf+fmt.Sprintf("replicaof 127.0.0.1 %d\n", master.Port), false)
	if err != nil {
		return err
	}
	s.Data = append(s.Data, replica)
	if err := replica.firstStart(ctx); err != nil {
		return err
	}
	conf := fmt.Sprintf(`sentinel monitor %[1]s 127.0.0.1 %[2]d 2
sentinel down-after-milliseconds %[1]s %[3]d
sentinel failover-timeout %[1]s 6000
sentinel parallel-syncs %[1]s 1
`, MasterName, master.Port, DownAfter.Milliseconds())
	for i := range 3 {
		sn, err := newServer(s.root, "sentinel"+strconv.Itoa(i), conf, false, "--sentinel")
		if err != nil {
			return err
		}
		s.Sentinels = append(s.Sentinels, sn)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(s.Sentinels))
	for i, sn := range s.Sentinels {
		wg.Go(func() { errs[i] = sn.firstStart(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return s.WaitHealthy(ctx)
}

// SentinelAddrs returns the sentinels' addresses (redis.FailoverOptions.SentinelAddrs).
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.Sentinels))
	for i, sn := range s.Sentinels {
		addrs[i] = sn.Addr
	}
	return addrs
}

// Stop kills every process of the group and removes its directory. Later calls return
// the first call's result.
func (s *Sentinel) Stop() error {
	s.once.Do(func() { s.err = stopAll(s.root, append(append([]*Server(nil), s.Data...), s.Sentinels...)) })
	return s.err
}

// masterAddr asks sentinel sn for the master's address.
func masterAddr(ctx context.Context, sn *Server) (string, error) {
	v, err := sn.Do(ctx, "sentinel", "get-master-addr-by-name", MasterName)
	if err != nil {
		return "", err
	}
	hp, ok := v.([]any)
	if !ok || len(hp) != 2 {
		return "", fmt.Errorf("redistopo: get-master-addr-by-name answered %v", v)
	}
	return net.JoinHostPort(fmt.Sprint(hp[0]), fmt.Sprint(hp[1])), nil
}

// Master returns the data node a running sentinel names as the master.
func (s *Sentinel) Master(ctx context.Context) (*Server, error) {
	var firstErr error
	for _, sn := range s.Sentinels {
		addr, err := masterAddr(ctx, sn)
		if err != nil {
			firstErr = cmpOr(firstErr, err)
			continue
		}
		for _, d := range s.Data {
			if d.Addr == addr {
				return d, nil
			}
		}
		return nil, fmt.Errorf("redistopo: the sentinels name %s, not a node of the group", addr)
	}
	return nil, fmt.Errorf("redistopo: no sentinel named the master: %w", cmpOr(firstErr, errors.New("none runs")))
}

// WaitHealthy waits until every process runs; every sentinel names the same master at
// the same configuration epoch, with no failover in progress, knows the two other
// sentinels, sees the replica's link up, and has had an answer to a PING from both data
// nodes within freshPing; and the replica's link to the master is up.
func (s *Sentinel) WaitHealthy(ctx context.Context) error {
	err := poll(ctx, func(ctx context.Context) (string, error) {
		var master, epoch string
		for _, sn := range s.Sentinels {
			if !sn.Running() {
				return "sentinel " + sn.Addr + " does not run", nil
			}
			addr, err := masterAddr(ctx, sn)
			if err != nil {
				return "sentinel " + sn.Addr + ": " + err.Error(), nil
			}
			if master == "" {
				master = addr
			} else if addr != master {
				return "the sentinels name different masters", nil
			}
			v, err := sn.Do(ctx, "sentinel", "master", MasterName)
			if err != nil {
				return "sentinel " + sn.Addr + ": " + err.Error(), nil
			}
			m := pairs(v)
			if m["flags"] != "master" || m["num-other-sentinels"] != "2" || m["num-slaves"] != "1" || !fresh(m) {
				return fmt.Sprintf("sentinel %s: master flags %s, %s other sentinels, %s replicas, last PONG %s ms ago", sn.Addr,
					m["flags"], m["num-other-sentinels"], m["num-slaves"], m["last-ok-ping-reply"]), nil
			}
			if epoch == "" {
				epoch = m["config-epoch"]
			} else if m["config-epoch"] != epoch {
				return "the sentinels are at different configuration epochs", nil
			}
			v, err = sn.Do(ctx, "sentinel", "replicas", MasterName)
			if err != nil {
				return "sentinel " + sn.Addr + ": " + err.Error(), nil
			}
			for _, r := range asSlice(v) {
				if r := pairs(r); r["flags"] != "slave" || r["master-link-status"] != "ok" || !fresh(r) {
					return fmt.Sprintf("sentinel %s sees a replica as %s, link %s, last PONG %s ms ago", sn.Addr,
						r["flags"], r["master-link-status"], r["last-ok-ping-reply"]), nil
				}
			}
		}
		for _, d := range s.Data {
			if !d.Running() {
				return d.Addr + " does not run", nil
			}
			repl, err := d.info(ctx, "replication")
			if err != nil {
				return d.Addr + ": " + err.Error(), nil
			}
			if d.Addr == master {
				if repl["role"] != "master" || !strings.Contains(repl["slave0"], "state=online") {
					return fmt.Sprintf("master %s: role %s, replica %s", d.Addr, repl["role"], repl["slave0"]), nil
				}
			} else if repl["role"] != "slave" || repl["master_link_status"] != "up" || repl["master_sync_in_progress"] != "0" ||
				net.JoinHostPort(repl["master_host"], repl["master_port"]) != master {
				return fmt.Sprintf("replica %s: role %s, link %s to %s:%s", d.Addr, repl["role"], repl["master_link_status"],
					repl["master_host"], repl["master_port"]), nil
			}
		}
		return "", nil
	})
	if err != nil {
		return fmt.Errorf("redistopo: sentinel group not healthy: %w", err)
	}
	return nil
}

// Heal waits until every sentinel names a running master with no failover in progress
// and has heard from it lately, then restarts every data node that does not run as a
// replica of that master (a killed master comes back as the replica of the one promoted
// in its place), and waits until the group is healthy.
func (s *Sentinel) Heal(ctx context.Context) error {
	var master *Server
	if err := poll(ctx, func(ctx context.Context) (string, error) {
		var named string
		for _, sn := range s.Sentinels {
			v, err := sn.Do(ctx, "sentinel", "master", MasterName)
			if err != nil {
				return "sentinel " + sn.Addr + ": " + err.Error(), nil
			}
			m := pairs(v)
			addr := net.JoinHostPort(m["ip"], m["port"])
			if named == "" {
				named = addr
			} else if addr != named {
				return "the sentinels name different masters", nil
			}
			if m["flags"] != "master" || !fresh(m) {
				return fmt.Sprintf("sentinel %s: master %s flags %s, last PONG %s ms ago", sn.Addr, addr, m["flags"], m["last-ok-ping-reply"]), nil
			}
		}
		for _, d := range s.Data {
			if d.Addr == named && d.Running() {
				master = d
				return "", nil
			}
		}
		return "no failover yet: the sentinels name " + named + ", which does not run", nil
	}); err != nil {
		return fmt.Errorf("redistopo: heal: %w", err)
	}
	for _, d := range s.Data {
		if d.Running() {
			continue
		}
		d.mu.Lock()
		d.args = []string{"--replicaof", "127.0.0.1", strconv.Itoa(master.Port)}
		d.mu.Unlock()
		if err := d.Start(ctx); err != nil {
			return err
		}
	}
	return s.WaitHealthy(ctx)
}

// ConfigEpoch returns the configuration epoch a running sentinel has for the master:
// each failover raises it by one.
func (s *Sentinel) ConfigEpoch(ctx context.Context) (int64, error) {
	var firstErr error
	for _, sn := range s.Sentinels {
		v, err := sn.Do(ctx, "sentinel", "master", MasterName)
		if err != nil {
			firstErr = cmpOr(firstErr, err)
			continue
		}
		return strconv.ParseInt(pairs(v)["config-epoch"], 10, 64)
	}
	return 0, fmt.Errorf("redistopo: no sentinel answered: %w", cmpOr(firstErr, errors.New("none runs")))
}

// fresh reports whether a sentinel's view of an instance had an answer to a PING within
// freshPing.
func fresh(m map[string]string) bool {
	ms, err := strconv.ParseInt(m["last-ok-ping-reply"], 10, 64)
	return err == nil && ms < freshPing.Milliseconds()
}

// pairs turns a flat reply of names and values into a map.
func pairs(v any) map[string]string {
	m := map[string]string{}
	switch v := v.(type) {
	case []any:
		for i := 0; i+1 < len(v); i += 2 {
			m[fmt.Sprint(v[i])] = fmt.Sprint(v[i+1])
		}
	case map[any]any:
		for k, x := range v {
			m[fmt.Sprint(k)] = fmt.Sprint(x)
		}
	}
	return m
}

// asSlice returns v's elements when it is an array reply.
func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}
