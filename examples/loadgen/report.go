package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// summary is everything one run measured and checked.
type summary struct {
	plan    plan
	result  result
	verdict verdict
}

// execute makes one run: it starts the server when cfg.spawn asks, sends the plan,
// checks exactly once and prints it all to w.
func execute(ctx context.Context, cfg config, w io.Writer) (sum summary, err error) {
	var srv *server
	if cfg.spawn != "" {
		s, cleanup, err := spawn(ctx, cfg)
		if err != nil {
			return sum, err
		}
		defer func() {
			err = errors.Join(err, cleanup())
		}()
		srv, cfg.url = s, s.url
	}
	sum.plan = newPlan(cfg.requests, cfg.keys, cfg.dup, cfg.seed)
	l := newLoader(cfg, sum.plan.distinct)
	defer l.client.CloseIdleConnections()

	fmt.Fprintf(w, "loadgen  POST %s as account %s, keys %s-N\n", l.post, cfg.account, l.run)
	if srv != nil {
		fmt.Fprintf(w, "server   %s (spawned, pid %d) on %s\n", spawnApps[cfg.spawn], srv.cmd.Process.Pid, srv.store)
	}
	printPlan(w, cfg, sum.plan)
	before := loadAvg()
	sum.result = l.load(ctx, sum.plan)
	after := loadAvg()
	if before != "" {
		fmt.Fprintf(w, "machine  %d CPUs, load average %s before, %s after\n", runtime.NumCPU(), before, after)
	}
	printResult(w, sum.result)

	// The check runs even after an interrupt: requests in flight have finished.
	sum.verdict, err = l.verify(context.WithoutCancel(ctx))
	if err != nil {
		return sum, fmt.Errorf("checking exactly once: %w", err)
	}
	printVerdict(w, sum.verdict)
	if srv != nil && (!sum.verdict.exactlyOnce() || len(sum.result.other) > 0) {
		fmt.Fprintf(w, "server log, last lines:\n%s", lastLines(srv.out.String(), 20))
	}
	return sum, nil
}

func printPlan(w io.Writer, cfg config, p plan) {
	keys := fmt.Sprintf("%d keys", p.distinct)
	if p.distinct < cfg.keys {
		keys += fmt.Sprintf(" (-keys %d: %d requests at dup %.2f need only %d)", cfg.keys, len(p.keys), cfg.dup, p.distinct)
	}
	dup := fmt.Sprintf("dup %.2f", p.dupRatio())
	if math.Abs(p.dupRatio()-cfg.dup) > 0.005 && p.distinct == cfg.keys {
		dup += fmt.Sprintf(" (asked %.2f: %d keys cover %d requests at that ratio, the other requests reuse keys too)",
			cfg.dup, cfg.keys, int(math.Round(float64(cfg.keys)/(1-cfg.dup))))
	}
	fmt.Fprintf(w, "plan     %d requests over %s, %s, %d workers, at most %s, seed %d\n",
		len(p.keys), keys, dup, cfg.workers, cfg.duration, cfg.seed)
}

func printResult(w io.Writer, r result) {
	rate := 0.0
	if r.elapsed > 0 {
		rate = float64(len(r.all)) / r.elapsed.Seconds()
	}
	fmt.Fprintf(w, "sent     %d of %d planned requests + %d retries in %s: %.0f req/s (%d responses)\n",
		r.scheduled, r.planned, r.retries, r.elapsed.Round(time.Millisecond), rate, len(r.all))
	fmt.Fprintf(w, "latency  all          %s\n", percentiles(r.all))
	fmt.Fprintf(w, "         201 original %s\n", percentiles(r.first))
	fmt.Fprintf(w, "         201 replayed %s\n", percentiles(r.replay))
	other := 0
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r.other)) {
		other += r.other[k]
		parts = append(parts, fmt.Sprintf("%s ×%d", k, r.other[k]))
	}
	detail := ""
	if other > 0 {
		detail = " (" + strings.Join(parts, ", ") + ")"
		if r.firstErr != nil {
			detail += "; first transport error: " + r.firstErr.Error()
		}
	}
	fmt.Fprintf(w, "status   201 original %d, 201 replayed %d, 409 %d (retried %d, gave up %d, dropped at the end %d), other %d%s\n",
		r.created, r.replayed, r.conflicts, r.retries, r.gaveUp, r.abandoned, other, detail)
	fmt.Fprintf(w, "keys     %d distinct sent, %d acknowledged with a 201\n", r.sent, r.acked)
}

func printVerdict(w io.Writer, v verdict) {
	what := "orders"
	if v.route == routePayments {
		what = "payments"
	}
	result := "exactly once"
	if !v.exactlyOnce() {
		result = "NOT exactly once"
		if v.acked == 0 {
			result += " (no key was acknowledged)"
		}
	}
	extra := ""
	if v.route == routePayments {
		extra = fmt.Sprintf(", %d provider charges", v.charges)
	}
	if v.others > 0 {
		extra += fmt.Sprintf(" (and %d of the account's rows from other keys, not counted)", v.others)
	}
	fmt.Fprintf(w, "%-8s %d created for this run's keys%s, %d distinct keys acknowledged: %s\n",
		what, v.created, extra, v.acked, result)
	for _, p := range v.problems {
		fmt.Fprintf(w, "  - %s\n", p)
	}
	if v.count > len(v.problems) {
		fmt.Fprintf(w, "  - … and %d more\n", v.count-len(v.problems))
	}
}

// percentiles prints p50, p90, p99 and the maximum of ds (sorted in place).
func percentiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "(none)"
	}
	slices.Sort(ds)
	return fmt.Sprintf("p50 %s  p90 %s  p99 %s  max %s  (%d)",
		ms(percentile(ds, 0.50)), ms(percentile(ds, 0.90)), ms(percentile(ds, 0.99)), ms(ds[len(ds)-1]), len(ds))
}

// percentile is the nearest-rank percentile of sorted ds: the smallest value with at
// least a fraction p of the values at or below it.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }

// loadAvg is the machine's 1, 5 and 15 minute load averages, or "" where /proc has none.
func loadAvg() string {
	b, err := os.ReadFile(filepath.Join("/proc", "loadavg"))
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func lastLines(s string, n int) string {
	lines := strings.SplitAfter(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "") + "\n"
}
