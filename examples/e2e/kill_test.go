package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The size of one kill run. IDEM_KILL_TRIALS sets how many runs (kills) each server
// makes on each database (default 1); IDEM_KILL_SEED the seed of the first run (default
// random; run i uses seed+i).
const (
	killKeys      = 240  // distinct keys per run
	killTwinShare = 0.25 // of the keys, sent twice concurrently during the load
	killBadShare  = 0.05 // of the keys, with a body the API rejects with a stored 400
	killWorkers   = 8    // concurrent senders during the load and the recovery
	killLease     = 2 * time.Second
	// recoverWithin bounds the recovery: the dead attempts' leases, then every key
	// re-sent, on a loaded machine with -race binaries.
	recoverWithin = 2 * time.Minute
	// maxRetryWait caps one Retry-After wait, so a bad header cannot stall the test.
	maxRetryWait = 5 * time.Second
)

// TestKillUnderLoad SIGKILLs each example server on each database while it serves a
// steady mixed load of orders (atomic) and payments (phased), some keys sent twice at
// once; restarts it on the same database with a short lease; re-sends every key with its
// body until each gets its final answer (409 and 503 are waited out per Retry-After);
// and checks: every answer seen before the kill is replayed byte for byte with
// Idempotent-Replayed: true, every key has exactly one order or one payment with one
// provider charge (none for a rejected body), and no row belongs to no key. The kill
// lands the moment a request chosen by the seed has been written to the server, so
// requests are in flight.
func TestKillUnderLoad(t *testing.T) {
	trials := 1
	if v := os.Getenv("IDEM_KILL_TRIALS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "IDEM_KILL_TRIALS")
		require.Positive(t, n, "IDEM_KILL_TRIALS")
		trials = n
	}
	eachExample(t, func(t *testing.T, app string, st storage) {
		seed := randomSeed()
		if v := os.Getenv("IDEM_KILL_SEED"); v != "" {
			var err error
			seed, err = strconv.ParseUint(v, 10, 64)
			require.NoError(t, err, "IDEM_KILL_SEED")
		}
		dir, env := st.setup(t)
		args := []string{"-lease", killLease.String()}
		s := start(t, app, dir, env, args...)
		var total killCounts
		for i := range trials {
			run := newKillRun(seed + uint64(i))
			t.Logf("run %d/%d: seed %d: kill when request %d of %d is written (reproduce with IDEM_KILL_SEED=%d go test -run '^%s$' ./examples/e2e)",
				i+1, trials, run.seed, run.killAt, run.requests, run.seed, t.Name())
			run.load(t, s)
			s = start(t, app, dir, env, args...)
			run.recover(t, s)
			c := run.check(t, s)
			t.Logf("%s/%s run %d/%d: %s", app, st.name, i+1, trials, c)
			total.add(c)
			if t.Failed() {
				t.Logf("run %d failed: seed %d, account %s", i+1, run.seed, run.account)
				break
			}
		}
		if trials > 1 {
			t.Logf("%s/%s, %d kills: %s", app, st.name, trials, total)
		}
		assert.Positive(t, total.inFlight, "no request was in flight at any kill")
		assert.Zero(t, total.twice, "keys executed twice")
		assert.Zero(t, total.lost, "acknowledged keys lost")
		s.shutdown(t)
	})
}

// killCounts are what one run (or several) saw.
type killCounts struct {
	keys     int // distinct keys, every one re-sent after the restart
	sent     int // keys with a request written to the server before the kill
	acked    int // keys answered 201 or 400 before the kill
	inFlight int // keys with a request written and not answered when the server died
	replayed int // keys whose final answer after the restart was a replay
	resumed  int // keys in flight at the kill that ran to completion after the restart
	waited   int // keys answered 409 after the restart: a dead attempt's lease, waited out
	twice    int // keys that ran more than once: two originals, two rows
	lost     int // keys answered before the kill that lost the answer or the row
}

