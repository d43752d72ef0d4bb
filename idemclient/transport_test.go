package idemclient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/internal/httpfault"
)

const body = `{"item":"book","quantity":2}`

// TestEveryAttemptSendsOneKeyAndTheSameBody: a POST gets a fresh UUID before its first
// attempt, and every retry sends that key and the same body.
func TestEveryAttemptSendsOneKeyAndTheSameBody(t *testing.T) {
	t.Parallel()
	s := newScript(t, status(503), status(502), status(201))
	clk := newClock()
	resp, got, res, err := do(t, t.Context(), newTransport(t, clk, &idemclient.Transport{}), http.MethodPost, s.URL(), body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.Equal(t, "Created", got)

	seen := s.Seen()
	require.Len(t, seen, 3)
	_, err = uuid.Parse(res.Key)
	require.NoError(t, err, "the generated key is a UUID: %q", res.Key)
	for i, r := range seen {
		assert.Equal(t, res.Key, r.Key, "attempt %d", i+1)
		assert.Equal(t, body, r.Body, "attempt %d: the body replayed byte for byte", i+1)
	}
	assert.Equal(t, idemclient.Result{Key: res.Key, Attempts: 3}, res)
	assert.Len(t, clk.Waits(), 2)
	assert.Equal(t, res.Key, resp.Request.Header.Get(core.DefaultHeaderName), "the key is on the response's request")
}

// TestTwoRequestsGetTwoKeys: a key belongs to one logical request.
func TestTwoRequestsGetTwoKeys(t *testing.T) {
	t.Parallel()
	s := newScript(t, status(201))
	tr := newTransport(t, newClock(), &idemclient.Transport{})
	_, _, a, err := do(t, t.Context(), tr, http.MethodPost, s.URL(), body)
	require.NoError(t, err)
	_, _, b, err := do(t, t.Context(), tr, http.MethodPost, s.URL(), body)
	require.NoError(t, err)
	assert.NotEqual(t, a.Key, b.Key)
}

// TestSafeMethodsAreLeftAlone: a GET (or any method outside Methods) carries no key and
// gets one attempt, whatever it is answered.
func TestSafeMethodsAreLeftAlone(t *testing.T) {
	t.Parallel()
	for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete} {
		t.Run(method, func(t *testing.T) {
			t.Parallel()
			s := newScript(t, status(503), status(200))
			clk := newClock()
			resp, _, res, err := do(t, t.Context(), newTransport(t, clk, &idemclient.Transport{}), method, s.URL(), "")
			require.NoError(t, err)
			assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
			seen := s.Seen()
			require.Len(t, seen, 1)
			assert.False(t, seen[0].HasKey, "a %s carries no key", method)
			assert.Equal(t, idemclient.Result{Attempts: 1}, res)
			assert.Empty(t, clk.Waits())
		})
	}
}

// TestAnswersNeverRetried: 400, 422, every other 4xx (a 409 that is not "in progress"
// included), 500 and 501 come back at once, after one attempt, with their body whole.
func TestAnswersNeverRetried(t *testing.T) {
	t.Parallel()
	for name, a := range map[string]answer{
		"400":                    status(400),
		"401":                    status(401),
		"403":                    status(403),
		"404":                    status(404),
		"409 business conflict":  status(409),
		"410 response-too-large": problem(410, core.DefaultProblemBase+string(core.ProblemResponseTooLarge)),
		"409 not-in-progress":    problem(409, "https://api.example.com/problems/not-in-progress"),
		"409 text/plain":         status(409, "Content-Type", "text/plain"),
		"410":                    status(410),
		"413":                    status(413),
		"422":                    status(422),
		"422 key-reused":         problem(422, core.DefaultProblemBase+string(core.ProblemKeyReused)),
		"500":                    status(500),
		"501":                    status(501),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newScript(t, a, status(201))
			clk := newClock()
			var retries int
			tr := newTransport(t, clk, &idemclient.Transport{OnRetry: func(idemclient.RetryInfo) { retries++ }})
			rec := httptest.NewRecorder()
			a(rec)
			resp, got, res, err := do(t, t.Context(), tr, http.MethodPost, s.URL(), body)
			require.NoError(t, err)
			assert.Equal(t, rec.Code, resp.StatusCode)
			assert.Equal(t, rec.Body.String(), got, "the body comes back whole")
			assert.Len(t, s.Seen(), 1)
			assert.Equal(t, 1, res.Attempts)
			assert.Zero(t, retries)
			assert.Empty(t, clk.Waits())
		})
	}
}

