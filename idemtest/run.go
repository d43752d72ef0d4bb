package idemtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Run runs every check against t and reports what it found. It sends a bounded number
// of requests (about 30 plus Parallel) and stops when t.Timeout or ctx's deadline passes,
// reporting the checks it reached. Each operation uses a fresh random key, so Run can be
// repeated against the same deployment and caller. The error is for an invalid Target
// only; what the route did wrong is in the Report.
func Run(ctx context.Context, t Target) (Report, error) {
	t, err := t.withDefaults()
	if err != nil {
		return Report{}, err
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()

	s := &sender{t: t, bases: t.URLs, c: t.Client}
	if t.Handler != nil {
		srv := httptest.NewServer(t.Handler)
		defer srv.Close()
		s.bases = []string{srv.URL}
	}
	if s.c == nil {
		s.c = newClient(t)
	}
	defer s.c.CloseIdleConnections()

	c := &checker{ctx: ctx, t: t, s: s, runID: newRunID()}
	rep := Report{Target: t.describe()}
	for _, ch := range checks {
		if err := ctx.Err(); err != nil {
			rep.Err = fmt.Sprintf("after %s: %v", time.Since(began).Round(time.Millisecond), context.Cause(ctx))
			break
		}
		sentBefore := s.sent.Load()
		res := &Result{Name: ch.name, Want: ch.want, Outcome: Pass}
		ch.run(c, res)
		if len(res.Failures) > 0 {
			res.Outcome = Fail
		}
		res.Requests = int(s.sent.Load() - sentBefore)
		rep.Results = append(rep.Results, *res)
	}
	rep.Requests = int(s.sent.Load())
	rep.Duration = time.Since(began)
	return rep, nil
}

// Check runs every check against target from a test and reports each failure with
// t.Errorf, naming the check, what it expected and what came back. The whole report is
// logged with t.Log, pass or fail: go test prints it when the test fails, and with -v when
// it passes. An invalid Target is fatal. It returns the report.
//
//	idemtest.Check(t, idemtest.Target{Handler: srv, Path: "/v1/orders",
//		Body: func(int) []byte { return []byte(`{"item":"book"}`) }, SideEffects: countOrders})
func Check(t testing.TB, target Target) Report {
	t.Helper()
	rep, err := Run(t.Context(), target)
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range rep.Results {
		for _, f := range res.Failures {
			t.Errorf("idemtest: %s: %s", res.Name, f)
		}
	}
	if rep.Err != "" {
		t.Errorf("idemtest: stopped early: %s", rep.Err)
	}
	var b strings.Builder
	_ = rep.WriteText(&b)
	t.Log("\n" + b.String())
	return rep
}

// newRunID makes the run's keys unique across runs.
func newRunID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}
