package reliability_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
)

// TestScopeIsolation: one key in two scopes names two operations. A scope never gets
// another scope's response, never a 422 for another scope's body, never waits for another
// scope's request in flight; scope and key are kept apart even where joining them with a
// separator would make them equal.
func TestScopeIsolation(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceConfig{direct: true, poolSize: 6})

	a := in.post("tenant-a", "shared-key", "", jsonBody(100))
	if a.status != http.StatusCreated {
		t.Fatalf("tenant-a: %v", a)
	}
	b := in.post("tenant-b", "shared-key", "", jsonBody(100))
	if b.status != http.StatusCreated || b.replayed() || sameBody(a, b) || b.order(t).Scope != "tenant-b" {
		t.Fatalf("tenant-b got %v; tenant-a got %v: want an order of its own", b, a)
	}
	// Another body under the same key in a third scope runs: no 422 that would reveal
	// tenant-a's request.
	if c := in.post("tenant-c", "shared-key", "", jsonBody(999)); c.status != http.StatusCreated || c.replayed() {
		t.Fatalf("tenant-c with another body: %v", c)
	}
	// Each scope replays its own.
	if r := in.post("tenant-b", "shared-key", "", jsonBody(100)); !r.replayed() || !sameBody(r, b) {
		t.Fatalf("tenant-b's retry: %v, want its own replay %v", r, b)
	}
	if r := in.post("tenant-a", "shared-key", "", jsonBody(100)); !r.replayed() || !sameBody(r, a) {
		t.Fatalf("tenant-a's retry: %v, want its own replay %v", r, a)
	}

	// A request in flight in one scope holds nobody else's key.
	g := newGate("in-flight")
	first := holder(t, in, g, "tenant-a", jsonBody(1))
	if r := in.post("tenant-b", g.key, "", jsonBody(1)); r.status != http.StatusCreated || r.replayed() {
		t.Fatalf("tenant-b while tenant-a holds the same key: %v", r)
	}
	close(g.open)
	if r := <-first; r.status != http.StatusCreated {
		t.Fatalf("tenant-a: %v", r)
	}

	// Pairs that a "scope:key" or "scope|key" join would confuse.
	in.setHooks(hooks{})
	pairs := [][2]string{{"a", "b:c"}, {"a:b", "c"}, {"a", "b|c"}, {"a|b", "c"}, {"a:", "x"}, {"x", "x"}}
	seen := map[string]string{}
	for _, p := range pairs {
		r := in.post(p[0], p[1], "", jsonBody(7))
		if r.status != http.StatusCreated || r.replayed() {
			t.Fatalf("scope %q key %q: %v, want an order of its own", p[0], p[1], r)
		}
		if prev, ok := seen[string(r.body)]; ok {
			t.Fatalf("scope %q key %q got the response of %s", p[0], p[1], prev)
		}
		seen[string(r.body)] = fmt.Sprintf("%q/%q", p[0], p[1])
	}
	if n := d.count(`SELECT count(*) FROM orders`); n != 5+len(pairs) {
		t.Fatalf("%d orders, want %d", n, 5+len(pairs))
	}
}

// credentials are the headers that must never be stored or replayed.
var credentials = []string{"Set-Cookie", "Authorization", "WWW-Authenticate", "Proxy-Authenticate"}

