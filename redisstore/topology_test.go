package redisstore_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/core/storetest"
	"github.com/idemkit/idem/internal/redistopo"
	"github.com/idemkit/idem/redisstore"
	"github.com/redis/go-redis/v9"
)

// The topologies the store runs on besides one server: a Redis Cluster and a Sentinel
// group (internal/redistopo), each shared by the tests of this binary, which keep their
// keys apart by prefix. A topology is named by a spec that a child process reads back:
// "single" (the test Redis), "cluster=ADDR,…" (seed nodes) or "sentinel=ADDR,…" (the
// sentinels).

// topology is a deployment the tests run on.
type topology struct {
	name string
	spec func(t testing.TB) string
}

var (
	single   = topology{"single", func(testing.TB) string { return "single" }}
	cluster  = topology{"cluster", func(t testing.TB) string { return "cluster=" + strings.Join(redistopo.SharedCluster(t).Addrs(), ",") }}
	sentinel = topology{"sentinel", func(t testing.TB) string {
		return "sentinel=" + strings.Join(redistopo.SharedSentinel(t).SentinelAddrs(), ",")
	}}
)

// clientFor returns a client of the deployment spec names, with the options a user
// writes first for it and ContextTimeoutEnabled, as doc.go advises; the caller closes it.
func clientFor(spec string) (redis.UniversalClient, error) {
	kind, addrs, _ := strings.Cut(spec, "=")
	switch kind {
	case "single":
		return redis.NewClient(&redis.Options{Addr: redisAddr(), ContextTimeoutEnabled: true}), nil
	case "cluster":
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ","), ContextTimeoutEnabled: true}), nil
	case "sentinel":
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistopo.MasterName,
			SentinelAddrs: strings.Split(addrs, ","), ContextTimeoutEnabled: true}), nil
	}
	return nil, fmt.Errorf("unknown Redis spec %q", spec)
}

// topoClient returns a client of spec, closed when the test ends.
func topoClient(t testing.TB, spec string) redis.UniversalClient {
	t.Helper()
	if spec == "single" {
		return newClient(t, "")
	}
	c, err := clientFor(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestConformanceOnTopologies runs core/storetest on a Redis Cluster and on a Sentinel
// group.
func TestConformanceOnTopologies(t *testing.T) {
	t.Parallel()
	for _, topo := range []topology{cluster, sentinel} {
		t.Run(topo.name, func(t *testing.T) {
			t.Parallel()
			spec := topo.spec(t)
			storetest.Run(t, func(t *testing.T) storage.Store {
				return redisstore.New(topoClient(t, spec), redisstore.WithPrefix(newPrefix(t)))
			})
		})
	}
}