// TestAnswersRetried: 408, 429, 502, 503, 504 and a 409 saying "in progress" (idem's
// problem under any problem base, or any 409 with Retry-After) are sent again.
func TestAnswersRetried(t *testing.T) {
	t.Parallel()
	for name, a := range map[string]answer{
		"408":                             status(408),
		"429":                             status(429),
		"502":                             status(502),
		"503":                             status(503),
		"504":                             status(504),
		"409 in-progress":                 problem(409, core.DefaultProblemBase+string(core.ProblemInProgress)),
		"409 in-progress, another base":   problem(409, "https://api.example.com/problems/in-progress"),
		"409 in-progress, with a charset": problem(409, "/in-progress", "Content-Type", "application/problem+json; charset=utf-8"),
		"409 with Retry-After":            status(409, "Retry-After", "2"),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newScript(t, a, status(201))
			var infos []idemclient.RetryInfo
			tr := newTransport(t, newClock(), &idemclient.Transport{OnRetry: func(i idemclient.RetryInfo) { infos = append(infos, i) }})
			resp, _, res, err := do(t, t.Context(), tr, http.MethodPost, s.URL(), body)
			require.NoError(t, err)
			assert.Equal(t, http.StatusCreated, resp.StatusCode)
			assert.Equal(t, 2, res.Attempts)
			require.Len(t, infos, 1)
			rec := httptest.NewRecorder()
			a(rec)
			assert.Equal(t, rec.Code, infos[0].Status)
			assert.Equal(t, 1, infos[0].Attempt)
			assert.Equal(t, res.Key, infos[0].Key)
		})
	}
}

