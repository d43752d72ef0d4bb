package idemclient

import (
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRetryAfterForms: seconds or an HTTP-date in any of HTTP's three formats, from the
// response's Date when present; anything else is no Retry-After.
func TestRetryAfterForms(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := now.Add(90 * time.Second)
	for _, c := range []struct {
		value, date string
		want        time.Duration
		ok          bool
	}{
		{"5", "", 5 * time.Second, true},
		{" 5 ", "", 5 * time.Second, true},
		{"0", "", 0, true},
		{"99999999999999999999", "", math.MaxInt64, true},
		{"9999999999999", "", math.MaxInt64, true},
		{at.Format(http.TimeFormat), "", 90 * time.Second, true},
		{at.Format(time.RFC850), "", 90 * time.Second, true},
		{at.Format(time.ANSIC), "", 90 * time.Second, true},
		{at.Format(http.TimeFormat), now.Add(-time.Hour).Format(http.TimeFormat), time.Hour + 90*time.Second, true},
		{now.Add(-time.Minute).Format(http.TimeFormat), "", 0, true}, // past: at once
		{at.Format(http.TimeFormat), "not a date", 90 * time.Second, true},
		{"", "", 0, false},
		{"-1", "", 0, false},
		{"+5", "", 0, false},
		{"1.5", "", 0, false},
		{"soon", "", 0, false},
	} {
		resp := &http.Response{Header: http.Header{}}
		resp.Header.Set("Retry-After", c.value)
		if c.date != "" {
			resp.Header.Set("Date", c.date)
		}
		got, ok := retryAfter(resp, now)
		assert.Equal(t, c.ok, ok, "%q (Date %q)", c.value, c.date)
		assert.Equal(t, c.want, got, "%q (Date %q)", c.value, c.date)
	}
}

// TestInProgressProblem: the problem type's last segment decides, under any base, and
// the body reads whole afterwards.
func TestInProgressProblem(t *testing.T) {
	t.Parallel()
	long := `{"detail":"` + strings.Repeat("x", problemPeekLimit) + `","type":"#in-progress"}`
	for _, c := range []struct {
		contentType, body string
		want              bool
	}{
		{"application/problem+json", `{"type":"https://github.com/idemkit/idem/blob/main/docs/problems.md#in-progress"}`, true},
		{"application/problem+json", `{"type":"https://api.example.com/problems/in-progress","status":409}`, true},
		{"Application/Problem+JSON; charset=utf-8", `{"type":"in-progress"}`, true},
		{"application/problem+json", `{"type":"https://api.example.com/problems/not-in-progress"}`, false},
		{"application/problem+json", `{"type":"https://api.example.com/in-progress/other"}`, false},
		{"application/problem+json", `{"type":"#response-too-large"}`, false},
		{"application/problem+json", `{"title":"in-progress"}`, false},
		{"application/problem+json", `not json`, false},
		{"application/problem+json", long, false}, // past the peek limit: not read, not retried
		{"application/json", `{"type":"#in-progress"}`, false},
		{"", `{"type":"#in-progress"}`, false},
	} {
		resp := &http.Response{Header: http.Header{}, Body: io.NopCloser(strings.NewReader(c.body))}
		resp.Header.Set("Content-Type", c.contentType)
		assert.Equal(t, c.want, inProgress(resp), "%s %.80s", c.contentType, c.body)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, c.body, string(b), "the body reads whole after the peek")
		require.NoError(t, resp.Body.Close())
	}
}
