package memstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"
	"weak"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/core/storage"
)

// TestCompletedKeyRoundTrip: a completed key is kept encoded and decoded on its first
// replay; the record must be exactly what was claimed and completed, nil and empty
// slices and maps told apart, times and their locations kept.
func TestCompletedKeyRoundTrip(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore newStoreFunc) {
		long := strings.Repeat("é", 200) // multi-byte lengths
		binary := make([]byte, 70_000)
		for i := range binary {
			binary[i] = byte(i * 7)
		}
		cases := []struct {
			name  string
			fp    []byte
			point string
			resp  storage.Response
		}{
			{"nil header, nil body", bytes.Repeat([]byte{1}, 32), "", storage.Response{Status: 204}},
			{"empty header, empty body", bytes.Repeat([]byte{2}, 32), "",
				storage.Response{Status: 202, Header: http.Header{}, Body: []byte{}}},
			{"nil and empty values", []byte{}, "",
				storage.Response{Status: 200, Header: http.Header{"X-Nil": nil, "X-Empty": {}, "X-One": {""}}, Body: []byte("x")}},
			{"nil fingerprint", nil, "", storage.Response{Status: 200, Body: []byte("y")}},
			{"long fingerprint", bytes.Repeat([]byte{3}, 64), "", storage.Response{Status: 200}},
			{"many values", bytes.Repeat([]byte{4}, 32), "charged", storage.Response{Status: 201, Header: http.Header{
				"Location":        {"/orders/1"},
				"Link":            {"</a>; rel=next", "</b>; rel=prev", long},
				"X-Odd":           {"a\r\nb", "c: d\n"},
				"non-canonical":   {"kept as given"},
				long[:40] + "-Nm": {long},
			}, Body: binary}},
			{"odd status", bytes.Repeat([]byte{5}, 32), "emailed", storage.Response{Status: -1, Body: []byte(long)}},
			{"huge status", bytes.Repeat([]byte{6}, 32), long, storage.Response{Status: 1 << 40}},
		}
		for _, loc := range []*time.Location{time.UTC, time.Local, time.FixedZone("X", 3600)} {
			for _, tc := range cases {
				t.Run(fmt.Sprintf("%s/%s", loc, tc.name), func(t *testing.T) {
					t.Parallel()
					var mu sync.Mutex
					claimed := time.Date(2025, 1, 1, 12, 0, 0, 123, loc)
					completed := claimed.Add(90 * time.Second)
					now := claimed
					set := func(t time.Time) { mu.Lock(); defer mu.Unlock(); now = t }
					s := newStore(memstore.WithClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now }))
					ctx := context.Background()
					c := storage.Claim{Scope: "scope-" + long, Key: "key-" + tc.name, Fingerprint: tc.fp, Method: http.MethodPatch,
						Path: "/orders/" + long, Mode: storage.ModePhased, Lease: time.Minute, Retention: time.Hour}
					l := mustLock(t, s, c)
					if tc.point != "" {
						if err := l.Phase(ctx, tc.point, nil); err != nil {
							t.Fatal(err)
						}
					}
					set(completed) // past the lease: the completion is the lock's still, nobody took over
					passed := tc.resp
					passed.Header = tc.resp.Header.Clone()
					passed.Body = bytes.Clone(tc.resp.Body)
					if err := l.Complete(ctx, &passed); err != nil {
						t.Fatal(err)
					}
					clear(passed.Header)
					for i := range passed.Body {
						passed.Body[i] = 'X'
					}

					point := tc.point
					if point == "" {
						point = storage.RecoveryStarted
					}
					want := &storage.Record{Scope: c.Scope, Key: c.Key, Fingerprint: tc.fp, Method: c.Method, Path: c.Path,
						State: storage.StateCompleted, RecoveryPoint: point, Response: &tc.resp,
						CreatedAt: claimed, CompletedAt: completed}
					for range 2 { // the first replay decodes, the second reads the cached record
						got := mustRecord(t, s, c)
						if !reflect.DeepEqual(got, want) {
							t.Fatalf("replayed record\n got  %s\n want %s", show(got), show(want))
						}
					}
				})
			}
		}
	})
}