// TestRetryAfterInSecondsIsWaited: the wait before the retry is the server's.
func TestRetryAfterInSecondsIsWaited(t *testing.T) {
	t.Parallel()
	s := newScript(t, status(503, "Retry-After", "7"), status(429, "Retry-After", "0"), status(201))
	clk := newClock()
	var infos []idemclient.RetryInfo
	tr := newTransport(t, clk, &idemclient.Transport{OnRetry: func(i idemclient.RetryInfo) { infos = append(infos, i) }})
	resp, _, res, err := do(t, t.Context(), tr, http.MethodPost, s.URL(), body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.Equal(t, 3, res.Attempts)
	assert.Equal(t, []time.Duration{7 * time.Second, 0}, clk.Waits())
	require.Len(t, infos, 2)
	assert.True(t, infos[0].RetryAfter)
	assert.Equal(t, 7*time.Second, infos[0].Wait)
}

// TestRetryAfterAsADateIsWaited: an HTTP-date is measured from the response's Date.
func TestRetryAfterAsADateIsWaited(t *testing.T) {
	t.Parallel()
	date := time.Now().Add(-time.Hour).UTC().Truncate(time.Second) // a server whose clock is an hour late
	s := newScript(t, status(503, "Date", date.Format(http.TimeFormat), "Retry-After", date.Add(12*time.Second).Format(http.TimeFormat)), status(201))
	clk := newClock()
	resp, _, _, err := do(t, t.Context(), newTransport(t, clk, &idemclient.Transport{}), http.MethodPost, s.URL(), body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.Equal(t, []time.Duration{12 * time.Second}, clk.Waits())
}

// TestRetryAfterPastMaxElapsedReturnsTheAnswer: a wait that would end after MaxElapsed
// is not started; the caller gets the server's answer, body and all.
func TestRetryAfterPastMaxElapsedReturnsTheAnswer(t *testing.T) {
	t.Parallel()
	s := newScript(t, problem(503, "https://api.example.com/problems/store-unavailable", "Retry-After", "120"), status(201))
	clk := newClock()
	resp, got, res, err := do(t, t.Context(), newTransport(t, clk, &idemclient.Transport{}), http.MethodPost, s.URL(), body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Contains(t, got, "store-unavailable")
	assert.Equal(t, 1, res.Attempts)
	assert.Empty(t, clk.Waits())
}

// TestRetryAfterPastTheDeadlineReturnsTheAnswer: nor is a wait that the context's
// deadline would cut.
func TestRetryAfterPastTheDeadlineReturnsTheAnswer(t *testing.T) {
	t.Parallel()
	s := newScript(t, status(503, "Retry-After", "7200"), status(201))
	clk := newClock()
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	tr := newTransport(t, clk, &idemclient.Transport{MaxElapsed: 24 * time.Hour})
	resp, _, res, err := do(t, ctx, tr, http.MethodPost, s.URL(), body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, 1, res.Attempts)
	assert.Empty(t, clk.Waits())
}

// TestBackoffIsExponentialWithJitter: without Retry-After, the n-th wait is drawn from
// the upper half of InitialBackoff·2^(n-1), capped at MaxBackoff; after MaxAttempts the
// last answer comes back.
func TestBackoffIsExponentialWithJitter(t *testing.T) {
	t.Parallel()
	s := newScript(t, status(503))
	clk := newClock()
	tr := newTransport(t, clk, &idemclient.Transport{MaxAttempts: 7, InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second})
	resp, got, res, err := do(t, t.Context(), tr, http.MethodPost, s.URL(), body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "Service Unavailable", got)
	assert.Equal(t, 7, res.Attempts)
	assert.Len(t, s.Seen(), 7)
	waits := clk.Waits()
	require.Len(t, waits, 6)
	for i, bound := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		bound *= time.Millisecond
		assert.GreaterOrEqual(t, waits[i], bound/2, "wait %d", i+1)
		assert.LessOrEqual(t, waits[i], bound, "wait %d", i+1)
	}
}

// TestDefaultLimits: by default five attempts, waits of at most 0.5, 1, 2 and 4 s.
func TestDefaultLimits(t *testing.T) {
	t.Parallel()
	s := newScript(t, status(502))
	clk := newClock()
	_, _, res, err := do(t, t.Context(), newTransport(t, clk, &idemclient.Transport{}), http.MethodPost, s.URL(), body)
	require.NoError(t, err)
	assert.Equal(t, 5, res.Attempts)
	waits := clk.Waits()
	require.Len(t, waits, 4)
	for i, bound := range []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second} {
		assert.GreaterOrEqual(t, waits[i], bound/2, "wait %d", i+1)
		assert.LessOrEqual(t, waits[i], bound, "wait %d", i+1)
	}
}

// TestMaxElapsedStopsTheRetries: no retry starts later than MaxElapsed after the first
// attempt.
func TestMaxElapsedStopsTheRetries(t *testing.T) {
	t.Parallel()
	s := newScript(t, status(503, "Retry-After", "10"))
	clk := newClock()
	tr := newTransport(t, clk, &idemclient.Transport{MaxAttempts: 100, MaxElapsed: 25 * time.Second})
	resp, _, res, err := do(t, t.Context(), tr, http.MethodPost, s.URL(), body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, 3, res.Attempts, "attempts at 0s, 10s and 20s; the next would start at 30s")
	assert.Equal(t, []time.Duration{10 * time.Second, 10 * time.Second}, clk.Waits())
}

// TestCancelledWhileWaiting: the request's context ends the wait (with the real timer:
// the context is cancelled before an hour's wait starts).
func TestCancelledWhileWaiting(t *testing.T) {
	t.Parallel()
	s := newScript(t, status(503, "Retry-After", "3600"), status(201))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	tr := newTransport(t, nil, &idemclient.Transport{MaxElapsed: 2 * time.Hour, OnRetry: func(idemclient.RetryInfo) { cancel() }})
	_, _, res, err := do(t, ctx, tr, http.MethodPost, s.URL(), body)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 1, res.Attempts)
	assert.Len(t, s.Seen(), 1)
}

