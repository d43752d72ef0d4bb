package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// binDir holds the server binary, built once by the first test that needs it.
var (
	binDir   string
	ginBuild struct {
		once sync.Once
		bin  string
		err  error
	}
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "idem-loadgen-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// startGin builds gin-orders once (with -race when the tests have it) and starts it on a
// fresh SQLite file and a free port; it is stopped, and must exit cleanly, when the test
// ends.
func startGin(t *testing.T) *server {
	t.Helper()
	ginBuild.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		ginBuild.bin, ginBuild.err = buildServer(ctx, "gin-orders", binDir, raceEnabled)
	})
	if ginBuild.err != nil {
		t.Fatal(ginBuild.err)
	}
	began := time.Now()
	s, err := startServer(t.Context(), ginBuild.bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gin-orders on %s listening at %s after %s", s.store, s.url, time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		stopping := time.Now()
		if err := s.stop(); err != nil {
			t.Errorf("stopping the server: %v", err)
		}
		t.Logf("the server stopped in %s", time.Since(stopping).Round(time.Millisecond))
		out := s.out.String()
		for _, bad := range []string{"WARNING: DATA RACE", "panic:"} {
			if strings.Contains(out, bad) {
				t.Errorf("the server's output shows %q", bad)
			}
		}
		if t.Failed() {
			t.Logf("server output:\n%s", out)
		}
	})
	return s
}

func mustConfig(t *testing.T, args ...string) config {
	t.Helper()
	cfg, err := parseConfig(args, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("parseConfig(%q): %v", args, err)
	}
	return cfg
}

// TestAgainstGinOnSQLite drives gin-orders on SQLite the way the command does, and checks
// the figures against the server's own rows.
func TestAgainstGinOnSQLite(t *testing.T) {
	t.Parallel()
	srv := startGin(t)

	// A few hundred orders, 30% of them retries of a key already sent: every key runs
	// once, and loadgen's exactly-once check agrees with what the server lists.
	t.Run("orders", func(t *testing.T) {
		cfg := mustConfig(t, "-url", srv.url, "-workers", "8", "-requests", "400", "-keys", "1000", "-dup", "0.3", "-seed", "7")
		p := newPlan(cfg.requests, cfg.keys, cfg.dup, cfg.seed)
		if p.distinct != 280 {
			t.Fatalf("plan has %d keys, want 400−30%% = 280", p.distinct)
		}
		l := newLoader(cfg, p.distinct)
		defer l.client.CloseIdleConnections()
		r := l.load(t.Context(), p)
		t.Logf("%d responses in %s, %d retries after 409", len(r.all), r.elapsed, r.retries)

		if len(r.other) != 0 {
			t.Fatalf("statuses other than 201 and 409 (no 5xx, no 4xx, no transport error expected): %v; first error %v", r.other, r.firstErr)
		}
		if r.scheduled != 400 || r.sent != 280 || r.acked != 280 {
			t.Fatalf("sent %d requests, %d keys, %d acknowledged; want 400, 280, 280", r.scheduled, r.sent, r.acked)
		}
		if r.created != 280 || r.created+r.replayed != 400 {
			t.Fatalf("201 original %d, replayed %d: want one original per key (280) and 400 201s in all", r.created, r.replayed)
		}
		if len(r.all) != 400+r.retries || r.conflicts != r.retries {
			t.Fatalf("%d responses, %d 409s, %d retries: want 400 plus one response per retry, one retry per 409", len(r.all), r.conflicts, r.retries)
		}

		v, err := l.verify(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if !v.exactlyOnce() || v.created != 280 || v.acked != 280 || v.others != 0 {
			t.Fatalf("verdict %+v: want exactly once, 280 orders for 280 keys", v)
		}

		// The server's list, read independently of loadgen: 280 orders, one per key.
		items := listItems(t, srv.url, cfg.account)
		if len(items) != 280 {
			t.Fatalf("GET /v1/orders lists %d orders, want 280", len(items))
		}
		for n := range 280 {
			if items["item "+l.key(n)] != 1 {
				t.Fatalf("key %s has %d orders, want 1", l.key(n), items["item "+l.key(n)])
			}
		}

		// One more order with key 0's body under another key: the check must now fail
		// and name key 0.
		extra := post(t, srv.url, cfg.account, "extra-"+l.run, l.body(0))
		if extra != http.StatusCreated {
			t.Fatalf("extra order: status %d", extra)
		}
		v, err = l.verify(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if v.exactlyOnce() || v.created != 281 || v.count != 1 || !strings.Contains(v.problems[0], l.key(0)+" has 2 rows") {
			t.Fatalf("after a second order for key 0, verdict %+v: want a failure naming %s", v, l.key(0))
		}
	})

	// The command end to end on the payments route (phased mode: duplicates of a key in
	// flight get 409 and are retried): exit status 0 and the figures printed.
	t.Run("payments command", func(t *testing.T) {
		var out, errs bytes.Buffer
		args := []string{"-url", srv.url, "-route", "payments", "-workers", "8", "-requests", "200", "-keys", "100", "-dup", "0.3", "-duration", "15s"}
		if code := run(t.Context(), args, &out, &errs); code != exitOK {
			t.Fatalf("exit status %d, want 0\nstdout:\n%s\nstderr:\n%s", code, &out, &errs)
		}
		t.Logf("output:\n%s", &out)
		for _, want := range []string{"req/s", "p50 ", "p90 ", "p99 ", "201 original 100, ", "other 0\n",
			"100 distinct sent, 100 acknowledged", "payments 100 created for this run's keys, 100 provider charges, 100 distinct keys acknowledged: exactly once"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q", want)
			}
		}
	})

	// -duration bounds a plan far too long to finish: the run stops sending, the
	// requests in flight finish, and exactly once still holds for what was sent.
	t.Run("duration", func(t *testing.T) {
		cfg := mustConfig(t, "-url", srv.url, "-workers", "4", "-requests", "100000", "-keys", "100000", "-dup", "0.3", "-duration", "1s")
		p := newPlan(cfg.requests, cfg.keys, cfg.dup, cfg.seed)
		l := newLoader(cfg, p.distinct)
		defer l.client.CloseIdleConnections()
		r := l.load(t.Context(), p)
		if r.scheduled == 0 || r.scheduled >= cfg.requests {
			t.Fatalf("sent %d of %d requests in 1s", r.scheduled, cfg.requests)
		}
		if r.elapsed > 1*time.Second+maxRetryAfter+cfg.timeout {
			t.Fatalf("the run took %s with -duration 1s", r.elapsed)
		}
		if len(r.other) != 0 {
			t.Fatalf("statuses other than 201 and 409: %v; first error %v", r.other, r.firstErr)
		}
		v, err := l.verify(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if !v.exactlyOnce() || v.acked != r.sent {
			t.Fatalf("verdict %+v after %d keys sent: want exactly once, every key sent acknowledged", v, r.sent)
		}
	})
}

// listItems counts the account's orders by item, from GET /v1/orders.
func listItems(t *testing.T, base, account string) map[string]int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/v1/orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Account-ID", account)
	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Orders []struct {
			Item string `json:"item"`
		} `json:"orders"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/orders: status %d, %v", resp.StatusCode, err)
	}
	items := map[string]int{}
	for _, o := range list.Orders {
		items[o.Item]++
	}
	return items
}

func post(t *testing.T, base, account, key string, body []byte) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/orders", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Account-ID", account)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}