func show(r *storage.Record) string {
	return fmt.Sprintf("%q %q fp=%#v %s %q %s %q created=%v completed=%v status=%d header=%#v body(nil=%v, %d bytes)",
		r.Scope[:min(20, len(r.Scope))], r.Key, r.Fingerprint, r.Method, r.Path[:min(20, len(r.Path))], r.State, r.RecoveryPoint,
		r.CreatedAt, r.CompletedAt, r.Response.Status, r.Response.Header, r.Response.Body == nil, len(r.Response.Body))
}

// TestCompletedKeyKeepsNothingOfTheRequest: once a key is completed, the store holds none
// of the memory of the claim or of the response it was given (key string, fingerprint,
// header values, body), so a request's garbage stays garbage.
func TestCompletedKeyKeepsNothingOfTheRequest(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore newStoreFunc) {
		s := newStore()
		// Another key first, so that in a store whose keys share one hash the fresh key
		// goes to the shard's spill map, keyed by strings.
		if err := mustLock(t, s, claim("other", "a")).Complete(context.Background(), &storage.Response{Status: 200}); err != nil {
			t.Fatal(err)
		}
		weaks := completeFreshKey(t, s)
		runtime.GC()
		for name, alive := range weaks {
			if alive() {
				t.Errorf("the store still holds the request's %s after Complete", name)
			}
		}
		if s.Len() != 2 {
			t.Fatalf("Len() = %d, want 2", s.Len())
		}
		// The key is still there, found with a key string of the caller's.
		rec := mustRecord(t, s, claim(strings.Repeat("k", 64), "a"))
		if rec.Response.Status != 201 || rec.Response.Header.Get("Location") != strings.Repeat("/l", 40) ||
			string(rec.Response.Body) != strings.Repeat("b", 100) {
			t.Fatalf("replayed %+v", rec.Response)
		}
	})
}

// completeFreshKey claims and completes one key with freshly allocated values (none small
// enough for the tiny allocator) and returns, for each, whether it is still reachable.
func completeFreshKey(t *testing.T, s *memstore.Store) map[string]func() bool {
	c := claim(strings.Clone(strings.Repeat("k", 64)), "a")
	c.Fingerprint = bytes.Clone(c.Fingerprint)
	loc := strings.Clone(strings.Repeat("/l", 40))
	values := []string{loc}
	resp := &storage.Response{Status: 201, Header: http.Header{"Location": values}, Body: bytes.Repeat([]byte("b"), 100)}
	weaks := map[string]func() bool{
		"key":          alive(unsafe.StringData(c.Key)),
		"fingerprint":  alive(&c.Fingerprint[0]),
		"header value": alive(unsafe.StringData(loc)),
		"value slice":  alive(&values[0]),
		"body":         alive(&resp.Body[0]),
	}
	l := mustLock(t, s, c)
	if err := l.Complete(context.Background(), resp); err != nil {
		t.Fatal(err)
	}
	return weaks
}

func alive[T any](p *T) func() bool {
	w := weak.Make(p)
	return func() bool { return w.Value() != nil }
}

// TestConcurrentFirstReplays: replays racing to decode a key all get the one record.
func TestConcurrentFirstReplays(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore newStoreFunc) {
		s := newStore()
		ctx := context.Background()
		const keys, workers = 50, 8
		for i := range keys {
			l := mustLock(t, s, claim(fmt.Sprint("k", i), "a"))
			if err := l.Complete(ctx, &storage.Response{Status: 200, Header: http.Header{"A": {"b"}}, Body: []byte("ok")}); err != nil {
				t.Fatal(err)
			}
		}
		got := make([][keys]*storage.Record, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := range keys {
					_, got[w][i], _ = s.Claim(ctx, claim(fmt.Sprint("k", i), "a"))
				}
			})
		}
		wg.Wait()
		for i := range keys {
			for w := range workers {
				if got[w][i] == nil || got[w][i] != got[0][i] {
					t.Fatalf("key k%d: worker %d got record %p, worker 0 got %p", i, w, got[w][i], got[0][i])
				}
			}
		}
	})
}

