// Package history records what clients of an idempotent endpoint saw — every request as
// a call and a return, with the answer — and checks the history for linearizability
// with porcupine (github.com/anishathalye/porcupine, as etcd's robustness tests do)
// against a model of one idempotency key:
//
//   - the first completion fixes the answer: a fresh run (the handler's own response) is
//     allowed only while no answer is recorded, so a key executes at most once;
//   - a replay must carry the recorded answer, byte for byte;
//   - a call that starts after a completion was returned must get that answer replayed:
//     never a fresh run, never a 409 (in progress);
//   - a request that failed closed (503, or a transport error) may or may not have
//     recorded an answer, which later replays then reveal;
//   - any other answer (a 500, an unexpected status) is never allowed.
//
// Keys are independent: the history is partitioned by key. Record a request with
// Recorder.Begin and Call.End (or Recorder.Do for net/http), then Check or Require.
//
// Test support only.
package history

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Kind is what kind of answer a request got.
type Kind int

const (
	// Fresh: the handler ran and its response came back (not marked as a replay).
	Fresh Kind = iota + 1
	// Replayed: the recorded response came back with Idempotent-Replayed: true.
	Replayed
	// InProgress: 409, the key was held by a request in flight.
	InProgress
	// Failed: the request failed closed (503 + Retry-After) or got no answer at all;
	// whether it recorded a response is unknown.
	Failed
	// Wrong: an answer that is never right (a 500, a 503 without Retry-After, any
	// other status).
	Wrong
)

func (k Kind) String() string {
	switch k {
	case Fresh:
		return "fresh"
	case Replayed:
		return "replayed"
	case InProgress:
		return "409"
	case Failed:
		return "failed"
	case Wrong:
		return "wrong"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Output is a request's answer: its kind and, for a fresh or replayed answer, the
// response (status and body) that must be identical in every replay.
type Output struct {
	Kind     Kind
	Response string
	ranNot   bool // Failed, in a key's history whose run is known (see partition)
}

// Input is a request: the key it was sent with.
type Input struct{ Key string }

// Answer classifies an HTTP answer (err is the transport's error, resp nil then: a
// request with no answer, which may still take effect at any time later).
func Answer(resp *http.Response, body []byte, err error) Output {
	if err != nil || resp == nil {
		return Output{Kind: Failed, Response: noAnswer}
	}
	switch {
	case resp.StatusCode == http.StatusConflict:
		return Output{Kind: InProgress}
	case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
		return Output{Kind: Failed}
	case resp.StatusCode >= 500:
		return Output{Kind: Wrong, Response: fmt.Sprintf("%d %s", resp.StatusCode, body)}
	}
	out := Output{Kind: Fresh, Response: fmt.Sprintf("%d %s", resp.StatusCode, body)}
	if resp.Header.Get("Idempotent-Replayed") == "true" {
		out.Kind = Replayed
	}
	return out
}

// Recorder collects a history; it is safe for concurrent use.
type Recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

// NewRecorder returns an empty history whose clock starts now.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Call is a request begun and not yet ended.
type Call struct {
	r   *Recorder
	in  Input
	at  int64
	cid int
}

// Begin records the call of a request with key, now; End records its return.
func (r *Recorder) Begin(key string) *Call {
	return &Call{r: r, in: Input{Key: key}, at: r.now()}
}

// End records the request's return, now, with its answer. A request that got no answer
// at all (a transport error) may still take effect later, so its return is recorded as
// never.
func (c *Call) End(out Output) {
	ret := c.r.now()
	if out.Kind == Failed && out.Response == noAnswer {
		ret = math.MaxInt64
	}
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	c.r.ops = append(c.r.ops, porcupine.Operation{ClientId: len(c.r.ops), Input: c.in, Call: c.at, Output: out, Return: ret})
}

// noAnswer marks a Failed output that got no answer at all.
const noAnswer = "no answer"

// Do sends req with client, records it under key and returns the answer (the body read
// whole). A transport error is recorded as a request that may take effect at any time
// later.
func (r *Recorder) Do(client *http.Client, key string, req *http.Request) (*http.Response, []byte, error) {
	c := r.Begin(key)
	resp, err := client.Do(req)
	var body []byte
	if err == nil {
		body, err = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
	}
	c.End(Answer(resp, body, err))
	return resp, body, err
}

// Len returns how many requests the history holds.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

// Count returns how many requests got each kind of answer.
func (r *Recorder) Count() map[Kind]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[Kind]int{}
	for _, op := range r.ops {
		m[op.Output.(Output).Kind]++
	}
	return m
}

func (r *Recorder) now() int64 { return int64(time.Since(r.start)) }

// Check checks the history against the model of one key per partition, for at most
// timeout, and returns porcupine's verdict and what it found.
func (r *Recorder) Check(timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	r.mu.Lock()
	ops := append([]porcupine.Operation(nil), r.ops...)
	r.mu.Unlock()
	return porcupine.CheckOperationsVerbose(Model, ops, timeout)
}

// Violations returns, for at most a few keys, the rules their histories break that a
// single pass finds (see violations); none does not mean linearizable, which Check
// decides.
func (r *Recorder) Violations() []string {
	r.mu.Lock()
	ops := append([]porcupine.Operation(nil), r.ops...)
	r.mu.Unlock()
	var bad []string
	for _, part := range partition(ops) {
		for _, v := range violations(part) {
			bad = append(bad, "key "+part[0].Input.(Input).Key+": "+v)
		}
		if len(bad) >= 5 {
			break
		}
	}
	return bad
}

// CheckTimeout bounds Require's check; histories of one key are small, so it returns in
// milliseconds unless a key has hundreds of concurrent requests.
const CheckTimeout = time.Minute

// Require fails the test unless the history is linearizable. When it is not, it writes
// porcupine's visualization to a file in the test's temporary directory's parent (kept
// after the test; its path is in the message).
func Require(t testing.TB, r *Recorder) {
	t.Helper()
	if bad := r.Violations(); len(bad) > 0 {
		t.Fatalf("history: %d requests break the model of one key: %s", r.Len(), strings.Join(bad, "; "))
	}
	res, info := r.Check(CheckTimeout)
	switch res {
	case porcupine.Ok:
		return
	case porcupine.Unknown:
		t.Fatalf("history: the check of %d requests did not finish within %s", r.Len(), CheckTimeout)
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("idem-history-%s-%d.html", strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()), time.Now().UnixNano()))
	if err := porcupine.VisualizePath(Model, info, path); err != nil {
		path = "(no visualization: " + err.Error() + ")"
	}
	t.Fatalf("history: %d requests are not linearizable against the model of one key (first completion fixes the answer, "+
		"later calls replay it, at most one run): %s; visualization: %s", r.Len(), r.illegal(), path)
}

// illegal describes the keys whose histories fail the model, for the failure message.
func (r *Recorder) illegal() string {
	r.mu.Lock()
	ops := append([]porcupine.Operation(nil), r.ops...)
	r.mu.Unlock()
	var bad []string
	for _, part := range partition(ops) {
		if !porcupine.CheckOperations(Model, part) {
			var b strings.Builder
			fmt.Fprintf(&b, "key %s:", part[0].Input.(Input).Key)
			for _, op := range part {
				o := op.Output.(Output)
				ret := "never"
				if op.Return != math.MaxInt64 {
					ret = time.Duration(op.Return).String()
				}
				fmt.Fprintf(&b, " [%v–%s %s %.60q]", time.Duration(op.Call), ret, o.Kind, o.Response)
			}
			bad = append(bad, b.String())
			if len(bad) == 3 {
				break
			}
		}
	}
	return strings.Join(bad, "; ")
}
