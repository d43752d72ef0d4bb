package core_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/core/policy"
)

// atomicStore is a memstore that claims to share a transaction, so that New accepts
// ModeAtomic: enough to read a policy, never used to serve a request.
type atomicStore struct{ *memstore.Store }

func (atomicStore) SupportsAtomic() bool { return true }

func policyOf(t *testing.T, cfg core.Config) policy.Policy {
	t.Helper()
	if cfg.Store == nil {
		cfg.Store = memstore.New()
	}
	eng, err := core.New(cfg)
	require.NoError(t, err)
	return eng.Policy()
}

// answer returns the policy's answer called name.
func answer(t *testing.T, p policy.Policy, name string) policy.Answer {
	t.Helper()
	for _, a := range p.Answers {
		if a.Name == name {
			return a
		}
	}
	t.Fatalf("no answer %q in %+v", name, p.Answers)
	return policy.Answer{}
}

func TestPolicyOfTheDefaults(t *testing.T) {
	p := policyOf(t, core.Config{Store: memstore.New(memstore.WithRetention(2 * time.Hour))})
	assert.Equal(t, policy.Key{In: "header", Name: "Idempotency-Key", Required: true, MinLength: 1, MaxLength: 255, Format: p.Key.Format}, p.Key)
	assert.Contains(t, p.Key.Format, "RFC 8941")
	assert.Equal(t, []string{"POST", "PATCH"}, p.Methods)
	assert.Equal(t, 2*time.Hour, p.Retention, "the store's retention")
	assert.Equal(t, core.ModePhased, p.Mode, "memstore runs phased")
	assert.Equal(t, 60*time.Second, p.Lease)
	assert.Zero(t, p.Wait, "LeaseWait defaults to 0")
	assert.Equal(t, time.Second, p.RetryAfter)
	assert.Equal(t, []string{"method", "path", "query", "body"}, p.Fingerprint.Covers)
	assert.False(t, p.Fingerprint.Custom)
	assert.Equal(t, policy.Statuses("2xx, 3xx, 4xx (except 408, 409, 425, 429)"), p.Stored)
	assert.Equal(t, core.DefaultReplayHeaders(), p.ReplayHeaders)
	assert.Equal(t, int64(1<<20), p.MaxRequestBody)
	assert.Equal(t, int64(1<<20), p.MaxResponseBody)
	assert.Equal(t, "<key>:<suffix>", p.DerivedKey)
	assert.Contains(t, p.Scope, "scope function")

	assert.Equal(t, []string{"Idempotent-Replayed"}, answer(t, p, "replay").Headers)
	assert.Contains(t, answer(t, p, "not-stored").Case, "1xx, 408, 409, 425, 429, 5xx")
}

// Every problem kind is an answer, with the status, title and type the engine sends,
// and Retry-After where the engine sends it.
func TestPolicyAnswersWithEveryProblemKind(t *testing.T) {
	p := policyOf(t, core.Config{ProblemBase: "https://api.example.com/errors#"})
	kinds := []core.ProblemKind{core.ProblemKeyMissing, core.ProblemKeyInvalid, core.ProblemKeyReused, core.ProblemInProgress,
		core.ProblemBodyTooLarge, core.ProblemBodyUnreadable, core.ProblemStoreUnavailable, core.ProblemCollision,
		core.ProblemNotRecorded, core.ProblemMisconfigured}
	seen := map[core.ProblemKind]int{}
	for _, a := range p.Answers {
		if a.Problem == "" {
			assert.Zero(t, a.Status, "%s: the handler's status", a.Name)
			continue
		}
		kind := core.ProblemKind(a.Problem)
		seen[kind]++
		assert.Equal(t, a.Problem, a.Name)
		assert.Equal(t, kind.Status(), a.Status, a.Name)
		assert.Equal(t, kind.Title(), a.Title, a.Name)
		assert.Equal(t, "https://api.example.com/errors#"+string(a.Problem), a.Type, a.Name)
		assert.NotEmpty(t, a.Case, a.Name)
	}
	for _, k := range kinds {
		assert.Equal(t, 1, seen[k], "answers list %s once", k)
	}
	for _, k := range []core.ProblemKind{core.ProblemInProgress, core.ProblemStoreUnavailable, core.ProblemCollision, core.ProblemNotRecorded} {
		assert.Equal(t, []string{"Retry-After"}, answer(t, p, string(k)).Headers, k)
	}
	for _, k := range []core.ProblemKind{core.ProblemKeyMissing, core.ProblemKeyReused, core.ProblemBodyTooLarge} {
		assert.Empty(t, answer(t, p, string(k)).Headers, k)
	}
}

