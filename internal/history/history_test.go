package history_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/history"
)

// at is one request of a hand-written history: called at call, returned at ret.
type at struct {
	call, ret int64
	out       history.Output
}

func fresh(r string) history.Output    { return history.Output{Kind: history.Fresh, Response: r} }
func replayed(r string) history.Output { return history.Output{Kind: history.Replayed, Response: r} }

var (
	inProgress = history.Output{Kind: history.InProgress}
	failed     = history.Output{Kind: history.Failed}
	wrong      = history.Output{Kind: history.Wrong, Response: "500 boom"}
)

func check(reqs ...at) porcupine.CheckResult {
	ops := make([]porcupine.Operation, len(reqs))
	for i, r := range reqs {
		ops[i] = porcupine.Operation{ClientId: i, Input: history.Input{Key: "k"}, Call: r.call, Return: r.ret, Output: r.out}
	}
	return porcupine.CheckOperationsTimeout(history.Model, ops, 0)
}

// TestModelOfOneKey states the model on small histories, each rule by an allowed and a
// forbidden one.
func TestModelOfOneKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		want porcupine.CheckResult
		reqs []at
	}{
		{"a fresh run, then its replay", porcupine.Ok, []at{{0, 1, fresh("201 a")}, {2, 3, replayed("201 a")}}},
		{"a second run after the first returned", porcupine.Illegal, []at{{0, 1, fresh("201 a")}, {2, 3, fresh("201 b")}}},
		{"two concurrent runs", porcupine.Illegal, []at{{0, 5, fresh("201 a")}, {1, 4, fresh("201 b")}}},
		{"a replay of another response", porcupine.Illegal, []at{{0, 1, fresh("201 a")}, {2, 3, replayed("201 b")}}},
		{"a replay of nothing", porcupine.Illegal, []at{{0, 1, replayed("201 a")}}},
		{"a 409 concurrent with the run", porcupine.Ok, []at{{0, 5, fresh("201 a")}, {1, 4, inProgress}}},
		{"a 409 after the run returned", porcupine.Illegal, []at{{0, 1, fresh("201 a")}, {2, 3, inProgress}}},
		{"a failure that recorded, revealed by a replay", porcupine.Ok, []at{{0, 1, failed}, {2, 3, replayed("201 a")}}},
		{"a failure that recorded nothing, then a run", porcupine.Ok, []at{{0, 1, failed}, {2, 3, fresh("201 a")}}},
		{"a failure after the run, then the replay", porcupine.Ok, []at{{0, 1, fresh("201 a")}, {2, 3, failed}, {4, 5, replayed("201 a")}}},
		{"a failure cannot make a second run legal", porcupine.Illegal, []at{{0, 1, fresh("201 a")}, {2, 3, failed}, {4, 5, fresh("201 b")}}},
		{"a 500", porcupine.Illegal, []at{{0, 1, wrong}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, c.want, check(c.reqs...))
		})
	}
}

// TestAnswerClassifiesHTTP: 503 with Retry-After failed closed; without it, or a 500,
// wrong; a replay is known by its header.
func TestAnswerClassifiesHTTP(t *testing.T) {
	t.Parallel()
	resp := func(status int, h ...string) *http.Response {
		r := &http.Response{StatusCode: status, Header: http.Header{}}
		for i := 0; i+1 < len(h); i += 2 {
			r.Header.Set(h[i], h[i+1])
		}
		return r
	}
	assert.Equal(t, failed, history.Answer(resp(503, "Retry-After", "1"), nil, nil))
	assert.Equal(t, history.Wrong, history.Answer(resp(503), nil, nil).Kind)
	assert.Equal(t, history.Wrong, history.Answer(resp(500), nil, nil).Kind)
	assert.Equal(t, inProgress, history.Answer(resp(409), nil, nil))
	assert.Equal(t, fresh("201 x"), history.Answer(resp(201), []byte("x"), nil))
	assert.Equal(t, replayed("201 x"), history.Answer(resp(201, "Idempotent-Replayed", "true"), []byte("x"), nil))
	assert.Equal(t, history.Failed, history.Answer(nil, nil, fmt.Errorf("connection refused")).Kind)
}

// forgetful is a broken store: it acknowledges every completion and keeps none (a store
// that reads a standby which never got the write behaves the same to its clients).
type forgetful struct{ storage.Store }

func (f forgetful) Claim(ctx context.Context, c storage.Claim) (storage.Claimed, error) {
	cl, err := f.Store.Claim(ctx, c)
	if cl.Lock != nil {
		cl.Lock = forgetfulLock{cl.Lock}
	}
	return cl, err
}

type forgetfulLock struct{ storage.Lock }

func (l forgetfulLock) Complete(ctx context.Context, _ *storage.Response) error {
	return l.Release(ctx)
}

// hammer sends rounds of concurrent identical requests per key through the engine over
// store, recording each, and returns the history and the handler's runs.
func hammer(t *testing.T, store storage.Store) (*history.Recorder, int64) {
	t.Helper()
	eng, err := core.New(core.Config{Store: store})
	require.NoError(t, err)
	var runs atomic.Int64
	h := eng.Middleware(func(*http.Request) string { return "acct" })(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"run":%d}`, n)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	rec := history.NewRecorder()
	for k := range 5 {
		key := fmt.Sprintf("key-%d", k)
		for range 3 { // rounds: each starts after the last one's answers came back
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, strings.NewReader(`{"amount":1}`))
					if !assert.NoError(t, err) {
						return
					}
					req.Header.Set("Idempotency-Key", key)
					_, _, err = rec.Do(srv.Client(), key, req)
					assert.NoError(t, err)
				})
			}
			wg.Wait()
		}
	}
	return rec, runs.Load()
}

// TestHistoryOfAStoreThatKeepsItsWord: concurrent and repeated requests through the
// engine over memstore form a linearizable history: one run per key, the rest replays or
// 409s.
func TestHistoryOfAStoreThatKeepsItsWord(t *testing.T) {
	t.Parallel()
	rec, runs := hammer(t, memstore.New())
	assert.Equal(t, 60, rec.Len())
	assert.EqualValues(t, 5, runs, "one run per key")
	history.Require(t, rec)
}

// TestCheckerCatchesAStoreThatForgets: the same requests over a store that acknowledges
// completions and keeps none run the handler again after a completion was returned; the
// checker must say so.
func TestCheckerCatchesAStoreThatForgets(t *testing.T) {
	t.Parallel()
	rec, runs := hammer(t, forgetful{memstore.New()})
	require.Greater(t, runs, int64(5), "the broken store let keys run again")
	res, _ := rec.Check(history.CheckTimeout)
	assert.Equal(t, porcupine.Illegal, res)
	assert.NotEmpty(t, rec.Violations(), "the direct pass names the second runs")
}