// TestBodyWithoutGetBodyGetsOneAttempt: a body that cannot be rewound is sent once.
func TestBodyWithoutGetBodyGetsOneAttempt(t *testing.T) {
	t.Parallel()
	s := newScript(t, status(503), status(201))
	clk := newClock()
	var res idemclient.Result
	req, err := http.NewRequestWithContext(idemclient.WithResult(t.Context(), &res), http.MethodPost, s.URL(),
		io.NopCloser(strings.NewReader(body)))
	require.NoError(t, err)
	require.Nil(t, req.GetBody)
	resp, err := (&http.Client{Transport: newTransport(t, clk, &idemclient.Transport{})}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, 1, res.Attempts)
	seen := s.Seen()
	require.Len(t, seen, 1)
	assert.Equal(t, res.Key, seen[0].Key, "it still carries its key")
	assert.NotEmpty(t, res.Key)
}

// TestRequestsWithoutABodyAreRetried: a POST with no body (nil or http.NoBody) has
// nothing to replay and is retried all the same.
func TestRequestsWithoutABodyAreRetried(t *testing.T) {
	t.Parallel()
	for name, b := range map[string]io.Reader{"nil": nil, "NoBody": http.NoBody} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newScript(t, status(503), status(201))
			var res idemclient.Result
			req, err := http.NewRequestWithContext(idemclient.WithResult(t.Context(), &res), http.MethodPost, s.URL(), b)
			require.NoError(t, err)
			resp, err := newTransport(t, newClock(), &idemclient.Transport{}).RoundTrip(req)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			assert.Equal(t, http.StatusCreated, resp.StatusCode)
			assert.Equal(t, 2, res.Attempts)
			for _, r := range s.Seen() {
				assert.Equal(t, res.Key, r.Key)
				assert.Empty(t, r.Body)
			}
		})
	}
}