func TestPolicyFollowsTheConfig(t *testing.T) {
	t.Run("atomic", func(t *testing.T) {
		p := policyOf(t, core.Config{Store: atomicStore{memstore.New()}, LockWait: 3 * time.Second})
		assert.Equal(t, core.ModeAtomic, p.Mode)
		assert.Zero(t, p.Lease, "no lease in atomic mode")
		assert.Equal(t, 3*time.Second, p.Wait, "the lock wait")
		assert.Contains(t, answer(t, p, "in-progress").Case, "waits up to 3s")
		for _, a := range p.Answers {
			assert.NotEqual(t, string(core.ProblemCannotResume), a.Name, "only a phased takeover resumes")
		}
		assert.Equal(t, string(core.ProblemCannotResume), answer(t, policyOf(t, core.Config{}), "cannot-resume").Name, "phased")
	})
	t.Run("lease wait", func(t *testing.T) {
		p := policyOf(t, core.Config{LeaseWait: 5 * time.Second, Lease: 90 * time.Second})
		assert.Equal(t, 5*time.Second, p.Wait)
		assert.Equal(t, 90*time.Second, p.Lease)
		assert.Contains(t, answer(t, p, "in-progress").Case, "within 5s")
	})
	t.Run("optional key", func(t *testing.T) {
		p := policyOf(t, core.Config{KeyOptional: true, MinKeyLength: 16, Methods: []string{"POST", "PUT"}})
		assert.False(t, p.Key.Required)
		assert.Equal(t, 16, p.Key.MinLength)
		assert.Equal(t, []string{"POST", "PUT"}, p.Methods)
		for _, a := range p.Answers {
			assert.NotEqual(t, core.ProblemKeyMissing, a.Problem, "a request without a key runs: no key-missing answer")
		}
	})
	t.Run("header name", func(t *testing.T) {
		p := policyOf(t, core.Config{HeaderName: "X-Request-Key"})
		assert.Equal(t, "X-Request-Key", p.Key.Name)
		assert.Contains(t, answer(t, p, "key-missing").Case, "without an X-Request-Key header")
	})
	t.Run("delivery header", func(t *testing.T) {
		p := policyOf(t, core.Config{Key: core.KeyFromHeader("X-GitHub-Delivery")})
		assert.Equal(t, "header", p.Key.In)
		assert.Equal(t, "X-GitHub-Delivery", p.Key.Name)
		assert.NotContains(t, p.Key.Format, "RFC 8941", "a delivery header is not an sf-string")
	})
	t.Run("JSON member", func(t *testing.T) {
		p := policyOf(t, core.Config{Key: core.KeyFromJSON("data", "id")})
		assert.Equal(t, "body", p.Key.In)
		assert.Equal(t, "data.id", p.Key.Name)
		assert.Contains(t, answer(t, p, "key-missing").Case, `member "data.id"`)
	})
	t.Run("key function", func(t *testing.T) {
		p := policyOf(t, core.Config{Key: core.KeyFromFunc(func(*http.Request, []byte) (string, bool, error) { return "", false, nil })})
		assert.Equal(t, "custom", p.Key.In)
		assert.Empty(t, p.Key.Name)
	})
	t.Run("fingerprint of the application's own", func(t *testing.T) {
		for _, f := range []core.FingerprintFunc{core.FingerprintWithHeaders("X-Tenant"), func(r *http.Request, body []byte) ([]byte, error) { return core.Fingerprint(r, body) }} {
			p := policyOf(t, core.Config{Fingerprint: f})
			assert.True(t, p.Fingerprint.Custom)
			assert.Empty(t, p.Fingerprint.Covers)
		}
	})
	t.Run("stored statuses and headers", func(t *testing.T) {
		p := policyOf(t, core.Config{Storable: func(s int) bool { return s >= 200 && s < 300 }, ReplayHeaders: []string{"Location", "X-Order-Id"}})
		assert.Equal(t, policy.Statuses("2xx"), p.Stored)
		assert.Equal(t, []string{"Location", "X-Order-Id"}, p.ReplayHeaders)
		assert.Contains(t, answer(t, p, "not-stored").Case, "1xx, 3xx, 4xx, 5xx")
	})
	t.Run("retry after as sent", func(t *testing.T) {
		p := policyOf(t, core.Config{RetryAfter: 1500 * time.Millisecond})
		assert.Equal(t, 2*time.Second, p.RetryAfter, "Retry-After is whole seconds, rounded up")
	})
}

// The policy says what the engine does: its answers are the ones a client gets.
func TestPolicyIsWhatTheEngineAnswers(t *testing.T) {
	eng, err := core.New(core.Config{Store: memstore.New(), ProblemBase: "https://api.example.com/errors#"})
	require.NoError(t, err)
	p := eng.Policy()
	h := eng.Middleware(accountScope)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/orders/1")
		w.WriteHeader(http.StatusCreated)
	}))
	send := func(key, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
		r.Header.Set("X-Account-ID", "acme")
		if key != "" {
			r.Header.Set(p.Key.Name, key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	problem := func(w *httptest.ResponseRecorder) core.Problem {
		var pr core.Problem
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &pr), w.Body.String())
		return pr
	}
	for _, tc := range []struct {
		name string
		w    *httptest.ResponseRecorder
	}{
		{"key-missing", send("", orderJSON)},
		{"key-invalid", send("a,b", orderJSON)},
	} {
		a := answer(t, p, tc.name)
		assert.Equal(t, a.Status, tc.w.Code, tc.name)
		assert.Equal(t, a.Type, problem(tc.w).Type, tc.name)
	}
	require.Equal(t, http.StatusCreated, send("k1", orderJSON).Code)
	again := send("k1", orderJSON)
	assert.Equal(t, http.StatusCreated, again.Code)
	for _, h := range answer(t, p, "replay").Headers {
		assert.Equal(t, "true", again.Header().Get(h))
	}
	reused := send("k1", `{"item":"pen"}`)
	assert.Equal(t, answer(t, p, "key-reused").Status, reused.Code)
	assert.Equal(t, answer(t, p, "key-reused").Type, problem(reused).Type)
}