// TestCredentialHeadersNeverStored: the first client gets every header its handler set,
// credentials included; the key table keeps only allow-listed headers (no credential, no
// secret anywhere in the row), and the replay carries none of them. A configuration that
// lists a credential header is refused.
func TestCredentialHeadersNeverStored(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceConfig{direct: true})
	first := in.post("acct", "secret-1", "secrets=1", jsonBody(1))
	if first.status != http.StatusCreated {
		t.Fatalf("first: %v", first)
	}
	for _, h := range credentials {
		if first.header.Get(h) == "" {
			t.Fatalf("the first response lacks %s, which its handler set", h)
		}
	}

	row, ok := d.key("acct", "secret-1")
	if !ok || row.state != "completed" {
		t.Fatalf("key row: %+v, %v", row, ok)
	}
	stored, err := storage.DecodeHeader(row.headers)
	if err != nil {
		t.Fatalf("stored headers %q: %v", row.headers, err)
	}
	allowed := map[string]bool{}
	for _, h := range core.DefaultReplayHeaders() {
		allowed[http.CanonicalHeaderKey(h)] = true
	}
	for k := range stored {
		if !allowed[k] {
			t.Errorf("stored header %s is not in the allow-list", k)
		}
	}
	if bytes.Contains(bytes.ToLower(row.headers), []byte("s3cr3t")) || bytes.Contains(row.body, []byte("s3cr3t")) {
		t.Errorf("a credential reached the key table: headers %q", row.headers)
	}
	for _, h := range credentials {
		if bytes.Contains(bytes.ToLower(row.headers), []byte(strings.ToLower(h)+":")) {
			t.Errorf("%s stored: %q", h, row.headers)
		}
	}
	if stored.Get("Location") == "" || stored.Get("Content-Type") == "" {
		t.Errorf("stored headers %q lack Location or Content-Type", row.headers)
	}

	replay := in.post("acct", "secret-1", "secrets=1", jsonBody(1))
	if replay.status != http.StatusCreated || !replay.replayed() || !sameBody(replay, first) {
		t.Fatalf("replay: %v", replay)
	}
	for _, h := range credentials {
		if v := replay.header.Get(h); v != "" {
			t.Errorf("the replay carries %s: %q", h, v)
		}
	}
	if replay.header.Get("Location") != first.header.Get("Location") {
		t.Errorf("replayed Location %q, want %q", replay.header.Get("Location"), first.header.Get("Location"))
	}
	if in.calls.Load() != 1 {
		t.Fatalf("handler ran %d times", in.calls.Load())
	}

	// Every spelling: "WWW-Authenticate" is not its own canonical form ("Www-Authenticate"),
	// which once let it through.
	for _, h := range append(credentials, "set-cookie", "AUTHORIZATION", "www-authenticate", "Www-Authenticate") {
		_, err := core.New(core.Config{Store: in.store,
			ReplayHeaders: []string{"Location", h}})
		if !errors.Is(err, core.ErrInvalidConfig) {
			t.Errorf("ReplayHeaders with %s: %v, want ErrInvalidConfig", h, err)
		}
	}
}

// TestOversizeRequestBody: a body over MaxRequestBody is 413 before the handler, declared
// (Content-Length) or not (chunked), and leaves no key; a body of exactly the limit runs.
func TestOversizeRequestBody(t *testing.T) {
	t.Parallel()
	const limit = 1024
	d := newDB(t)
	in := newInstance(t, d, instanceConfig{direct: true, cfg: core.Config{MaxRequestBody: limit}})
	body := func(n int) string {
		s := `{"amount":1,"x":"`
		return s + strings.Repeat("x", n-len(s)-2) + `"}`
	}

	if r := in.post("acct", "big-declared", "", body(limit+1)); r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("declared oversize body: %v", r)
	} else {
		mustProblem(t, r, http.StatusRequestEntityTooLarge, core.ProblemBodyTooLarge, false)
	}
	// Chunked: the length is unknown until the body is read.
	req, err := http.NewRequest(http.MethodPost, in.srv.URL+"/orders", io.MultiReader(strings.NewReader(body(64*limit))))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Account", "acct")
	req.Header.Set("Idempotency-Key", "big-chunked")
	if r := in.do(req); r.status != http.StatusRequestEntityTooLarge || req.ContentLength != -1 && req.ContentLength != 0 {
		t.Fatalf("chunked oversize body (ContentLength %d): %v", req.ContentLength, r)
	}
	if in.calls.Load() != 0 {
		t.Fatalf("the handler ran for an oversize body")
	}
	if n := d.count(`SELECT count(*) FROM idempotency_keys`); n != 0 {
		t.Fatalf("%d keys stored for oversize bodies", n)
	}
	if r := in.post("acct", "at-limit", "", body(limit)); r.status != http.StatusCreated {
		t.Fatalf("body of exactly the limit: %v", r)
	}
}

