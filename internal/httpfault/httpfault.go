// Package httpfault is a loopback HTTP/1.1 proxy for tests that makes the network
// between an HTTP client and a server fail on command, request by request: it resets the
// client's connection before forwarding a request, or forwards the request and resets the
// connection once the server's whole answer has arrived (the server did the work, the
// client never learns it), or delays the request before forwarding it.
//
// internal/reliability's Proxy does the same for database connections, following their
// wire protocols; this one follows HTTP requests, so a test can pick a request's fate by
// its idempotency key and by how many times the proxy has seen that key.
package httpfault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Fault is what the proxy does with one request.
type Fault int

const (
	// Forward passes the request to the server and its answer back.
	Forward Fault = iota
	// ResetBefore resets the client's connection (TCP RST) without forwarding: the
	// server never sees the request.
	ResetBefore
	// DropAnswer forwards the request, reads the server's whole answer, then resets the
	// client's connection instead of answering: the server did the work, the client got
	// no byte of the answer.
	DropAnswer
	// Delay waits the proxy's delay, then forwards as Forward does.
	Delay
	nFaults
)

func (f Fault) String() string {
	switch f {
	case Forward:
		return "forward"
	case ResetBefore:
		return "reset-before"
	case DropAnswer:
		return "drop-answer"
	case Delay:
		return "delay"
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// Decide picks the fate of request r, whose header Idempotency-Key the proxy has seen
// seen times before (0 for the first; requests without the header count under the empty
// key). It is called concurrently.
type Decide func(r *http.Request, seen int) Fault

// Proxy is a running fault proxy. Create it with Start, close it with Close.
type Proxy struct {
	srv    *http.Server
	ln     net.Listener
	rp     *httputil.ReverseProxy
	up     *http.Transport
	decide Decide
	delay  time.Duration
	served sync.WaitGroup

	mu   sync.Mutex
	seen map[string]int

	counts [nFaults]atomic.Int64
}

// Start listens on a free loopback port and proxies every request to the HTTP server at
// target (http://host:port), applying decide's fault to each; Delay waits delay.
func Start(target string, delay time.Duration, decide Decide) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("httpfault: target: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("httpfault: listen: %w", err)
	}
	p := &Proxy{ln: ln, decide: decide, delay: delay, seen: map[string]int{},
		up: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}
	p.rp = &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(u); r.Out.Host = r.In.Host },
		Transport: p.up,
		ModifyResponse: func(resp *http.Response) error {
			if resp.Request.Context().Value(dropKey{}) == nil {
				return nil
			}
			// Read the whole answer, so the server has sent it all, then refuse to pass it.
			_, err := io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if err != nil {
				return fmt.Errorf("httpfault: reading the answer to drop: %w", err)
			}
			return errDropped
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if err == errDropped {
				reset(w)
				return
			}
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	p.served.Add(1)
	go func() {
		defer p.served.Done()
		_ = p.srv.Serve(ln)
	}()
	return p, nil
}

type dropKey struct{}

var errDropped = errors.New("httpfault: answer dropped")

// URL is the proxy's base URL, http://127.0.0.1:port.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// Count reports how many requests got fault f.
func (p *Proxy) Count(f Fault) int64 { return p.counts[f].Load() }

// Seen reports how many requests with Idempotency-Key key the proxy has received.
func (p *Proxy) Seen(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[key]
}

// Close stops the proxy: it closes the listener and every connection, and waits for its
// serving goroutine to end.
func (p *Proxy) Close() error {
	err := p.srv.Close()
	p.served.Wait()
	p.up.CloseIdleConnections()
	return err
}

// ServeHTTP applies the fault decide picks for r.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	p.mu.Lock()
	seen := p.seen[key]
	p.seen[key]++
	p.mu.Unlock()

	f := p.decide(r, seen)
	if f < 0 || f >= nFaults {
		panic(fmt.Sprintf("httpfault: Decide returned %v", f))
	}
	p.counts[f].Add(1)
	switch f {
	case ResetBefore:
		reset(w)
		return
	case Delay:
		timer := time.NewTimer(p.delay)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-r.Context().Done():
			return
		}
	case DropAnswer:
		r = r.WithContext(context.WithValue(r.Context(), dropKey{}, true))
	}
	p.rp.ServeHTTP(w, r)
}

// reset closes the client's connection with a TCP RST, answering nothing.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(fmt.Sprintf("httpfault: hijack: %v", err)) // an HTTP/1.1 server's writer can always
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // close sends RST, not FIN
	}
	_ = conn.Close()
}