// TestLostAnswersAreRetriedToTheReplay: a connection reset before the server saw the
// request, then an answer lost after the server ran it: the third attempt gets the
// recorded answer, and the operation ran once.
func TestLostAnswersAreRetriedToTheReplay(t *testing.T) {
	t.Parallel()
	url, calls := idemServer(t, created)
	p, err := httpfault.Start(url, 0, func(_ *http.Request, seen int) httpfault.Fault {
		return []httpfault.Fault{httpfault.ResetBefore, httpfault.DropAnswer, httpfault.Forward}[min(seen, 2)]
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })

	base := &http.Transport{DisableKeepAlives: true} // fresh connections: net/http never resends by itself
	var infos []idemclient.RetryInfo
	tr := newTransport(t, newClock(), &idemclient.Transport{Base: base, OnRetry: func(i idemclient.RetryInfo) { infos = append(infos, i) }})
	resp, got, res, err := do(t, t.Context(), tr, http.MethodPost, p.URL()+"/orders", body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.Equal(t, body, got)
	assert.Equal(t, "true", resp.Header.Get(idemclient.ReplayedHeader))
	assert.Equal(t, idemclient.Result{Key: res.Key, Attempts: 3, Replayed: true}, res)
	assert.EqualValues(t, 1, calls.Load(), "the handler ran once")
	assert.Equal(t, 3, p.Seen(res.Key))
	require.Len(t, infos, 2)
	for _, i := range infos {
		assert.Error(t, i.Err)
		assert.Zero(t, i.Status)
	}
}

// TestConnectionRefusedIsRetriedThenReported: nothing listening; the error says so.
func TestConnectionRefusedIsRetriedThenReported(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	clk := newClock()
	_, _, res, err := do(t, t.Context(), newTransport(t, clk, &idemclient.Transport{MaxAttempts: 3}), http.MethodPost, "http://"+addr, body)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	assert.Contains(t, err.Error(), "idemclient: attempt 3")
	assert.Equal(t, 3, res.Attempts)
	assert.Len(t, clk.Waits(), 2)
}

// TestWithKeyKeepsOneKeyAcrossCalls: two calls (a double click, a job run again) with
// one WithKey are one operation: the second is the first's replay.
func TestWithKeyKeepsOneKeyAcrossCalls(t *testing.T) {
	t.Parallel()
	url, calls := idemServer(t, created)
	tr := newTransport(t, newClock(), &idemclient.Transport{})
	key := idemclient.NewKey()
	ctx := idemclient.WithKey(t.Context(), key)

	first, firstBody, r1, err := do(t, ctx, tr, http.MethodPost, url, body)
	require.NoError(t, err)
	again, againBody, r2, err := do(t, ctx, tr, http.MethodPost, url, body)
	require.NoError(t, err)

	assert.Equal(t, idemclient.Result{Key: key, Attempts: 1, Replayed: false}, r1)
	assert.Equal(t, idemclient.Result{Key: key, Attempts: 1, Replayed: true}, r2)
	assert.Equal(t, http.StatusCreated, first.StatusCode)
	assert.Equal(t, http.StatusCreated, again.StatusCode)
	assert.Equal(t, firstBody, againBody)
	assert.EqualValues(t, 1, calls.Load())
}

// TestInProgressIsWaitedOutToTheReplay: a twin sent while the first request runs gets
// idem's 409 in-progress with Retry-After, waits it, and gets the first one's answer.
func TestInProgressIsWaitedOutToTheReplay(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}), make(chan struct{})
	url, calls := idemServer(t, func(w http.ResponseWriter, r *http.Request) {
		close(started) // the first request holds the key
		<-release      // until the twin has been told "in progress"
		created(w, r)
	})
	key := idemclient.NewKey()
	ctx := idemclient.WithKey(t.Context(), key)

	firstDone := make(chan struct{})
	var first idemclient.Result
	var firstErr error
	firstTr := newTransport(t, nil, &idemclient.Transport{MaxAttempts: 1})
	go func() {
		defer close(firstDone)
		req, err := http.NewRequestWithContext(idemclient.WithResult(ctx, &first), http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			firstErr = err
			return
		}
		resp, err := firstTr.RoundTrip(req)
		if err != nil {
			firstErr = err
			return
		}
		_, firstErr = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}()

	var infos []idemclient.RetryInfo
	twin := newTransport(t, nil, &idemclient.Transport{
		OnRetry: func(i idemclient.RetryInfo) {
			infos = append(infos, i)
			if len(infos) == 1 {
				close(release)
			}
		},
	})
	// The twin's wait lasts until the first request has its answer.
	var waited []time.Duration
	idemclient.SetClock(twin, time.Now, func(ctx context.Context, d time.Duration) error {
		waited = append(waited, d)
		<-firstDone
		return nil
	})
	<-started
	resp, got, res, err := do(t, ctx, twin, http.MethodPost, url, body)
	require.NoError(t, err)
	<-firstDone
	require.NoError(t, firstErr)

	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.Equal(t, body, got)
	assert.Equal(t, idemclient.Result{Key: key, Attempts: 2, Replayed: true}, res)
	assert.Equal(t, idemclient.Result{Key: key, Attempts: 1}, first)
	require.Len(t, infos, 1)
	assert.Equal(t, http.StatusConflict, infos[0].Status)
	assert.True(t, infos[0].RetryAfter)
	assert.Equal(t, []time.Duration{time.Second}, waited, "idem's Retry-After, waited")
	assert.EqualValues(t, 1, calls.Load())
}

// TestTheRequestsOwnHeaderIsKept: a request that has the header keeps it, WithKey or not.
func TestTheRequestsOwnHeaderIsKept(t *testing.T) {
	t.Parallel()
	s := newScript(t, status(503), status(201))
	var res idemclient.Result
	ctx := idemclient.WithResult(idemclient.WithKey(t.Context(), "from-context"), &res)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL(), strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "from-header")
	resp, err := (&http.Client{Transport: newTransport(t, newClock(), &idemclient.Transport{})}).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	for _, r := range s.Seen() {
		assert.Equal(t, "from-header", r.Key)
	}
	assert.Equal(t, idemclient.Result{Key: "from-header", Attempts: 2}, res)
	assert.Equal(t, []string{"from-header"}, req.Header.Values("Idempotency-Key"))
}

