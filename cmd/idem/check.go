package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem/idemtest"
)

// multi is a repeatable string flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ", ") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

// uniquePlaceholder in -body is replaced by a value unique to each operation, for APIs
// that refuse a body they have seen (a unique order number).
const uniquePlaceholder = "{{unique}}"

func checkCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var urls, headers multi
	fs := newFlags("check", "-url URL [-url URL2 …] [-method POST] [-body @file|JSON] [-header 'K: V' …] [flags]", stderr)
	fs.Var(&urls, "url", "the route's full URL (https://staging.example.com/v1/orders); repeat it for several instances of one deployment: requests alternate between them (required)")
	method := fs.String("method", http.MethodPost, "the route's method")
	body := fs.String("body", "", "the request body: JSON text, or @FILE; "+uniquePlaceholder+" in it becomes a value unique to each operation")
	fs.Var(&headers, "header", "a header sent with every request, 'Name: value' (authentication, the account); repeatable")
	get := fs.String("get", "", "a GET path on the same host (/v1/orders) that must ignore the key (enables get-untouched)")
	failHeader := fs.String("fail-header", "", "'Name: value' that makes the route answer 5xx (enables failure-retry)")
	parallel := fs.Int("parallel", idemtest.DefaultParallel, "concurrent same-key requests in the parallel check")
	timeout := fs.Duration("timeout", idemtest.DefaultTimeout, "bound on the whole run")
	reqTimeout := fs.Duration("request-timeout", idemtest.DefaultRequestTimeout, "bound on each request")
	count := fs.String("count", "", "a GET path on the first -url's host that counts the side effect (enables the side-effect checks): a JSON number or array, or an object with one array (or one number) member, or -count-field")
	countField := fs.String("count-field", "", "with -count: the member of the JSON object holding the array or number")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}

	t := idemtest.Target{Method: *method, GetPath: *get, Parallel: *parallel, Timeout: *timeout,
		RequestTimeout: *reqTimeout, Header: http.Header{}}
	if len(urls) == 0 {
		return fmt.Errorf("%w: -url is required", errUsage)
	}
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%w: -url %q: want http(s)://host/path", errUsage, raw)
		}
		path := u.EscapedPath()
		if path == "" {
			path = "/"
		}
		if u.RawQuery != "" {
			path += "?" + u.RawQuery
		}
		if t.Path != "" && path != t.Path {
			return fmt.Errorf("%w: -url %q: every -url must name the same route (%s)", errUsage, raw, t.Path)
		}
		t.Path = path
		t.URLs = append(t.URLs, u.Scheme+"://"+u.Host)
	}
	for _, h := range headers {
		name, value, err := parseHeader(h)
		if err != nil {
			return err
		}
		t.Header.Add(name, value)
	}
	if *failHeader != "" {
		name, value, err := parseHeader(*failHeader)
		if err != nil {
			return err
		}
		t.InjectFailure = func(r *http.Request) { r.Header.Set(name, value) }
	}
	template, err := readBody(*body)
	if err != nil {
		return err
	}
	if template != nil {
		run := newID()
		t.Body = func(i int) []byte {
			return bytes.ReplaceAll(template, []byte(uniquePlaceholder), []byte(run+"-"+strconv.Itoa(i)))
		}
	}

	var counter *sideEffects
	if *count != "" {
		if !strings.HasPrefix(*count, "/") {
			return fmt.Errorf("%w: -count %q: want a path starting with /", errUsage, *count)
		}
		counter = &sideEffects{ctx: ctx, url: t.URLs[0] + *count, field: *countField, header: t.Header, timeout: t.RequestTimeout}
		t.SideEffects = counter.read
	}

	rep, err := idemtest.Run(ctx, t)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if counter != nil && counter.err != nil {
		rep.Err = fmt.Sprintf("counting side effects with GET %s: %v (the side-effect checks are meaningless)", *count, counter.err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(jsonReport{Report: rep, Passed: !rep.Failed(), Duration: rep.Duration.Round(time.Millisecond).String()})
	} else {
		err = rep.WriteText(stdout)
	}
	if err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	if rep.Failed() {
		return errFailed
	}
	return nil
}

// jsonReport is the -json output: the report, a verdict, and the duration as text.
type jsonReport struct {
	idemtest.Report
	Passed   bool   `json:"passed"`
	Duration string `json:"duration"`
}

// parseHeader reads 'Name: value'.
func parseHeader(h string) (name, value string, err error) {
	name, value, ok := strings.Cut(h, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.ContainsAny(name, " \t") {
		return "", "", fmt.Errorf("%w: header %q: want 'Name: value'", errUsage, h)
	}
	return http.CanonicalHeaderKey(name), strings.TrimSpace(value), nil
}

// readBody reads -body: @FILE or the text itself; nil when empty.
func readBody(v string) ([]byte, error) {
	if v == "" {
		return nil, nil
	}
	if file, ok := strings.CutPrefix(v, "@"); ok {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("%w: -body: %w", errUsage, err)
		}
		return b, nil
	}
	return []byte(v), nil
}

// newID is a random value for the run's unique bodies.
func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// sideEffects counts the side effect through a GET route of the API.
type sideEffects struct {
	ctx     context.Context
	url     string
	field   string
	header  http.Header
	timeout time.Duration
	last    int
	err     error // the first failure
}

// read returns the count, or the last one read after a failure (kept in err).
func (s *sideEffects) read() int {
	n, err := s.get()
	if err != nil {
		if s.err == nil {
			s.err = err
		}
		return s.last
	}
	s.last = n
	return n
}

func (s *sideEffects) get() (int, error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return 0, err
	}
	for k, vs := range s.header {
		if k != "Content-Type" {
			req.Header[k] = vs
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %d: %.200s", resp.StatusCode, body)
	}
	return countJSON(body, s.field)
}

// countJSON reads a count from a JSON body: a number, the length of an array, or the
// object's member field as either (without field: its only array member, or else its
// only number member).
func countJSON(body []byte, field string) (int, error) {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return 0, fmt.Errorf("not JSON: %w", err)
	}
	if obj, ok := v.(map[string]any); ok {
		if field != "" {
			if v, ok = obj[field]; !ok {
				return 0, fmt.Errorf("no member %q", field)
			}
		} else {
			var arrays, numbers []any
			for _, m := range obj {
				switch m.(type) {
				case []any:
					arrays = append(arrays, m)
				case float64:
					numbers = append(numbers, m)
				}
			}
			switch {
			case len(arrays) == 1:
				v = arrays[0]
			case len(arrays) == 0 && len(numbers) == 1:
				v = numbers[0]
			default:
				return 0, fmt.Errorf("%d array and %d number members: name one with -count-field", len(arrays), len(numbers))
			}
		}
	}
	switch x := v.(type) {
	case []any:
		return len(x), nil
	case float64:
		return int(x), nil
	}
	return 0, fmt.Errorf("%T is neither a number nor an array", v)
}