// TestOversizeResponse: a storable response over MaxResponseBody reaches the first client
// whole; the key keeps its status and headers without the body; a retry gets the 410
// response-too-large problem with the stored Location, and the handler never runs again.
func TestOversizeResponse(t *testing.T) {
	t.Parallel()
	const limit = 1024
	d := newDB(t)
	in := newInstance(t, d, instanceConfig{direct: true, cfg: core.Config{MaxResponseBody: limit}})
	first := in.post("acct", "big-answer", "pad=4096", jsonBody(1))
	if first.status != http.StatusCreated || len(first.body) <= 4096 || first.order(t).Pad == "" {
		t.Fatalf("first: %d, %d bytes", first.status, len(first.body))
	}
	row, ok := d.key("acct", "big-answer")
	if !ok || row.state != "completed" || row.code == nil || *row.code != http.StatusCreated || len(row.body) != 0 {
		t.Fatalf("key row: state %q code %v body %d bytes, want completed 201 without a body", row.state, row.code, len(row.body))
	}
	for range 2 {
		r := in.post("acct", "big-answer", "pad=4096", jsonBody(1))
		mustProblem(t, r, http.StatusGone, core.ProblemResponseTooLarge, false)
		if r.header.Get("Location") != first.header.Get("Location") {
			t.Fatalf("410 Location %q, want the stored %q", r.header.Get("Location"), first.header.Get("Location"))
		}
		for k := range r.header {
			if strings.HasPrefix(k, "Idempotent-Body") {
				t.Fatalf("internal header %s sent to the client", k)
			}
		}
	}
	if n := d.orders("acct", "big-answer"); n != 1 || in.calls.Load() != 1 {
		t.Fatalf("%d orders, %d handler runs; want 1 and 1", n, in.calls.Load())
	}
}

// badKeys are Idempotency-Key values that must be 400: control characters, DEL,
// non-ASCII (raw or inside an sf-string), line breaks, over-long, empty, ambiguous.
var badKeys = []string{
	"\x00", "a\x01b", "tab\tinside", "del\x7f", "caf\u00e9", "ключ", "emoji-\U0001F600",
	"a\nb", "a\rb", `"caf` + "\u00e9" + `"`, `"a\u00e9"`, `"\x"`, `"open`, `""`, " ", "",
	"a b", "a,b", strings.Repeat("k", 256), "\xff\xfe", "%00",
}

// TestInvalidKeys400: every bad key is 400 before the handler, and nothing is stored;
// both straight into the engine (values net/http would not let through) and over the
// wire, where a raw request carries bytes Go's client refuses to send.
func TestInvalidKeys400(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	in := newInstance(t, d, instanceConfig{direct: true})
	h := in.eng.Middleware(func(r *http.Request) string { return r.Header.Get("X-Account") })(http.HandlerFunc(in.orders))
	for _, k := range badKeys {
		if k == "%00" {
			continue // a valid key, sent raw below to check no decoding happens
		}
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(jsonBody(1)))
		req.Header["Idempotency-Key"] = []string{k}
		req.Header.Set("X-Account", "acct")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		r := reply{status: w.Code, header: w.Header(), body: w.Body.Bytes()}
		mustProblem(t, r, http.StatusBadRequest, core.ProblemKeyInvalid, false)
	}
	// Two fields are ambiguous.
	req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(jsonBody(1)))
	req.Header["Idempotency-Key"] = []string{"one", "two"}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusBadRequest {
		t.Fatalf("two Idempotency-Key fields: %d", w.Code)
	}

	// Over the wire, byte for byte.
	for _, k := range badKeys {
		status, err := rawPost(in.srv.Listener.Addr().String(), k)
		if err != nil {
			t.Fatalf("raw request with key %q: %v", k, err)
		}
		want := http.StatusBadRequest
		if k == "%00" {
			want = http.StatusCreated // printable ASCII: taken as is, never URL-decoded
		}
		if status != want {
			t.Errorf("key %q over the wire: %d, want %d", k, status, want)
		}
	}
	if n := in.calls.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want once (for %%00)", n)
	}
	if n := d.count(`SELECT count(*) FROM idempotency_keys WHERE idem_key <> '%00'`); n != 0 {
		t.Fatalf("%d bad keys stored", n)
	}
}