func TestPolicyJSONRoundTrips(t *testing.T) {
	p := policyOf(t, core.Config{Store: memstore.New(memstore.WithRetention(36 * time.Hour)), LeaseWait: 250 * time.Millisecond})
	p.Scope, p.Downstream, p.Tests = "the account", []string{"provider: <key>:charge"}, []string{"idemtest.Check"}
	b, err := json.Marshal(p)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	assert.Equal(t, float64(36*3600), m["retention_seconds"])
	assert.Equal(t, "phased", m["mode"])
	assert.Equal(t, 0.25, m["wait_seconds"])
	assert.Equal(t, float64(60), m["lease_seconds"])
	assert.Equal(t, "2xx, 3xx, 4xx (except 408, 409, 425, 429)", m["stored_statuses"])

	var back policy.Policy
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, p, back)
}

func TestPolicyMarkdownIsTheEndpointsRecord(t *testing.T) {
	p := policyOf(t, core.Config{Store: atomicStore{memstore.New()}})
	p.Scope = "the account named by X-Account-ID"
	p.Tests = []string{"idemtest.Check in orders_test.go"}
	md := p.Markdown("POST /v1/orders")
	for _, want := range []string{
		"### Idempotency for POST /v1/orders\n",
		"- **Mechanism:** idem, atomic mode",
		"- **Key:** the `Idempotency-Key` header, required on POST, PATCH; 1–255 characters",
		"- **Scope and retention:** keys belong to the account named by X-Account-ID and never collide across scopes; a key is kept 24h (86400 seconds)",
		"- **Fingerprint:** method, path, query, body; a JSON body compared canonically",
		"- **Stored:** statuses 2xx, 3xx, 4xx (except 408, 409, 425, 429)",
		"| the handler's |  | `Idempotent-Replayed: true` |",
		"| 409 | [in-progress](" + core.DefaultProblemBase + "in-progress) | `Retry-After: 1` |",
		"| 422 | [key-reused](" + core.DefaultProblemBase + "key-reused) |  |",
		"| 400 | [key-missing](" + core.DefaultProblemBase + "key-missing) |  |",
		"- **Downstream keys:** `<key>:<suffix>` (`Operation.DerivedKey`)",
		"- **Tests:** idemtest.Check in orders_test.go.\n",
	} {
		assert.Contains(t, md, want)
	}
	assert.Equal(t, strings.Count(md, "\n  | "), len(p.Answers)+2, "a table row per answer, after the head")
}

func TestStatusesHasWhatStatusesOfSaw(t *testing.T) {
	for name, in := range map[string]func(int) bool{
		"default":      core.StorableStatus,
		"none":         func(int) bool { return false },
		"all":          func(int) bool { return true },
		"201 only":     func(s int) bool { return s == 201 },
		"2xx but 204":  func(s int) bool { return s/100 == 2 && s != 204 },
		"odd":          func(s int) bool { return s%2 == 1 },
		"4xx and 5xx":  func(s int) bool { return s >= 400 },
		"200 and 3xx":  func(s int) bool { return s == 200 || s/100 == 3 },
		"below 250":    func(s int) bool { return s < 250 },
		"not stored":   func(s int) bool { return !core.StorableStatus(s) },
		"the 1xx only": func(s int) bool { return s < 200 },
	} {
		set := policy.StatusesOf(in)
		for s := 100; s < 600; s++ {
			if set.Has(s) != in(s) {
				t.Errorf("%s: %q.Has(%d) = %v, want %v", name, set, s, set.Has(s), in(s))
				break
			}
		}
	}
	assert.Equal(t, policy.Statuses("none"), policy.StatusesOf(func(int) bool { return false }))
	assert.Equal(t, policy.Statuses("1xx, 2xx, 3xx, 4xx, 5xx"), policy.StatusesOf(func(int) bool { return true }))
	assert.Equal(t, policy.Statuses("201"), policy.StatusesOf(func(s int) bool { return s == 201 }))
	assert.False(t, policy.Statuses("2xx (except 204").Has(200), "malformed")
}

// TestDefaultReplayHeadersIsAFreshCopy: a caller appending to or changing the defaults
// changes no one else's.
func TestDefaultReplayHeadersIsAFreshCopy(t *testing.T) {
	t.Parallel()
	h := core.DefaultReplayHeaders()
	h[0] = "Set-Cookie"
	assert.Equal(t, "Location", core.DefaultReplayHeaders()[0])
	assert.Equal(t, "Location", core.DefaultReplayHeaders()[0])
}
