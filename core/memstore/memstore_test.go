package memstore_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/core/storetest"
)

func TestConformance(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore newStoreFunc) {
		storetest.Run(t, func(t *testing.T) storage.Store { return newStore() })
	})
}

type newStoreFunc = func(...memstore.Option) *memstore.Store

// stores are the stores the tests run on: a plain one, and two whose keys share hashes, so
// that the shards' spill maps are exercised: with 256 hashes most keys of a test share one
// with another key, with a single hash all keys but one are spilled.
var stores = []struct {
	name string
	new  newStoreFunc
}{
	{"plain", memstore.New},
	{"hashes=256", func(opts ...memstore.Option) *memstore.Store { return memstore.NewColliding(0xff, opts...) }},
	{"hashes=1", func(opts ...memstore.Option) *memstore.Store { return memstore.NewColliding(0, opts...) }},
}

// forEachStore runs test as a parallel subtest on each of stores.
func forEachStore(t *testing.T, test func(t *testing.T, newStore newStoreFunc)) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			test(t, st.new)
		})
	}
}

// clock is a settable clock for WithClock.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }

func claim(key, body string) storage.Claim {
	fp := sha256.Sum256([]byte(body))
	return storage.Claim{
		Scope: "acct", Key: key, Fingerprint: fp[:], Method: http.MethodPost, Path: "/orders",
		Mode: storage.ModePhased, Lease: time.Minute, Retention: 24 * time.Hour,
	}
}

func mustLock(t *testing.T, s storage.Store, c storage.Claim) storage.Lock {
	t.Helper()
	l, rec, err := s.Claim(context.Background(), c)
	if err != nil || l == nil {
		t.Fatalf("Claim(%q) = %v, %+v, %v; want a Lock", c.Key, l, rec, err)
	}
	return l
}

func mustRecord(t testing.TB, s storage.Store, c storage.Claim) *storage.Record {
	t.Helper()
	l, rec, err := s.Claim(context.Background(), c)
	if err != nil || rec == nil {
		t.Fatalf("Claim(%q) = %v, %+v, %v; want a Record", c.Key, l, rec, err)
	}
	return rec
}

func TestClockDrivesLeaseAndRetention(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore newStoreFunc) {
		clk := newClock()
		s := newStore(memstore.WithClock(clk.now))
		ctx := context.Background()

		c := claim("k", "a")
		l := mustLock(t, s, c)
		if rec := mustRecord(t, s, c); !rec.LockedUntil.Equal(clk.now().Add(time.Minute)) {
			t.Fatalf("LockedUntil = %v, want claim time + lease", rec.LockedUntil)
		}
		if err := l.Phase(ctx, "charged", func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		clk.add(time.Minute - time.Nanosecond)
		mustRecord(t, s, c) // lease still live
		clk.add(time.Nanosecond)
		l2 := mustLock(t, s, c) // exactly at LockedUntil the lease has run out
		if !l2.TakenOver() || l2.RecoveryPoint() != "charged" {
			t.Fatalf("takeover: TakenOver=%v point=%q", l2.TakenOver(), l2.RecoveryPoint())
		}
		if err := l.Complete(ctx, &storage.Response{Status: 201}); !errors.Is(err, core.ErrLeaseLost) {
			t.Fatalf("stale Complete = %v, want ErrLeaseLost", err)
		}
		if err := l2.Complete(ctx, &storage.Response{Status: 201}); err != nil {
			t.Fatal(err)
		}

		// Retention: exactly at the limit the key is kept, one tick later it is absent.
		r := claim("k", "other")
		r.Retention = 2 * time.Minute
		clk.add(time.Minute) // two minutes since the claim
		if rec := mustRecord(t, s, r); rec.Response.Status != 201 {
			t.Fatalf("replay status %d", rec.Response.Status)
		}
		clk.add(time.Nanosecond)
		if l3 := mustLock(t, s, r); l3.TakenOver() || l3.RecoveryPoint() != storage.RecoveryStarted {
			t.Fatalf("claim past retention: TakenOver=%v point=%q", l3.TakenOver(), l3.RecoveryPoint())
		}
	})
}

func TestReplayReturnsStoredRecord(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore newStoreFunc) {
		s := newStore()
		c := claim("k", "a")
		l := mustLock(t, s, c)
		if err := l.Complete(context.Background(), &storage.Response{Status: 200, Body: []byte("ok")}); err != nil {
			t.Fatal(err)
		}
		if a, b := mustRecord(t, s, c), mustRecord(t, s, c); a != b {
			t.Fatal("replays should share the one immutable record")
		}
	})
}

