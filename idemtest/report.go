package idemtest

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Outcome is how a check ended.
type Outcome string

// The outcomes.
const (
	// Pass: the route behaved as the check requires.
	Pass Outcome = "pass"
	// Fail: it did not; Result.Failures says what was expected and what came back.
	Fail Outcome = "fail"
	// Skip: the check did not run; Result.Note says why (a Target field not set, or a
	// check it depends on failed).
	Skip Outcome = "skip"
)

// Result is the result of one check.
type Result struct {
	// Name identifies the check; names are stable ("missing-key", "replay").
	Name string `json:"name"`
	// Want is what the check requires, in a sentence.
	Want string `json:"want"`
	// Outcome is pass, fail or skip.
	Outcome Outcome `json:"outcome"`
	// Failures, one per violated expectation: what was expected and what came back
	// (status, headers, body excerpt).
	Failures []string `json:"failures,omitempty"`
	// Note says why a check was skipped, or what a passing check could not verify (no
	// side-effect counter).
	Note string `json:"note,omitempty"`
	// Requests is how many requests the check sent.
	Requests int `json:"requests"`
}

// Report is what Run found.
type Report struct {
	// Target names what was checked: "POST /v1/orders on https://staging.example.com".
	Target string `json:"target"`
	// Results, one per check, in the order they ran.
	Results []Result `json:"results"`
	// Requests is how many requests the run sent.
	Requests int `json:"requests"`
	// Duration is how long the run took.
	Duration time.Duration `json:"duration_ns"`
	// Err is set when the run stopped early (its deadline passed or its context was
	// cancelled); the checks it did not reach are missing from Results.
	Err string `json:"error,omitempty"`
}

// Failed reports whether any check failed or the run stopped early.
func (r Report) Failed() bool {
	if r.Err != "" {
		return true
	}
	for _, res := range r.Results {
		if res.Outcome == Fail {
			return true
		}
	}
	return false
}

// Count reports how many checks ended with o.
func (r Report) Count(o Outcome) int {
	n := 0
	for _, res := range r.Results {
		if res.Outcome == o {
			n++
		}
	}
	return n
}

// WriteText writes the report for people: one line per check, the failures under it,
// and a summary line.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "idem check: %s\n", r.Target)
	for _, res := range r.Results {
		fmt.Fprintf(&b, "  %-4s  %-22s %s\n", strings.ToUpper(string(res.Outcome)), res.Name, res.Want)
		for _, f := range res.Failures {
			fmt.Fprintf(&b, "          - %s\n", f)
		}
		if res.Note != "" {
			fmt.Fprintf(&b, "          (%s)\n", res.Note)
		}
	}
	if r.Err != "" {
		fmt.Fprintf(&b, "  stopped early: %s\n", r.Err)
	}
	verdict := "ok"
	if r.Failed() {
		verdict = "FAILED"
	}
	fmt.Fprintf(&b, "%s: %d passed, %d failed, %d skipped; %d requests in %s\n", verdict,
		r.Count(Pass), r.Count(Fail), r.Count(Skip), r.Requests, r.Duration.Round(time.Millisecond))
	_, err := io.WriteString(w, b.String())
	return err
}