// TestTheCallersRequestIsNotModified: the key goes on clones, per RoundTripper's contract.
func TestTheCallersRequestIsNotModified(t *testing.T) {
	t.Parallel()
	s := newScript(t, status(503), status(201))
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL(), strings.NewReader(body))
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: newTransport(t, newClock(), &idemclient.Transport{})}).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Empty(t, req.Header.Values("Idempotency-Key"))
	assert.Len(t, s.Seen(), 2)
}

// TestAnEmptyWithKeyIsRefused: an empty saved key is a bug, not a reason for a new key.
func TestAnEmptyWithKeyIsRefused(t *testing.T) {
	t.Parallel()
	s := newScript(t, status(201))
	_, _, _, err := do(t, idemclient.WithKey(t.Context(), ""), newTransport(t, nil, &idemclient.Transport{}), http.MethodPost, s.URL(), body)
	require.ErrorContains(t, err, "empty key")
	assert.Empty(t, s.Seen())
}

// TestMethodsAndHeaderAreConfigurable: Methods and Header replace the defaults.
func TestMethodsAndHeaderAreConfigurable(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	got := map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Method] = r.Header.Get("X-Request-Key") + "|" + r.Header.Get("Idempotency-Key")
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	tr := newTransport(t, nil, &idemclient.Transport{Methods: []string{http.MethodPut}, Header: "X-Request-Key"})
	_, _, put, err := do(t, t.Context(), tr, http.MethodPut, srv.URL, body)
	require.NoError(t, err)
	_, _, post, err := do(t, t.Context(), tr, http.MethodPost, srv.URL, body)
	require.NoError(t, err)
	assert.Equal(t, put.Key+"|", got[http.MethodPut])
	assert.NotEmpty(t, put.Key)
	assert.Equal(t, "|", got[http.MethodPost])
	assert.Empty(t, post.Key)
}

// closeTracker is a Base that records whether each response's body was closed.
type closeTracker struct {
	base   http.RoundTripper
	mu     sync.Mutex
	bodies []*trackedBody
}

type trackedBody struct {
	io.ReadCloser
	read   int64
	closed bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.read += int64(n)
	return n, err
}

func (b *trackedBody) Close() error { b.closed = true; return b.ReadCloser.Close() }

func (c *closeTracker) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if err == nil {
		b := &trackedBody{ReadCloser: resp.Body}
		resp.Body = b
		c.mu.Lock()
		c.bodies = append(c.bodies, b)
		c.mu.Unlock()
	}
	return resp, err
}

// TestRetriedAnswersAreDrainedAndClosed: the body of every retried response is read and
// closed, so its connection goes back to the pool; the last is the caller's.
func TestRetriedAnswersAreDrainedAndClosed(t *testing.T) {
	t.Parallel()
	s := newScript(t, status(503), problem(409, "#in-progress"), status(201))
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	ct := &closeTracker{base: base}
	var res idemclient.Result
	req, err := http.NewRequestWithContext(idemclient.WithResult(t.Context(), &res), http.MethodPost, s.URL(), strings.NewReader(body))
	require.NoError(t, err)
	resp, err := newTransport(t, newClock(), &idemclient.Transport{Base: ct}).RoundTrip(req)
	require.NoError(t, err)
	require.Len(t, ct.bodies, 3)
	for i, b := range ct.bodies[:2] {
		assert.True(t, b.closed, "retried body %d closed", i+1)
		assert.Positive(t, b.read, "retried body %d drained", i+1)
	}
	assert.False(t, ct.bodies[2].closed, "the final body is the caller's to close")
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, 3, res.Attempts)
}