func TestLockEnded(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore newStoreFunc) {
		s := newStore()
		ctx := context.Background()
		l := mustLock(t, s, claim("k", "a"))
		if err := l.Complete(ctx, &storage.Response{Status: 200}); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release after Complete = %v, want nil (no-op)", err)
		}
		if err := l.Complete(ctx, &storage.Response{Status: 500}); err == nil {
			t.Fatal("second Complete succeeded")
		}
		called := false
		if err := l.Phase(ctx, "x", func(context.Context) error { called = true; return nil }); err == nil || called {
			t.Fatalf("Phase after Complete = %v (fn called: %v), want an error and fn not run", err, called)
		}
		if rec := mustRecord(t, s, claim("k", "a")); rec.Response.Status != 200 {
			t.Fatalf("status %d, want 200", rec.Response.Status)
		}
		if err := l.Complete(ctx, nil); err == nil {
			t.Fatal("Complete(nil) succeeded")
		}
	})
}

func TestStalePhaseDoesNotRunFn(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore newStoreFunc) {
		clk := newClock()
		s := newStore(memstore.WithClock(clk.now))
		c := claim("k", "a")
		stale := mustLock(t, s, c)
		clk.add(2 * time.Minute)
		mustLock(t, s, c)
		called := false
		err := stale.Phase(context.Background(), "x", func(context.Context) error { called = true; return nil })
		if !errors.Is(err, core.ErrLeaseLost) || called {
			t.Fatalf("stale Phase = %v (fn called: %v), want ErrLeaseLost and fn not run", err, called)
		}
	})
}

func TestLeaseLostWhilePhaseRuns(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore newStoreFunc) {
		clk := newClock()
		s := newStore(memstore.WithClock(clk.now))
		c := claim("k", "a")
		l := mustLock(t, s, c)
		err := l.Phase(context.Background(), "charged", func(context.Context) error {
			clk.add(2 * time.Minute)
			mustLock(t, s, c) // another worker takes over while fn runs
			return nil
		})
		if !errors.Is(err, core.ErrLeaseLost) {
			t.Fatalf("Phase = %v, want ErrLeaseLost", err)
		}
		if rec := mustRecord(t, s, c); rec.RecoveryPoint != storage.RecoveryStarted {
			t.Fatalf("recovery point %q recorded by a lock that lost its lease", rec.RecoveryPoint)
		}
	})
}

func TestModes(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore newStoreFunc) {
		s := newStore()
		if s.SupportsAtomic() {
			t.Fatal("SupportsAtomic() = true")
		}
		c := claim("k", "a")
		c.Mode = storage.ModePhased
		mustLock(t, s, c)
		c.Mode = storage.Mode(42)
		if _, _, err := s.Claim(context.Background(), c); !errors.Is(err, core.ErrUnsupportedMode) {
			t.Fatalf("Claim(mode 42) = %v, want ErrUnsupportedMode", err)
		}
	})
}

func TestClaimCancelledContext(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore newStoreFunc) {
		s := newStore()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if l, rec, err := s.Claim(ctx, claim("k", "a")); !errors.Is(err, context.Canceled) || l != nil || rec != nil {
			t.Fatalf("Claim(cancelled) = %v, %v, %v", l, rec, err)
		}
		if s.Len() != 0 {
			t.Fatalf("Len() = %d after a cancelled claim", s.Len())
		}
	})
}

// TestDeleteExpiredOldestFirst checks the order and the limit with a clock that ticks a
// second per key, across all shards.
func TestDeleteExpiredOldestFirst(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore newStoreFunc) {
		clk := newClock()
		s := newStore(memstore.WithClock(clk.now))
		ctx := context.Background()
		const n = 500
		for i := range n {
			l := mustLock(t, s, claim(fmt.Sprint("k", i), "a"))
			if err := l.Complete(ctx, &storage.Response{Status: 200}); err != nil {
				t.Fatal(err)
			}
			clk.add(time.Second)
		}
		live := claim("live", "a")
		live.Lease = time.Hour
		mustLock(t, s, live)
		cutoff := clk.now().Add(time.Second)

		if got, err := s.DeleteExpired(ctx, cutoff, 0); err != nil || got != 0 {
			t.Fatalf("DeleteExpired(limit 0) = %d, %v", got, err)
		}
		deleted := 0
		for deleted < n {
			got, err := s.DeleteExpired(ctx, cutoff, 37)
			if err != nil {
				t.Fatal(err)
			}
			want := min(37, n-deleted)
			if got != want {
				t.Fatalf("DeleteExpired = %d, want %d", got, want)
			}
			deleted += got
			// The oldest keys are gone, the next one is still there.
			for _, i := range []int{0, deleted - 1} {
				if l, _, _ := s.Claim(ctx, claim(fmt.Sprint("k", i), "other")); l == nil {
					t.Fatalf("key k%d should have been deleted after %d deletions", i, deleted)
				} else if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if deleted < n {
				mustRecord(t, s, claim(fmt.Sprint("k", deleted), "other"))
			}
		}
		if got, _ := s.DeleteExpired(ctx, cutoff, 100); got != 0 {
			t.Fatalf("DeleteExpired deleted %d, only a live key is left", got)
		}
		if s.Len() != 1 {
			t.Fatalf("Len() = %d, want 1 (the live key)", s.Len())
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.DeleteExpired(cctx, cutoff, 10); !errors.Is(err, context.Canceled) {
			t.Fatalf("DeleteExpired(cancelled) = %v", err)
		}
	})
}

