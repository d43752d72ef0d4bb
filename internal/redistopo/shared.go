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
	cluster     *Cluster
	clusterErr  error
	sentinel    *Sentinel
	sentinelErr error
}

// SharedCluster returns the test binary's cluster, starting it on first use; StopShared
// (in TestMain, after m.Run) stops it. Tests sharing it must not kill its nodes, and
// keep their keys apart (a key prefix of their own). It fails the test when the cluster
// cannot start.
func SharedCluster(t testing.TB) *Cluster {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.cluster == nil && shared.clusterErr == nil {
		ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
		defer cancel()
		shared.cluster, shared.clusterErr = StartCluster(ctx)
	}
	if shared.clusterErr != nil {
		t.Fatalf("redistopo: %v", shared.clusterErr)
	}
	return shared.cluster
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
	if shared.cluster != nil {
		errs = append(errs, shared.cluster.Stop())
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