// rawPost sends POST /orders with the key's bytes as they are and returns the status.
func rawPost(addr, key string) (int, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	body := jsonBody(1)
	fmt.Fprintf(c, "POST /orders HTTP/1.1\r\nHost: x\r\nX-Account: acct\r\nIdempotency-Key: %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", key, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// TestKeyFloodFromOneScope: one scope sends IDEM_FLOOD_KEYS (default 10,000) distinct
// keys as fast as it can; another scope's requests, sent meanwhile, all succeed, and the
// process's heap does not grow with the keys (they live in the database). Not parallel:
// the heap is the process's, so the package's other tests must not run meanwhile.
func TestKeyFloodFromOneScope(t *testing.T) {
	keys := envInt(t, "IDEM_FLOOD_KEYS", 10000)
	const workers = 8
	d := newDB(t)
	in := newInstance(t, d, instanceConfig{direct: true, poolSize: workers + 2})

	// Warm up before measuring, with as many requests at once as the flood sends: every
	// connection of the pool (a pgx connection keeps ~200 KB of buffers) and every
	// per-goroutine buffer exists before heapBefore, so the growth is the keys' alone.
	// Sequential warm-up opened one connection, and the flood's other seven made up
	// almost all of the 2 MB growth the limit allows.
	var warm sync.WaitGroup
	for w := range workers {
		warm.Go(func() {
			for i := range 20 {
				if r := in.post("warmup", fmt.Sprint(w, "-", i), "", jsonBody(i)); r.status != http.StatusCreated {
					t.Errorf("warm-up: %v", r)
				}
			}
		})
	}
	warm.Wait()
	heapBefore := heapAfterGC()

	start := time.Now()
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(keys) {
					return
				}
				if r := in.post("flood", fmt.Sprintf("flood-%06d", i), "", jsonBody(int(i))); r.status != http.StatusCreated {
					failed.Add(1)
				}
			}
		}()
	}
	// The victim scope keeps working during the flood.
	victim := 0
	for next.Load() < int64(keys) {
		r := in.post("victim", fmt.Sprintf("victim-%d", victim), "", jsonBody(victim))
		if r.status != http.StatusCreated || r.replayed() {
			t.Errorf("victim request %d during the flood: %v", victim, r)
		}
		victim++
		time.Sleep(20 * time.Millisecond) // the victim's pace during the flood, not a synchronisation
	}
	wg.Wait()
	elapsed := time.Since(start)
	heapAfter := heapAfterGC()

	if failed.Load() != 0 {
		t.Errorf("%d flood requests failed", failed.Load())
	}
	if victim == 0 {
		t.Fatal("no victim request ran during the flood")
	}
	if n := d.count(`SELECT count(*) FROM idempotency_keys WHERE scope = 'flood' AND state = 'completed'`); n != keys {
		t.Fatalf("%d flood keys in the table, want %d", n, keys)
	}
	if n := d.count(`SELECT count(*) FROM orders WHERE scope = 'victim'`); n != victim {
		t.Fatalf("%d victim orders, want %d", n, victim)
	}
	// A process keeping every key and response would hold well over 100 bytes a key.
	growth := int64(heapAfter) - int64(heapBefore)
	t.Logf("%d flood keys in %v (%.0f req/s) with %d victim requests; heap %d → %d bytes (%+d, %.1f bytes/key)",
		keys, elapsed.Round(time.Millisecond), float64(keys)/elapsed.Seconds(), victim, heapBefore, heapAfter,
		growth, float64(growth)/float64(keys))
	if limit := int64(100 * keys); growth > max(limit, 2<<20) {
		t.Fatalf("heap grew by %d bytes over %d keys: keys are kept in memory", growth, keys)
	}
}

func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
