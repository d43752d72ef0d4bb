package idemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/idemkit/idem/core"
)

// check is one entry of the verification list.
type check struct {
	name, want string
	run        func(c *checker, r *Result)
}

// checks is the verification list, in the order Run runs it. Later checks use the
// first operation's key and answer.
var checks = []check{
	{"missing-key", "no key: 400 problem key-missing, nothing runs", (*checker).missingKey},
	{"malformed-keys", "empty, 256 chars, control char, non-ASCII, bare comma, two fields: 400 problem key-invalid, nothing stored", (*checker).malformedKeys},
	{"first-fresh", "a new key: 2xx without Idempotent-Replayed, one side effect", (*checker).firstFresh},
	{"replay", "the same key and body: the first answer byte for byte with Idempotent-Replayed: true, no side effect", (*checker).replay},
	{"changed-body", "the same key with another body: 422 problem key-reused, no side effect", (*checker).changedBody},
	{"parallel", "concurrent requests with one key: one side effect; answers fresh, replay, or 409 with Retry-After", (*checker).parallel},
	{"failure-retry", "a 5xx is not stored: the retry with the same key runs again", (*checker).failureRetry},
	{"get-untouched", "GET ignores the key: answered as without one, never replayed", (*checker).getUntouched},
}

// checker holds a run's state across checks.
type checker struct {
	ctx   context.Context
	t     Target
	s     *sender
	runID string
	ops   int // operations (fresh keys) so far: the next Body index

	// The first operation, for replay and changed-body.
	firstKey  string
	firstBody []byte
	first     *response
}

// newOp returns a fresh key named after what it is for and the operation's body.
func (c *checker) newOp(what string) (key string, body []byte) {
	body = c.t.Body(c.ops)
	c.ops++
	return fmt.Sprintf("idemtest-%s-%d-%s", c.runID, c.ops, what), body
}

// send sends one request to the route.
func (c *checker) send(keys []string, body []byte) (*response, error) {
	return c.s.do(c.ctx, request{method: c.t.Method, path: c.t.Path, keys: keys, body: body})
}

// effects reads the side-effect counter (0 without one).
func (c *checker) effects() int {
	if c.t.SideEffects == nil {
		return 0
	}
	return c.t.SideEffects()
}

// requireEffects records a failure unless the counter moved by want since before.
func (c *checker) requireEffects(r *Result, before, want int, after string) {
	if c.t.SideEffects == nil {
		return
	}
	if got := c.t.SideEffects() - before; got != want {
		r.fail("side effects after %s: want %+d, got %+d", after, want, got)
	}
}

func (r *Result) fail(format string, args ...any) {
	r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
}

func (r *Result) skip(format string, args ...any) {
	r.Outcome = Skip
	r.Note = fmt.Sprintf(format, args...)
}

// problemFailure says why resp is not the RFC 9457 problem of kind, or "" if it is.
func problemFailure(resp *response, kind core.ProblemKind) string {
	want := fmt.Sprintf("%d problem (application/problem+json, type …%s)", kind.Status(), kind)
	if resp.Status != kind.Status() {
		return fmt.Sprintf("want %s; got %s", want, resp)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		return fmt.Sprintf("want %s; got Content-Type %q: %s", want, ct, resp)
	}
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
	}
	if err := json.Unmarshal(resp.Body, &p); err != nil {
		return fmt.Sprintf("want %s; got a body that is not a JSON object (%v): %s", want, err, resp)
	}
	if p.Status != kind.Status() || !strings.HasSuffix(p.Type, string(kind)) {
		return fmt.Sprintf("want %s; got type %q, status %d: %s", want, p.Type, p.Status, resp)
	}
	return ""
}

// requireProblem records a failure unless resp is the problem of kind.
func requireProblem(r *Result, what string, resp *response, kind core.ProblemKind) {
	if f := problemFailure(resp, kind); f != "" {
		r.fail("%s: %s", what, f)
	}
}

func is2xx(status int) bool { return status >= 200 && status < 300 }

// requireFresh records a failure unless resp is a 2xx that ran the operation.
func requireFresh(r *Result, what string, resp *response) bool {
	switch {
	case !is2xx(resp.Status):
		r.fail("%s: want 2xx; got %s", what, resp)
	case resp.Header.Values("Idempotent-Replayed") != nil:
		r.fail("%s: want a fresh answer (no Idempotent-Replayed); got %s", what, resp)
	default:
		return true
	}
	return false
}

