package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPlan(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		requests, keys int
		dup            float64
		distinct       int
	}{
		{20000, 5000, 0.3, 5000}, // the keys run out: the other requests reuse keys
		{20000, 14000, 0.3, 14000},
		{20000, 50000, 0.3, 14000}, // more keys than the ratio needs
		{400, 1000, 0.3, 280},
		{10, 10, 0, 10},
		{10, 3, 0, 3},
		{5, 5, 0.99, 1}, // at least one key
		{1, 1, 0.5, 1},
	} {
		p := newPlan(tc.requests, tc.keys, tc.dup, 42)
		if p.distinct != tc.distinct || len(p.keys) != tc.requests {
			t.Fatalf("newPlan(%d, %d, %v): %d requests over %d keys, want %d over %d",
				tc.requests, tc.keys, tc.dup, len(p.keys), p.distinct, tc.requests, tc.distinct)
		}
		// Key n first appears after key n−1, and a duplicate names a key seen before.
		seen := 0
		for i, k := range p.keys {
			switch {
			case int(k) == seen:
				seen++
			case int(k) > seen || k < 0:
				t.Fatalf("request %d sends key %d before key %d appeared", i, k, seen)
			}
		}
		if seen != tc.distinct {
			t.Fatalf("%d keys appear, want %d", seen, tc.distinct)
		}
		if want := float64(tc.requests-tc.distinct) / float64(tc.requests); p.dupRatio() != want {
			t.Fatalf("dupRatio %v, want %v", p.dupRatio(), want)
		}
	}

	// New keys are spread over the whole run, not all at its start.
	p := newPlan(20000, 5000, 0.3, 1)
	lastNew := 0
	for i, k := range p.keys {
		if int(k) == p.distinct-1 { // its first appearance
			lastNew = i
			break
		}
	}
	if lastNew < 15000 {
		t.Fatalf("the last new key comes at request %d of 20000: new keys are bunched at the start", lastNew)
	}

	// A seed is a plan.
	if a, b := newPlan(1000, 500, 0.3, 9), newPlan(1000, 500, 0.3, 9); !slices.Equal(a.keys, b.keys) {
		t.Fatal("the same seed gave two plans")
	}
	if a, b := newPlan(1000, 500, 0.3, 9), newPlan(1000, 500, 0.3, 10); slices.Equal(a.keys, b.keys) {
		t.Fatal("two seeds gave the same plan")
	}
}

func TestParseConfig(t *testing.T) {
	t.Parallel()
	c, err := parseConfig(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.url != "http://127.0.0.1:8080" || c.workers != 16 || c.requests != 20000 || c.duration != 60*time.Second ||
		c.keys != 5000 || c.route != routeOrders || !strings.HasPrefix(c.account, "lg-") {
		t.Fatalf("defaults: %+v", c)
	}
	if c2, _ := parseConfig(nil, &bytes.Buffer{}); c2.account == c.account {
		t.Fatalf("two runs share the default account %q", c.account)
	}

	for _, url := range []string{"http://127.0.0.1:9000/", "http://localhost:9000", "http://[::1]:9000", "http://127.0.0.2:80/api"} {
		if _, err := parseConfig([]string{"-url", url}, &bytes.Buffer{}); err != nil {
			t.Errorf("-url %s: %v", url, err)
		}
	}
	if c, _ := parseConfig([]string{"-url", "http://127.0.0.1:9000/api/"}, &bytes.Buffer{}); c.url != "http://127.0.0.1:9000/api" {
		t.Errorf("base URL %q, want the trailing slash trimmed", c.url)
	}

	for _, args := range [][]string{
		{"-url", "http://10.0.0.1:8080"},
		{"-url", "http://example.com"},
		{"-url", "http://0.0.0.0:8080"},
		{"-url", "https://127.0.0.1:8080"},
		{"-url", "http://127.0.0.1:8080?x=1"},
		{"-workers", "0"},
		{"-workers", "100000"},
		{"-requests", "0"},
		{"-requests", "2000000"},
		{"-duration", "0s"},
		{"-duration", "2h"},
		{"-keys", "0"},
		{"-dup", "1"},
		{"-dup", "-0.1"},
		{"-dup", "NaN"},
		{"-route", "refunds"},
		{"-retries", "-1"},
		{"-account", " "},
		{"-spawn", "chi"},
		{"-spawn", "gin", "-url", "http://127.0.0.1:9000"},
		{"-db", "postgres://postgres@127.0.0.1/test"},
		{"-store", "gorm"},
		{"stray"},
	} {
		if _, err := parseConfig(args, &bytes.Buffer{}); err == nil {
			t.Errorf("parseConfig(%q) accepted", args)
		}
	}

	// The command answers bad flags with status 2 without sending anything.
	var out, errs bytes.Buffer
	if code := run(t.Context(), []string{"-url", "http://192.168.1.1:8080"}, &out, &errs); code != exitUsage {
		t.Fatalf("non-loopback -url: exit status %d, want %d", code, exitUsage)
	}
	if !strings.Contains(errs.String(), "not a loopback address") || out.Len() != 0 {
		t.Fatalf("stdout %q, stderr %q", &out, &errs)
	}
}

func TestLoopbackOnlyDialer(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"127.0.0.1:80", "127.1.2.3:8080", "[::1]:443"} {
		if err := loopbackOnly("tcp", addr, nil); err != nil {
			t.Errorf("%s: %v", addr, err)
		}
	}
	for _, addr := range []string{"10.0.0.1:80", "[2001:db8::1]:80", "0.0.0.0:80", "93.184.216.34:80", "localhost:80"} {
		if err := loopbackOnly("tcp", addr, nil); err == nil {
			t.Errorf("%s: accepted", addr)
		}
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	got := percentiles(ds)
	if want := "p50 50.00ms  p90 90.00ms  p99 99.00ms  max 100.00ms  (100)"; got != want {
		t.Fatalf("percentiles = %q, want %q", got, want)
	}
	if p := percentile([]time.Duration{7}, 0.99); p != 7 {
		t.Fatalf("percentile of one value = %v", p)
	}
	if percentiles(nil) != "(none)" {
		t.Fatal("percentiles of nothing")
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]time.Duration{
		"1": time.Second, "3": 3 * time.Second, "0": 0, "": defaultRetryAfter, "soon": defaultRetryAfter,
		"-2": defaultRetryAfter, "3600": maxRetryAfter, "Wed, 21 Oct 2015 07:28:00 GMT": defaultRetryAfter,
	} {
		if got := parseRetryAfter(v); got != want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", v, got, want)
		}
	}
}