func (c *killCounts) add(o killCounts) {
	c.keys += o.keys
	c.sent += o.sent
	c.acked += o.acked
	c.inFlight += o.inFlight
	c.replayed += o.replayed
	c.resumed += o.resumed
	c.waited += o.waited
	c.twice += o.twice
	c.lost += o.lost
}

func (c killCounts) String() string {
	return fmt.Sprintf("keys %d, sent before the kill %d, acknowledged before the kill %d, in flight at the kill %d, "+
		"replayed after the restart %d (run after it %d, 409 first %d), executed twice %d, lost %d",
		c.keys, c.sent, c.acked, c.inFlight, c.replayed, c.resumed, c.waited, c.twice, c.lost)
}

// killKey is one key of a run and everything it got.
type killKey struct {
	name  string // Idempotency-Key
	path  string // /v1/orders or /v1/payments
	body  string // the same for every request of the key
	valid bool   // false: a body the API answers with a stored 400
	twin  bool   // sent twice concurrently during the load

	mu       sync.Mutex
	before   []*response // answers during the load, in arrival order
	written  bool        // a request reached the server before it died
	inFlight bool        // a request written got no answer: the server died under it
	final    *response   // the final answer after the restart
	waited   bool        // a 409 came after the restart
}

// killRun is one run's plan: its keys in the order they are sent, and the request whose
// write triggers the kill.
type killRun struct {
	seed     uint64
	account  string
	keys     []*killKey
	requests int   // in the load: a key each, two for a twin
	killAt   int64 // the kill comes when this many requests have been written

	written atomic.Int64
	once    sync.Once
	killed  chan struct{} // closed just before the SIGKILL is sent
	victim  *server
	// killRedis, when set, is what the kill does instead of killing the server: SIGKILL
	// a Redis master (TestRedisMasterKillUnderLoad); the server keeps running.
	killRedis func()
}

func newKillRun(seed uint64) *killRun {
	rng := mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	r := &killRun{seed: seed, account: fmt.Sprintf("kill-%d", seed), killed: make(chan struct{})}
	for n := range killKeys {
		k := &killKey{name: fmt.Sprintf("key-%d", n), valid: rng.Float64() >= killBadShare, twin: rng.Float64() < killTwinShare}
		if rng.IntN(2) == 0 {
			k.path = "/v1/orders"
			k.body = fmt.Sprintf(`{"item":"kill %s","quantity":%d}`, k.name, 1+rng.IntN(9))
			if !k.valid {
				k.body = fmt.Sprintf(`{"item":"kill %s","quantity":0}`, k.name)
			}
		} else {
			k.path = "/v1/payments"
			k.body = fmt.Sprintf(`{"amount_cents":%d,"currency":"EUR"}`, 100+rng.IntN(9900))
			if !k.valid {
				k.body = `{"amount_cents":0,"currency":"EUR"}`
			}
		}
		r.keys = append(r.keys, k)
		r.requests++
		if k.twin {
			r.requests++
		}
	}
	// the kill lands somewhere in the middle three fifths of the load
	r.killAt = int64(r.requests/5 + 1 + rng.IntN(r.requests*3/5))
	return r
}

// load sends the plan to s with killWorkers workers until the kill, which it makes when
// the killAt-th request has been written; it returns once the process is dead.
func (r *killRun) load(t *testing.T, s *server) {
	r.victim = s
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2 * killWorkers}}
	defer client.CloseIdleConnections()
	jobs := make(chan *killKey)
	var wg sync.WaitGroup
	for range killWorkers {
		wg.Go(func() {
			for k := range jobs {
				if !k.twin {
					r.send(t, client, s, k)
					continue
				}
				var twins sync.WaitGroup
				for range 2 {
					twins.Go(func() { r.send(t, client, s, k) })
				}
				twins.Wait()
			}
		})
	}