// replayFailures says how again differs from a replay of first.
func replayFailures(first, again *response) []string {
	var fs []string
	if again.Status != first.Status {
		fs = append(fs, fmt.Sprintf("status: want %d as first; got %d", first.Status, again.Status))
	}
	if !bytes.Equal(again.Body, first.Body) {
		fs = append(fs, fmt.Sprintf("body: want the first body byte for byte %s; got %s", excerpt(first.Body), excerpt(again.Body)))
	}
	for _, h := range []string{"Location", "Content-Type"} {
		if w, g := first.Header.Values(h), again.Header.Values(h); strings.Join(w, "\n") != strings.Join(g, "\n") {
			fs = append(fs, fmt.Sprintf("%s: want %q as first; got %q", h, w, g))
		}
	}
	if v := again.Header.Values("Idempotent-Replayed"); len(v) != 1 || v[0] != "true" {
		fs = append(fs, fmt.Sprintf("Idempotent-Replayed: want \"true\"; got %q", v))
	}
	return fs
}

func (c *checker) missingKey(r *Result) {
	_, body := c.newOp("missing")
	before := c.effects()
	resp, err := c.send(nil, body)
	if err != nil {
		r.fail("%v", err)
		return
	}
	requireProblem(r, "no Idempotency-Key", resp, core.ProblemKeyMissing)
	c.requireEffects(r, before, 0, "a request without a key")
}

func (c *checker) malformedKeys(r *Result) {
	base, body := c.newOp("malformed")
	cases := []struct {
		name string
		keys []string
	}{
		{"empty", []string{""}},
		{"256 characters", []string{(base + strings.Repeat("k", 256))[:256]}},
		{"control character", []string{base + "\tx"}},
		{"non-ASCII", []string{base + "-clé"}},
		{"bare key with a comma", []string{base + ",x"}},
		{"two fields", []string{base + "-a", base + "-b"}},
		{"two fields, one key", []string{base, base}},
	}
	before := c.effects()
	for _, tc := range cases {
		resp, err := c.send(tc.keys, body)
		if err != nil {
			r.fail("%s: %v", tc.name, err)
			continue
		}
		requireProblem(r, fmt.Sprintf("key %s %s", tc.name, showKeys(tc.keys)), resp, core.ProblemKeyInvalid)
	}
	c.requireEffects(r, before, 0, "the malformed keys")
	// Nothing was stored under the key sent twice: alone, it runs fresh.
	before = c.effects()
	resp, err := c.send([]string{base}, body)
	if err != nil {
		r.fail("the key of \"two fields, one key\" sent once: %v", err)
		return
	}
	if requireFresh(r, "the key of \"two fields, one key\" sent once (was anything stored?)", resp) {
		c.requireEffects(r, before, 1, "that key sent once")
	}
}

// showKeys quotes key fields for a message, shortening long ones.
func showKeys(keys []string) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		if len(k) > 48 {
			parts[i] = fmt.Sprintf("%q…(%d bytes)", k[:40], len(k))
		} else {
			parts[i] = fmt.Sprintf("%q", k)
		}
	}
	return strings.Join(parts, ", ")
}

func (c *checker) firstFresh(r *Result) {
	key, body := c.newOp("first")
	before := c.effects()
	resp, err := c.send([]string{key}, body)
	if err != nil {
		r.fail("%v", err)
		return
	}
	c.firstKey, c.firstBody = key, body
	if is2xx(resp.Status) {
		c.first = resp
	}
	requireFresh(r, "first request", resp)
	c.requireEffects(r, before, 1, "the first request")
}

// needFirst skips r when the first operation did not succeed.
func (c *checker) needFirst(r *Result) bool {
	if c.first == nil {
		r.skip("needs a successful first-fresh")
		return false
	}
	return true
}

func (c *checker) replay(r *Result) {
	if !c.needFirst(r) {
		return
	}
	before := c.effects()
	resp, err := c.send([]string{c.firstKey}, c.firstBody)
	if err != nil {
		r.fail("%v", err)
		return
	}
	for _, f := range replayFailures(c.first, resp) {
		r.fail("retry: %s", f)
	}
	c.requireEffects(r, before, 0, "the retry")
}

func (c *checker) changedBody(r *Result) {
	if !c.needFirst(r) {
		return
	}
	changed := c.t.Body(c.ops)
	if sameRequest(changed, c.firstBody) {
		changed = alter(c.firstBody)
	}
	before := c.effects()
	resp, err := c.send([]string{c.firstKey}, changed)
	if err != nil {
		r.fail("%v", err)
		return
	}
	requireProblem(r, fmt.Sprintf("the first key with body %s", excerpt(changed)), resp, core.ProblemKeyReused)
	c.requireEffects(r, before, 0, "the changed body")
}

// sameRequest reports whether two bodies are one request to idem's fingerprint: equal
// bytes, or JSON documents with the same members whatever their order and spacing.
func sameRequest(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ja, _ := json.Marshal(x) // sorts object members
	jb, _ := json.Marshal(y)
	return bytes.Equal(ja, jb)
}

