package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Retry-After handling: a missing or unreadable value counts as the contract's default,
// and a longer one is cut, so the run stays bounded.
const (
	defaultRetryAfter = time.Second
	maxRetryAfter     = 10 * time.Second
)

// loader sends one run's requests and keeps what each key got.
type loader struct {
	cfg    config
	run    string // run id: prefix of every key of this run
	post   string // URL of the POST route
	path   string // path of the route, as Location names it: /v1/orders
	client *http.Client
	keys   []keyState
}

// keyState is what the responses said about one key.
type keyState struct {
	mu         sync.Mutex
	sent       bool
	acked      bool   // a 201 arrived (original or replayed)
	location   string // Location of the first 201
	originals  int    // 201s without Idempotent-Replayed: runs of the operation
	mismatches int    // 201s whose Location differed from the first
}

func newLoader(cfg config, distinct int) *loader {
	path := "/v1/" + cfg.route
	return &loader{
		cfg:    cfg,
		run:    "lg-" + randomHex(8),
		post:   cfg.url + path,
		path:   path,
		client: newClient(cfg),
		keys:   make([]keyState, distinct),
	}
}

// newClient is an HTTP client that only connects to loopback addresses, keeps a
// connection per worker and follows no redirect.
func newClient(cfg config) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, Control: loopbackOnly}
	return &http.Client{
		Timeout: cfg.timeout,
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         d.DialContext,
			MaxIdleConns:        cfg.workers + 4,
			MaxIdleConnsPerHost: cfg.workers + 4,
			IdleConnTimeout:     30 * time.Second,
			DisableCompression:  true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// loopbackOnly is a dialer's Control: it refuses any address that is not loopback,
// whatever the host name resolved to.
func loopbackOnly(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsLoopback() {
		return fmt.Errorf("loadgen: refusing to connect to %s: not a loopback address", address)
	}
	return nil
}

// key is the Idempotency-Key of key number n.
func (l *loader) key(n int) string { return l.run + "-" + strconv.Itoa(n) }

// body is the JSON body sent with key number n: always the same for a key, so a
// duplicate is a true retry. An order's item names its key, so the orders listed at the
// end can be matched to keys.
func (l *loader) body(n int) []byte {
	if l.cfg.route == routePayments {
		return fmt.Appendf(nil, `{"amount_cents":%d,"currency":"EUR"}`, 100+(n*37)%9900)
	}
	return fmt.Appendf(nil, `{"item":"item %s","quantity":%d}`, l.key(n), 1+n%9)
}

// job is one request of the plan, possibly a retry.
type job struct {
	key     int
	attempt int // 0 for the plan's request, then 1, 2… for its retries after 409
}

// result is what the load phase measured.
type result struct {
	planned   int           // requests in the plan
	scheduled int           // requests of the plan that were sent
	elapsed   time.Duration // from the first request to the last response
	tally
	sent, acked int // distinct keys sent, and acknowledged by a 201
}

// tally counts one worker's responses; tallies add up into the result.
type tally struct {
	all, first, replay []time.Duration // latencies: every response, 201 original, 201 replayed
	created, replayed  int             // 201 without and with Idempotent-Replayed
	conflicts          int             // 409
	retries            int             // requests sent again after a 409
	gaveUp             int             // 409 after the last retry
	abandoned          int             // retries dropped at the end of -duration or on interrupt
	other              map[string]int  // any other status, or "transport error"
	firstErr           error           // the first transport error
}

func (t *tally) add(o tally) {
	t.all = append(t.all, o.all...)
	t.first = append(t.first, o.first...)
	t.replay = append(t.replay, o.replay...)
	t.created += o.created
	t.replayed += o.replayed
	t.conflicts += o.conflicts
	t.retries += o.retries
	t.gaveUp += o.gaveUp
	t.abandoned += o.abandoned
	for k, v := range o.other {
		t.other[k] += v
	}
	if t.firstErr == nil {
		t.firstErr = o.firstErr
	}
}

// load sends the plan with cfg.workers workers until it is done, -duration has passed or
// ctx is cancelled (requests in flight then finish; pending retries are dropped).
func (l *loader) load(ctx context.Context, p plan) result {
	stopCtx, cancel := context.WithTimeout(ctx, l.cfg.duration)
	defer cancel()
	stop := stopCtx.Done()

	jobs := make(chan job)
	retries := make(chan job, len(p.keys)) // a request has at most one pending retry
	var outstanding sync.WaitGroup         // requests of the plan not answered for good
	var abandoned atomic.Int64

	tallies := make([]tally, l.cfg.workers)
	var workers sync.WaitGroup
	began := time.Now()
	for w := range tallies {
		t := &tallies[w]
		t.other = map[string]int{}
		workers.Go(func() {
			for {
				var j job
				select {
				case j = <-retries: // retries first: they have waited already
				default:
					select {
					case j = <-retries:
					case next, ok := <-jobs:
						if !ok {
							return
						}
						j = next
					}
				}
				retryAfter, again := l.send(j, t)
				if !again {
					outstanding.Done()
					continue
				}
				if stopCtx.Err() != nil || j.attempt >= l.cfg.retries {
					if stopCtx.Err() != nil {
						t.abandoned++
					} else {
						t.gaveUp++
					}
					outstanding.Done()
					continue
				}
				t.retries++
				j.attempt++
				go func() {
					timer := time.NewTimer(retryAfter)
					defer timer.Stop()
					select {
					case <-timer.C:
						retries <- j
					case <-stop:
						abandoned.Add(1)
						outstanding.Done()
					}
				}()
			}
		})
	}

	scheduled := 0
dispatch:
	for _, k := range p.keys {
		outstanding.Add(1)
		select {
		case jobs <- job{key: int(k)}:
			scheduled++
		case <-stop:
			outstanding.Done()
			break dispatch
		}
	}
	outstanding.Wait()
	close(jobs)
	workers.Wait()
	elapsed := time.Since(began)

	r := result{planned: len(p.keys), scheduled: scheduled, elapsed: elapsed, tally: tally{other: map[string]int{}}}
	for _, t := range tallies {
		r.add(t)
	}
	r.abandoned += int(abandoned.Load())
	for i := range l.keys {
		if l.keys[i].sent {
			r.sent++
		}
		if l.keys[i].acked {
			r.acked++
		}
	}
	return r
}

// send posts key j.key once and records the answer in t and in the key's state. It
// returns again for a 409, with the wait the server asked for.
func (l *loader) send(j job, t *tally) (retryAfter time.Duration, again bool) {
	ks := &l.keys[j.key]
	ks.mu.Lock()
	ks.sent = true
	ks.mu.Unlock()

	began := time.Now()
	resp, err := l.do(j.key)
	took := time.Since(began)
	if err != nil {
		t.other["transport error"]++
		if t.firstErr == nil {
			t.firstErr = err
		}
		return 0, false
	}
	t.all = append(t.all, took)
	switch resp.status {
	case http.StatusCreated:
		ks.mu.Lock()
		if !ks.acked {
			ks.acked, ks.location = true, resp.location
		} else if resp.location != ks.location {
			ks.mismatches++
		}
		if !resp.replayed {
			ks.originals++
		}
		ks.mu.Unlock()
		if resp.replayed {
			t.replayed++
			t.replay = append(t.replay, took)
		} else {
			t.created++
			t.first = append(t.first, took)
		}
	case http.StatusConflict:
		t.conflicts++
		return parseRetryAfter(resp.retryAfter), true
	default:
		t.other[strconv.Itoa(resp.status)]++
	}
	return 0, false
}

// response is what send needs of an HTTP response.
type response struct {
	status     int
	replayed   bool
	location   string
	retryAfter string
}

func (l *loader) do(n int) (response, error) {
	req, err := http.NewRequest(http.MethodPost, l.post, bytes.NewReader(l.body(n)))
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Account-ID", l.cfg.account)
	req.Header.Set("Idempotency-Key", l.key(n))
	resp, err := l.client.Do(req)
	if err != nil {
		return response{}, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	if cerr := resp.Body.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return response{}, fmt.Errorf("reading the response: %w", err)
	}
	return response{
		status:     resp.StatusCode,
		replayed:   resp.Header.Get("Idempotent-Replayed") == "true",
		location:   resp.Header.Get("Location"),
		retryAfter: resp.Header.Get("Retry-After"),
	}, nil
}

// parseRetryAfter reads Retry-After as whole seconds (an HTTP date is not expected from
// the example servers and counts as the default).
func parseRetryAfter(v string) time.Duration {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return defaultRetryAfter
	}
	return min(time.Duration(n)*time.Second, maxRetryAfter)
}
