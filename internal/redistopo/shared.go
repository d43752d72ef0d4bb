package redistopo

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// StartTimeout bounds the start of a topology by the helpers below: a few seconds on an
// idle machine, much more on a loaded one running the race detector.
const StartTimeout = 2 * time.Minute

// shared holds the test binary's shared topologies, started on first use.
var shared struct {
	mu          sync.Mutex
	clusters    map[int]*Cluster // by number of masters
	clusterErrs map[int]error
	sentinel    *Sentinel
	sentinelErr error
}

// SharedCluster returns the test binary's cluster, starting it on first use; StopShared
// (in TestMain, after m.Run) stops it. Tests sharing it must not kill its nodes, and
// keep their keys apart (a key prefix of their own). It fails the test when the cluster
// cannot start.
func SharedCluster(t testing.TB) *Cluster { t.Helper(); return SharedClusterOf(t, 3) }

// SharedClusterOf returns the test binary's cluster of masters masters (each with a
// replica), starting it on first use, as SharedCluster does.
func SharedClusterOf(t testing.TB, masters int) *Cluster {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.clusters == nil {
		shared.clusters, shared.clusterErrs = map[int]*Cluster{}, map[int]error{}
	}
	if shared.clusters[masters] == nil && shared.clusterErrs[masters] == nil {
		ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
		defer cancel()
		shared.clusters[masters], shared.clusterErrs[masters] = StartClusterOf(ctx, masters)
	}
	if err := shared.clusterErrs[masters]; err != nil {
		t.Fatalf("redistopo: %v", err)
	}
	return shared.clusters[masters]
}

// SharedSentinel returns the test binary's Sentinel group, starting it on first use;
// StopShared stops it. The rules of SharedCluster apply.
func SharedSentinel(t testing.TB) *Sentinel {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.sentinel == nil && shared.sentinelErr == nil {
		ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
		defer cancel()
		shared.sentinel, shared.sentinelErr = StartSentinel(ctx)
	}
	if shared.sentinelErr != nil {
		t.Fatalf("redistopo: %v", shared.sentinelErr)
	}
	return shared.sentinel
}

// StopShared stops the shared topologies that were started. Call it from TestMain after
// m.Run.
func StopShared() error {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	var errs []error
	for _, c := range shared.clusters {
		if c != nil {
			errs = append(errs, c.Stop())
		}
	}
	if shared.sentinel != nil {
		errs = append(errs, shared.sentinel.Stop())
	}
	return errors.Join(errs...)
}

// NewCluster starts a cluster of the test's own, stopped when the test ends, for a test
// that kills or restarts its nodes. It fails the test when the cluster cannot start.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	c, err := StartCluster(ctx)
	if err != nil {
		t.Fatalf("redistopo: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("redistopo: stop the cluster: %v", err)
		}
	})
	return c
}

// NewSentinel starts a Sentinel group of the test's own, stopped when the test ends.
// It fails the test when the group cannot start.
func NewSentinel(t testing.TB) *Sentinel {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	s, err := StartSentinel(ctx)
	if err != nil {
		t.Fatalf("redistopo: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("redistopo: stop the sentinel group: %v", err)
		}
	})
	return s
}

// NewServer starts a standalone redis-server (no persistence) of the test's own, in a
// temporary directory, stopped when the test ends. It fails the test when the server
// cannot start.
func NewServer(t testing.TB) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	s, stop, err := StartServer(ctx)
	if err != nil {
		t.Fatalf("redistopo: %v", err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("redistopo: stop the server: %v", err)
		}
	})
	return s
}