send:
	for _, k := range r.keys {
		select {
		case jobs <- k:
		case <-r.killed:
			break send
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case <-r.killed:
	default:
		require.FailNow(t, "the load ended without a kill", "%d of %d requests written, the kill was due at %d",
			r.written.Load(), r.requests, r.killAt)
	}
	if r.killRedis != nil {
		return
	}
	select {
	case <-s.done:
	case <-time.After(stopTimeout):
		require.FailNow(t, "the server is still running after SIGKILL")
	}
	var ee *exec.ExitError
	require.ErrorAs(t, s.err, &ee)
	ws, ok := ee.Sys().(syscall.WaitStatus)
	require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "the server ended with %v, not by SIGKILL", s.err)
}

// send sends key k once during the load and records what came back. A request that
// never reached the server is not counted; one that reached it and got no answer was in
// flight at the kill.
func (r *killRun) send(t *testing.T, client *http.Client, s *server, k *killKey) {
	select {
	case <-r.killed:
		return // no more requests once the kill is on its way
	default:
	}
	var wrote atomic.Bool
	trace := &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
		if info.Err == nil && !wrote.Swap(true) && r.written.Add(1) == r.killAt {
			r.kill()
		}
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace),
		http.MethodPost, s.url+k.path, strings.NewReader(k.body))
	if !assert.NoError(t, err) {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Account-ID", r.account)
	req.Header.Set("Idempotency-Key", k.name)
	resp, err := client.Do(req)
	var b []byte
	if err == nil {
		b, err = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.written = k.written || wrote.Load()
	if err != nil {
		select {
		case <-r.killed:
			k.inFlight = k.inFlight || wrote.Load()
		default:
			assert.Fail(t, "a request failed before the kill", "key %s: %v", k.name, err)
		}
		return
	}
	k.before = append(k.before, &response{Status: resp.StatusCode, Header: resp.Header, Body: b})
}

// kill sends SIGKILL to the server under load (or to a Redis master, with killRedis),
// once.
func (r *killRun) kill() {
	r.once.Do(func() {
		close(r.killed)
		if r.killRedis != nil {
			r.killRedis()
			return
		}
		_ = r.victim.cmd.Process.Signal(syscall.SIGKILL)
	})
}

// recover sends every key to the restarted server s, with its body, until each gets its
// final answer: 201 or the stored 400. 409 (a dead attempt's lease, a twin in progress)
// and 503 are retried after their Retry-After.
func (r *killRun) recover(t *testing.T, s *server) {
	deadline := time.Now().Add(recoverWithin)
	jobs := make(chan *killKey)
	var wg sync.WaitGroup
	for range killWorkers {
		wg.Go(func() {
			for k := range jobs {
				r.resend(t, s, k, deadline)
			}
		})
	}
	for _, k := range r.keys {
		jobs <- k
	}
	close(jobs)
	wg.Wait()
}

func (r *killRun) resend(t *testing.T, s *server, k *killKey, deadline time.Time) {
	for tries := 1; ; tries++ {
		if time.Now().After(deadline) {
			assert.Fail(t, "no final answer after the restart", "key %s: %d tries within %s", k.name, tries-1, recoverWithin)
			return
		}
		a, err := s.try(http.MethodPost, k.path, k.body,
			"Content-Type", "application/json", "X-Account-ID", r.account, "Idempotency-Key", k.name)
		if !assert.NoError(t, err, "key %s after the restart", k.name) {
			return
		}
		switch a.Status {
		case http.StatusCreated, http.StatusBadRequest:
			k.mu.Lock()
			k.final = a
			k.mu.Unlock()
			return
		case http.StatusConflict, http.StatusServiceUnavailable:
			if a.Status == http.StatusConflict {
				k.mu.Lock()
				k.waited = true
				k.mu.Unlock()
			}
			time.Sleep(retryAfter(a))
		default:
			assert.Fail(t, "unexpected answer after the restart", "key %s: %s", k.name, a)
			return
		}
	}
}

// retryAfter is the wait a 409 or 503 asks for: whole seconds, 1 when missing or bad.
func retryAfter(a *response) time.Duration {
	n, err := strconv.Atoi(a.Header.Get("Retry-After"))
	if err != nil || n < 1 {
		return time.Second
	}
	return min(time.Duration(n)*time.Second, maxRetryWait)
}

// check lists what the restarted server holds for the run's account, matches it to the
// keys and counts.
func (r *killRun) check(t *testing.T, s *server) killCounts {
	c := killCounts{keys: len(r.keys)}

	orders := map[string][]killRow{} // item → orders
	for _, raw := range list(t, s.get(t, "/v1/orders", r.account), "orders") {
		o := decodeRow(t, raw)
		orders[o.Item] = append(orders[o.Item], o)
	}
	charges := map[string][]killRow{} // derived key → provider charges
	for _, raw := range list(t, s.get(t, "/v1/provider/charges", r.account), "charges") {
		ch := decodeRow(t, raw)
		charges[ch.IdempotencyKey] = append(charges[ch.IdempotencyKey], ch)
	}
	payments := map[string][]killRow{} // charge id → payments
	for _, raw := range list(t, s.get(t, "/v1/payments", r.account), "payments") {
		p := decodeRow(t, raw)
		payments[p.ChargeID] = append(payments[p.ChargeID], p)
	}

	for _, k := range r.keys {
		// what the key holds: its orders, or its charges and their payments
		var rows []killRow
		if k.path == "/v1/orders" {
			rows = orders["kill "+k.name]
			delete(orders, "kill "+k.name)
		} else {
			chs := charges[k.name+":charge"]
			delete(charges, k.name+":charge")
			want := 0
			if k.valid {
				want = 1
			}
			assert.Len(t, chs, want, "key %s: provider charges", k.name)
			if len(chs) > 1 {
				c.twice++
			}
			for _, ch := range chs {
				rows = append(rows, payments[ch.ID]...)
				delete(payments, ch.ID)
			}
		}
		twice, lost := r.checkKey(t, k, rows)
		if twice {
			c.twice++
		}
		if lost {
			c.lost++
		}
		if k.written {
			c.sent++
		}
		if k.inFlight {
			c.inFlight++
		}
		if stored(k.before) != nil {
			c.acked++
		}
		if k.waited {
			c.waited++
		}
		switch replayed := k.final != nil && k.final.Header.Get("Idempotent-Replayed") == "true"; {
		case replayed:
			c.replayed++
		case k.inFlight && k.final != nil && k.final.Status == http.StatusCreated:
			c.resumed++
		}
	}
	assert.Empty(t, orders, "orders that belong to no key of the run")
	assert.Empty(t, charges, "provider charges that belong to no key of the run")
	assert.Empty(t, payments, "payments whose charge belongs to no key of the run")
	return c
}

// checkKey checks one key's answers and rows: the answer before the kill (if any) is
// the final answer's original, replayed byte for byte; at most one answer ever came
// from running the operation; a valid key has exactly one row, the one its 201 names,
// with the same fields; a rejected body has none. It reports whether the key ran more
// than once and whether an acknowledged answer was lost.
func (r *killRun) checkKey(t *testing.T, k *killKey, rows []killRow) (twice, lost bool) {
	t.Helper()
	want := 0
	if k.valid {
		want = 1
	}
	if len(rows) > 1 {
		twice = true
	}
	assert.Len(t, rows, want, "key %s (%s %s): rows", k.name, k.path, k.body)

	originals := 0
	for _, a := range append(append([]*response(nil), k.before...), k.final) {
		if a == nil {
			continue
		}
		assert.Contains(t, []int{http.StatusCreated, http.StatusBadRequest, http.StatusConflict, http.StatusServiceUnavailable},
			a.Status, "key %s: answer %s", k.name, a)
		if a.Status == http.StatusCreated && a.Header.Get("Idempotent-Replayed") == "" {
			originals++
		}
	}
	if originals > 1 {
		twice = true
		assert.Fail(t, "the operation ran more than once", "key %s: %d original 201s", k.name, originals)
	}

	first := stored(k.before)
	if first != nil { // every stored answer before the kill is that one
		for _, a := range k.before {
			if stored([]*response{a}) != nil {
				assert.NoError(t, sameAnswer(first, a), "key %s: two answers before the kill", k.name)
			}
		}
	}
	if !assert.NotNil(t, k.final, "key %s: no final answer after the restart", k.name) {
		return twice, first != nil
	}
	wantStatus := http.StatusCreated
	if !k.valid {
		wantStatus = http.StatusBadRequest
	}
	assert.Equal(t, wantStatus, k.final.Status, "key %s: final answer %s", k.name, k.final)
	if first != nil {
		err := sameAnswer(first, k.final)
		if err == nil && k.final.Header.Get("Idempotent-Replayed") != "true" {
			err = errors.New("no Idempotent-Replayed: true")
		}
		if err != nil {
			lost = true
			assert.Fail(t, "an answer from before the kill was not replayed", "key %s: %v\nbefore: %s\nafter:  %s",
				k.name, err, first, k.final)
		}
	}
	if first != nil && first.Status == http.StatusCreated && len(rows) == 0 {
		lost = true
	}
	if k.final.Status == http.StatusCreated && len(rows) == 1 {
		assert.Equal(t, k.path+"/"+rows[0].ID, k.final.Header.Get("Location"), "key %s: Location of its row", k.name)
		assert.NoError(t, sameFields(rows[0].raw, k.final.Body), "key %s: its row as listed, against its 201", k.name)
	}
	return twice, lost
}

// stored is the first answer among as that the server stores for its key (a 201 or a
// deterministic 400), or nil.
func stored(as []*response) *response {
	for _, a := range as {
		if a.Status == http.StatusCreated || a.Status == http.StatusBadRequest {
			return a
		}
	}
	return nil
}

// sameAnswer reports how again differs from first in status, Location, Content-Type or
// body, byte for byte.
func sameAnswer(first, again *response) error {
	switch {
	case again.Status != first.Status:
		return fmt.Errorf("status %d, first %d", again.Status, first.Status)
	case !bytes.Equal(again.Body, first.Body):
		return fmt.Errorf("body %q, first %q", again.Body, first.Body)
	}
	for _, h := range []string{"Location", "Content-Type"} {
		if got, want := again.Header.Values(h), first.Header.Values(h); !equal(got, want) {
			return fmt.Errorf("%s %q, first %q", h, got, want)
		}
	}
	return nil
}

// sameFields reports how the JSON object got differs from want, field by field, byte
// for byte.
func sameFields(got, want []byte) error {
	var g, w map[string]json.RawMessage
	if err := json.Unmarshal(got, &g); err != nil {
		return err
	}
	if err := json.Unmarshal(want, &w); err != nil {
		return err
	}
	if len(g) != len(w) {
		return fmt.Errorf("fields differ:\ngot  %s\nwant %s", got, want)
	}
	for name, v := range w {
		if !bytes.Equal(g[name], v) {
			return fmt.Errorf("field %q: %s, want %s", name, g[name], v)
		}
	}
	return nil
}

// killRow is an order, a payment or a provider charge as GET lists it.
type killRow struct {
	ID             string `json:"id"`
	Item           string `json:"item"`
	ChargeID       string `json:"charge_id"`
	IdempotencyKey string `json:"idempotency_key"`
	raw            []byte
}

func decodeRow(t *testing.T, raw json.RawMessage) killRow {
	t.Helper()
	var r killRow
	require.NoError(t, json.Unmarshal(raw, &r), "%s", raw)
	r.raw = raw
	return r
}

func randomSeed() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}