// TestOnRetryAndLogger: one OnRetry call and one log line per retry, and a warning when
// the transport gives up on an answer it would have retried.
func TestOnRetryAndLogger(t *testing.T) {
	t.Parallel()
	s := newScript(t, status(503, "Retry-After", "1"), status(504))
	var logs bytes.Buffer
	var infos []idemclient.RetryInfo
	tr := newTransport(t, newClock(), &idemclient.Transport{
		MaxAttempts: 3,
		Logger:      slog.New(slog.NewJSONHandler(&logs, nil)),
		OnRetry:     func(i idemclient.RetryInfo) { infos = append(infos, i) },
	})
	resp, _, res, err := do(t, t.Context(), tr, http.MethodPost, s.URL()+"/v1/orders", body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusGatewayTimeout, resp.StatusCode)

	require.Len(t, infos, 2)
	assert.Equal(t, []int{1, 2}, []int{infos[0].Attempt, infos[1].Attempt})
	assert.Equal(t, []int{503, 504}, []int{infos[0].Status, infos[1].Status})
	assert.Equal(t, http.MethodPost, infos[0].Request.Method)
	assert.Equal(t, "/v1/orders", infos[0].Request.URL.Path)

	var lines []map[string]any
	for l := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		lines = append(lines, m)
	}
	require.Len(t, lines, 3)
	for i, want := range []struct {
		level, msg string
		status     float64
	}{{"INFO", "idemclient: retrying", 503}, {"INFO", "idemclient: retrying", 504}, {"WARN", "idemclient: giving up: MaxAttempts reached", 504}} {
		assert.Equal(t, want.level, lines[i]["level"], "line %d", i)
		assert.Equal(t, want.msg, lines[i]["msg"], "line %d", i)
		assert.Equal(t, want.status, lines[i]["status"], "line %d", i)
		assert.Equal(t, res.Key, lines[i]["key"], "line %d", i)
		assert.Equal(t, float64(i+1), lines[i]["attempt"], "line %d", i)
	}
	assert.Equal(t, float64(time.Second), lines[0]["wait"])
	assert.Equal(t, true, lines[0]["retry_after"])
}

// TestZeroValueWorks: Base nil is http.DefaultTransport; every default applies.
func TestZeroValueWorks(t *testing.T) {
	t.Parallel()
	t.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections)
	url, calls := idemServer(t, created)
	resp, got, res, err := do(t, t.Context(), &idemclient.Transport{}, http.MethodPost, url, body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.Equal(t, body, got)
	assert.Equal(t, 1, res.Attempts)
	assert.NotEmpty(t, res.Key)
	assert.EqualValues(t, 1, calls.Load(), "idem accepted the key")
}

// TestCloseIdleConnectionsReachesBase: http.Client.CloseIdleConnections gets through.
func TestCloseIdleConnectionsReachesBase(t *testing.T) {
	t.Parallel()
	s := newScript(t, status(201))
	var closed bool
	base := &closeIdle{RoundTripper: &http.Transport{}, closed: &closed}
	t.Cleanup(base.RoundTripper.(*http.Transport).CloseIdleConnections)
	client := &http.Client{Transport: &idemclient.Transport{Base: base}}
	resp, err := client.Post(s.URL(), "application/json", strings.NewReader(body))
	require.NoError(t, err)
	resp.Body.Close()
	client.CloseIdleConnections()
	assert.True(t, closed)
}

type closeIdle struct {
	http.RoundTripper
	closed *bool
}

func (c *closeIdle) CloseIdleConnections() {
	*c.closed = true
	c.RoundTripper.(*http.Transport).CloseIdleConnections()
}

// errGetBody is a GetBody's failure.
var errGetBody = errors.New("body gone")

// TestGetBodyFailureIsReported: a body that cannot be had again ends the retries with
// the error.
func TestGetBodyFailureIsReported(t *testing.T) {
	t.Parallel()
	s := newScript(t, status(503), status(201))
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL(), strings.NewReader(body))
	require.NoError(t, err)
	req.GetBody = func() (io.ReadCloser, error) { return nil, errGetBody }
	_, err = newTransport(t, newClock(), &idemclient.Transport{}).RoundTrip(req)
	require.ErrorIs(t, err, errGetBody)
	assert.Len(t, s.Seen(), 1)
}
