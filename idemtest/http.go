package idemtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"unicode/utf8"
)

// maxResponse is the most of a response body the kit reads.
const maxResponse = 4 << 20

// response is what one request got back.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// replayed reports whether the response says it is a replay.
func (r *response) replayed() bool { return r.Header.Get("Idempotent-Replayed") == "true" }

// String is the response as a failure message shows it: status, the headers that
// matter here, and the start of the body.
func (r *response) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d", r.Status)
	for _, name := range []string{"Content-Type", "Location", "Idempotent-Replayed", "Retry-After"} {
		if vs := r.Header.Values(name); len(vs) > 0 {
			fmt.Fprintf(&b, ", %s: %s", name, strings.Join(vs, ", "))
		}
	}
	fmt.Fprintf(&b, ", body %s", excerpt(r.Body))
	return b.String()
}

// excerpt quotes the start of a body.
func excerpt(body []byte) string {
	const max = 200
	if len(body) == 0 {
		return "(empty)"
	}
	b := bytes.TrimRight(body, "\n")
	if len(b) <= max {
		return fmt.Sprintf("%q", b)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return fmt.Sprintf("%q… (%d bytes)", b[:cut], len(body))
}

// sender sends the run's requests, alternating between the base URLs.
type sender struct {
	t     Target
	bases []string
	c     *http.Client
	next  atomic.Int64
	sent  atomic.Int64
}

// request is one request to send: the key fields (none, one, or several) and the body.
type request struct {
	method, path string
	keys         []string
	body         []byte
	prepare      func(*http.Request) // InjectFailure, or nil
}

// do sends r to the next base URL and reads the answer.
func (s *sender) do(ctx context.Context, r request) (*response, error) {
	base := s.bases[int(s.next.Add(1)-1)%len(s.bases)]
	ctx, cancel := context.WithTimeout(ctx, s.t.RequestTimeout)
	defer cancel()
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, strings.TrimSuffix(base, "/")+r.path, body)
	if err != nil {
		return nil, fmt.Errorf("idemtest: %s %s: %w", r.method, r.path, err)
	}
	for name, vs := range s.t.Header {
		req.Header[name] = append([]string(nil), vs...)
	}
	if r.body == nil {
		req.Header.Del("Content-Type")
	}
	for _, k := range r.keys {
		req.Header.Add(s.t.KeyHeader, k)
	}
	if r.prepare != nil {
		r.prepare(req)
	}
	s.sent.Add(1)
	resp, err := s.c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("idemtest: %s %s%s: %w", r.method, base, r.path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return nil, fmt.Errorf("idemtest: %s %s%s: reading the response: %w", r.method, base, r.path, err)
	}
	return &response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// newClient is the default client: enough idle connections per host that the parallel
// requests really are parallel.
func newClient(t Target) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = t.Parallel + 2
	return &http.Client{Transport: tr, Timeout: t.RequestTimeout}
}

// statusCount summarises answers ("19×200 replayed, 1×201").
func statusCount(rs []*response) string {
	counts := map[string]int{}
	for _, r := range rs {
		k := fmt.Sprint(r.Status)
		if r.replayed() {
			k += " replayed"
		}
		counts[k]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d×%s", counts[k], k)
	}
	return strings.Join(parts, ", ")
}