// TestRetentionReplacesKeys: completed keys past retention count as absent; a new claim
// replaces each one where it is kept, whichever of the shard's maps holds it.
func TestRetentionReplacesKeys(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore newStoreFunc) {
		clk := newClock()
		s := newStore(memstore.WithClock(clk.now))
		ctx := context.Background()
		const n = 20
		for i := range n {
			l := mustLock(t, s, claim(fmt.Sprint("k", i), "a"))
			if err := l.Complete(ctx, &storage.Response{Status: 200 + i}); err != nil {
				t.Fatal(err)
			}
		}
		clk.add(25 * time.Hour) // claim's retention is 24h
		for i := range n {
			l := mustLock(t, s, claim(fmt.Sprint("k", i), "b"))
			if l.TakenOver() || l.RecoveryPoint() != storage.RecoveryStarted {
				t.Fatalf("k%d: TakenOver=%v point=%q, want a fresh claim", i, l.TakenOver(), l.RecoveryPoint())
			}
			if err := l.Complete(ctx, &storage.Response{Status: 300 + i}); err != nil {
				t.Fatal(err)
			}
		}
		if s.Len() != n {
			t.Fatalf("Len() = %d, want %d", s.Len(), n)
		}
		want := claim("", "b").Fingerprint
		for i := range n {
			rec := mustRecord(t, s, claim(fmt.Sprint("k", i), "b"))
			if rec.Response.Status != 300+i || !bytes.Equal(rec.Fingerprint, want) || !rec.CreatedAt.Equal(clk.now()) {
				t.Fatalf("k%d: status %d, fingerprint %x, created %v", i, rec.Response.Status, rec.Fingerprint, rec.CreatedAt)
			}
		}
	})
}

// TestStaleLockAfterSlotReuse: a lock whose expired key was deleted, and whose place in the
// store another key took, can change nothing.
func TestStaleLockAfterSlotReuse(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore newStoreFunc) {
		clk := newClock()
		s := newStore(memstore.WithClock(clk.now))
		ctx := context.Background()
		stale := mustLock(t, s, claim("old", "a"))
		clk.add(2 * time.Minute) // past the lease
		if n, err := s.DeleteExpired(ctx, clk.now(), 10); err != nil || n != 1 {
			t.Fatalf("DeleteExpired = %d, %v; want 1", n, err)
		}
		fresh := mustLock(t, s, claim("new", "a")) // reuses the freed place
		if err := stale.Phase(ctx, "x", nil); !errors.Is(err, core.ErrLeaseLost) {
			t.Fatalf("stale Phase = %v, want ErrLeaseLost", err)
		}
		if err := stale.Complete(ctx, &storage.Response{Status: 500}); !errors.Is(err, core.ErrLeaseLost) {
			t.Fatalf("stale Complete = %v, want ErrLeaseLost", err)
		}
		if err := stale.Release(ctx); !errors.Is(err, core.ErrLeaseLost) {
			t.Fatalf("stale Release = %v, want ErrLeaseLost", err)
		}
		if err := fresh.Complete(ctx, &storage.Response{Status: 201}); err != nil {
			t.Fatal(err)
		}
		if rec := mustRecord(t, s, claim("new", "a")); rec.Response.Status != 201 || rec.Key != "new" {
			t.Fatalf("replay of the new key: %q %d", rec.Key, rec.Response.Status)
		}
		if l := mustLock(t, s, claim("old", "a")); l.TakenOver() {
			t.Fatal("the deleted key was taken over instead of claimed afresh")
		}
	})
}
