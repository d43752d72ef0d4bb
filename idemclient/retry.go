package idemclient

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// problemPeekLimit bounds what is read of a 409's body to look for its problem type.
const problemPeekLimit = 64 << 10

// retryableStatus reports whether a response with status code may be retried: 408, 429,
// 502, 503 and 504 always, 409 when it says "in progress" (the caller checks that).
func retryableStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooManyRequests,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout,
		http.StatusConflict:
		return true
	}
	return false
}

// retryAfter reads resp's Retry-After: a number of seconds, or an HTTP-date (measured
// from the response's Date when it has one, so that the two clocks' skew cancels out,
// else from now). A date in the past is a wait of 0. It reports false when the header is
// absent or malformed.
func retryAfter(resp *http.Response, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(resp.Header.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if isDigits(v) {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n > math.MaxInt64/int64(time.Second) {
			return math.MaxInt64, true // too long to wait for: MaxElapsed stops the retries
		}
		return time.Duration(n) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if date, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
		now = date
	}
	return max(at.Sub(now), 0), true
}

func isDigits(s string) bool {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// inProgress reports whether resp is idem's in-progress problem: an
// application/problem+json body whose type's last segment (after the last '/' or '#')
// is "in-progress", whatever the server's problem base. It reads at most
// problemPeekLimit bytes of the body and puts them back, so the caller can still read the
// whole body when the response is not retried.
func inProgress(resp *http.Response) bool {
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || mt != "application/problem+json" {
		return false
	}
	peeked, err := io.ReadAll(io.LimitReader(resp.Body, problemPeekLimit))
	resp.Body = &peekedBody{Reader: io.MultiReader(bytes.NewReader(peeked), resp.Body), closer: resp.Body}
	if err != nil {
		return false
	}
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(peeked, &p) != nil {
		return false
	}
	return p.Type[strings.LastIndexAny(p.Type, "/#")+1:] == "in-progress"
}

// peekedBody is a response body whose first bytes were read and are read again.
type peekedBody struct {
	io.Reader
	closer io.Closer
}

func (b *peekedBody) Close() error { return b.closer.Close() }

// isReplay reports whether resp says it is a replay (Idempotent-Replayed: true).
func isReplay(resp *http.Response) bool {
	return strings.EqualFold(strings.TrimSpace(resp.Header.Get(ReplayedHeader)), "true")
}