// alter returns another request body: a JSON object with one more member, any other
// body with one more byte.
func alter(body []byte) []byte {
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) == nil && obj != nil {
		obj["idemtest_changed"] = json.RawMessage("true")
		b, _ := json.Marshal(obj)
		return b
	}
	return append(append([]byte(nil), body...), ' ', 'x')
}

func (c *checker) parallel(r *Result) {
	key, body := c.newOp("parallel")
	before := c.effects()
	n := c.t.Parallel
	resps := make([]*response, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			resps[i], errs[i] = c.send([]string{key}, body)
		})
	}
	close(start)
	wg.Wait()

	var got []*response
	for i, err := range errs {
		if err != nil {
			r.fail("request %d: %v", i+1, err)
			continue
		}
		got = append(got, resps[i])
	}
	var fresh []*response
	for _, resp := range got {
		if is2xx(resp.Status) && !resp.replayed() {
			fresh = append(fresh, resp)
		}
	}
	if len(fresh) != 1 {
		r.fail("want exactly one fresh 2xx answer; got %d (%s)", len(fresh), statusCount(got))
	}
	for _, resp := range got {
		switch {
		case is2xx(resp.Status) && !resp.replayed():
		case resp.replayed():
			if len(fresh) == 1 {
				for _, f := range replayFailures(fresh[0], resp) {
					r.fail("replay of the fresh answer: %s", f)
				}
			}
		case resp.Status == http.StatusConflict:
			if resp.Header.Get("Retry-After") == "" {
				r.fail("409 without Retry-After: %s", resp)
			}
			requireProblem(r, "409", resp, core.ProblemInProgress)
		default:
			r.fail("want fresh, replay or 409 with Retry-After; got %s", resp)
		}
	}
	r.Note = statusCount(got)
	if c.t.SideEffects == nil {
		r.Note += "; side effects not counted (no SideEffects)"
	}
	c.requireEffects(r, before, 1, fmt.Sprintf("%d concurrent requests with one key", n))
	if len(fresh) != 1 {
		return
	}
	// The key was recorded: one more retry replays it.
	resp, err := c.send([]string{key}, body)
	if err != nil {
		r.fail("retry after the concurrent requests: %v", err)
		return
	}
	for _, f := range replayFailures(fresh[0], resp) {
		r.fail("retry after the concurrent requests: %s", f)
	}
}

func (c *checker) failureRetry(r *Result) {
	if c.t.InjectFailure == nil {
		r.skip("no InjectFailure (CLI: -fail-header)")
		return
	}
	key, body := c.newOp("failure")
	failed, err := c.s.do(c.ctx, request{method: c.t.Method, path: c.t.Path, keys: []string{key}, body: body, prepare: c.t.InjectFailure})
	if err != nil {
		r.fail("the failing request: %v", err)
		return
	}
	if failed.Status < 500 {
		r.fail("the failing request: want a 5xx (is InjectFailure wired to the handler?); got %s", failed)
		return
	}
	before := c.effects()
	retry, err := c.send([]string{key}, body)
	if err != nil {
		r.fail("retry: %v", err)
		return
	}
	if !requireFresh(r, fmt.Sprintf("retry after %d (must run again, not replay)", failed.Status), retry) {
		return
	}
	c.requireEffects(r, before, 1, "the retry")
	again, err := c.send([]string{key}, body)
	if err != nil {
		r.fail("second retry: %v", err)
		return
	}
	for _, f := range replayFailures(retry, again) {
		r.fail("second retry: %s", f)
	}
}

func (c *checker) getUntouched(r *Result) {
	if c.t.GetPath == "" {
		r.skip("no GetPath (CLI: -get)")
		return
	}
	get := func(keys ...string) (*response, error) {
		return c.s.do(c.ctx, request{method: http.MethodGet, path: c.t.GetPath, keys: keys})
	}
	plain, err := get()
	if err != nil {
		r.fail("GET without a key: %v", err)
		return
	}
	if problemFailure(plain, core.ProblemKeyMissing) == "" {
		r.fail("GET without a key: want it answered as usual; got a key-missing problem: %s", plain)
		return
	}
	fresh, _ := c.newOp("get")
	keys := [][2]string{{"a new key", fresh}}
	if c.first != nil {
		keys = append(keys, [2]string{"the first operation's key", c.firstKey})
	}
	for _, wk := range keys {
		what, k := wk[0], wk[1]
		resp, err := get(k)
		if err != nil {
			r.fail("GET with %s: %v", what, err)
			continue
		}
		if resp.Status != plain.Status || resp.replayed() {
			r.fail("GET with %s: want %d as without a key, not replayed; got %s", what, plain.Status, resp)
		}
	}
}