// TestReplayAllocations: the first replay of a key decodes its record; every later one
// allocates nothing.
func TestReplayAllocations(t *testing.T) {
	s := memstore.New()
	c := claim("k", "a")
	l := mustLock(t, s, c)
	resp := &storage.Response{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte("{}")}
	if err := l.Complete(context.Background(), resp); err != nil {
		t.Fatal(err)
	}
	var store storage.Store = s
	ctx := context.Background()
	first := mustRecord(t, s, c)
	allocs := testing.AllocsPerRun(1000, func() {
		if _, rec, err := store.Claim(ctx, c); rec == nil || err != nil {
			t.Fatal("no replay")
		}
	})
	if allocs != 0 {
		t.Fatalf("a replaying Claim allocates %.1f times, want 0", allocs)
	}
	if rec := mustRecord(t, s, c); rec != first {
		t.Fatal("later replays should return the record decoded by the first")
	}
}

// TestClaimCompleteAllocations: a first request costs the store two allocations, the lock
// and the completed key's blob (plus, now and then, the growth of a shard's map).
func TestClaimCompleteAllocations(t *testing.T) {
	s := memstore.New()
	ctx := context.Background()
	resp := &storage.Response{Status: 201, Header: http.Header{"Location": {"/orders/1"}, "Content-Type": {"application/json"}},
		Body: []byte(`{"id":1}`)}
	const runs = 2000
	claims := make([]storage.Claim, runs+1) // AllocsPerRun runs once more to warm up
	for i := range claims {
		claims[i] = claim(fmt.Sprint("key-", i), "a")
	}
	i := 0
	allocs := testing.AllocsPerRun(runs, func() {
		l, _, err := s.Claim(ctx, claims[i])
		if err != nil || l == nil {
			t.Fatal("no lock")
		}
		if err := l.Complete(ctx, resp); err != nil {
			t.Fatal(err)
		}
		i++
	})
	if allocs > 2 {
		t.Fatalf("Claim + Complete allocate %.1f times, want at most 2", allocs)
	}
}

// TestManyKeysManyGoroutines fills the store with keys from many goroutines and checks
// that each key has exactly one winner and is replayed afterwards.
func TestManyKeysManyGoroutines(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore newStoreFunc) {
		s := newStore()
		ctx := context.Background()
		const workers, keys = 8, 2000
		var wins atomic.Int64
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := range keys {
					k := (i + w*keys/workers) % keys
					l, _, err := s.Claim(ctx, claim(fmt.Sprint("k", k), "a"))
					if err != nil {
						t.Error(err)
						return
					}
					if l != nil {
						wins.Add(1)
						if err := l.Complete(ctx, &storage.Response{Status: 201}); err != nil {
							t.Error(err)
							return
						}
					}
				}
			})
		}
		wg.Wait()
		if wins.Load() != keys || s.Len() != keys {
			t.Fatalf("%d wins, %d keys stored; want %d each", wins.Load(), s.Len(), keys)
		}
	})
}

func BenchmarkClaimComplete(b *testing.B) {
	s := memstore.New()
	ctx := context.Background()
	resp := &storage.Response{Status: 201, Header: http.Header{"Location": {"/orders/1"}}, Body: []byte(`{"id":1}`)}
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = fmt.Sprint("key-", i)
	}
	c := claim("", "a")
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		c.Key = keys[i]
		l, _, err := s.Claim(ctx, c)
		if err != nil || l == nil {
			b.Fatal("no lock")
		}
		if err := l.Complete(ctx, resp); err != nil {
			b.Fatal(err)
		}
	}
}

// benchReplay replays one of n completed keys per iteration, from parallel goroutines. The
// first replay of a key decodes its record; with decoded, every key is replayed once
// before the timer starts.
func benchReplay(b *testing.B, n int, decoded bool) {
	s := memstore.New()
	ctx := context.Background()
	claims := make([]storage.Claim, n)
	for i := range claims {
		claims[i] = claim(fmt.Sprint("key-", i), "a")
		l, _, err := s.Claim(ctx, claims[i])
		if err != nil || l == nil {
			b.Fatal("no lock")
		}
		if err := l.Complete(ctx, &storage.Response{Status: 201, Body: []byte(`{"id":1}`)}); err != nil {
			b.Fatal(err)
		}
	}
	if decoded {
		for _, c := range claims {
			mustRecord(b, s, c)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, rec, _ := s.Claim(ctx, claims[i%n]); rec == nil {
				b.Error("no replay")
				return
			}
			i += 7919
		}
	})
}

func BenchmarkReplay(b *testing.B) {
	b.Run("keys=1", func(b *testing.B) { benchReplay(b, 1, false) })
	b.Run("keys=300000", func(b *testing.B) { benchReplay(b, 300_000, false) })
	b.Run("keys=300000,decoded", func(b *testing.B) { benchReplay(b, 300_000, true) })
}
