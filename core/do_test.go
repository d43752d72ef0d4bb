package core_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/syncbuf"
)

func newDoEngine(t *testing.T, cfg core.Config) *core.Engine {
	t.Helper()
	if cfg.Store == nil {
		cfg.Store = memstore.New()
	}
	eng, err := core.New(cfg)
	require.NoError(t, err)
	return eng
}

func TestDoRunsOnceAndReplaysTheResult(t *testing.T) {
	t.Parallel()
	eng := newDoEngine(t, core.Config{})
	var runs atomic.Int64
	apply := func(context.Context) ([]byte, error) {
		runs.Add(1)
		return []byte(`{"order":42}`), nil
	}
	res, replayed, err := eng.Do(t.Context(), "orders", "msg-1", []byte("payload"), apply)
	require.NoError(t, err)
	assert.False(t, replayed)
	assert.Equal(t, `{"order":42}`, string(res))

	for range 3 {
		res, replayed, err = eng.Do(t.Context(), "orders", "msg-1", []byte("payload"), apply)
		require.NoError(t, err)
		assert.True(t, replayed)
		assert.Equal(t, `{"order":42}`, string(res))
	}
	assert.Equal(t, int64(1), runs.Load())

	// Another scope, another message ID: another operation.
	_, replayed, err = eng.Do(t.Context(), "invoices", "msg-1", []byte("payload"), apply)
	require.NoError(t, err)
	assert.False(t, replayed)
	_, replayed, err = eng.Do(t.Context(), "orders", "msg-2", []byte("payload"), apply)
	require.NoError(t, err)
	assert.False(t, replayed)
	assert.Equal(t, int64(3), runs.Load())
}

func TestDoWithoutResultOrFingerprint(t *testing.T) {
	t.Parallel()
	eng := newDoEngine(t, core.Config{})
	var runs atomic.Int64
	for range 2 {
		res, _, err := eng.Do(t.Context(), "s", "job-7", nil, func(context.Context) ([]byte, error) {
			runs.Add(1)
			return nil, nil
		})
		require.NoError(t, err)
		assert.Empty(t, res)
	}
	assert.Equal(t, int64(1), runs.Load())
}

func TestDoRefusesAnotherFingerprint(t *testing.T) {
	t.Parallel()
	logs := &syncbuf.Buffer{}
	eng := newDoEngine(t, core.Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	ok := func(context.Context) ([]byte, error) { return []byte("done"), nil }
	_, _, err := eng.Do(t.Context(), "s", "m", []byte("a"), ok)
	require.NoError(t, err)
	for _, fp := range [][]byte{[]byte("b"), nil} {
		res, replayed, err := eng.Do(t.Context(), "s", "m", fp, func(context.Context) ([]byte, error) {
			t.Fatal("ran for a reused ID")
			return nil, nil
		})
		require.ErrorIs(t, err, core.ErrKeyReused)
		assert.False(t, replayed)
		assert.Nil(t, res)
	}
	assert.Contains(t, logs.String(), "level=WARN")
	assert.Contains(t, logs.String(), "key=m")
}

func TestDoFailureReleasesTheID(t *testing.T) {
	t.Parallel()
	eng := newDoEngine(t, core.Config{})
	errDown := errors.New("warehouse down")
	_, _, err := eng.Do(t.Context(), "s", "m", nil, func(context.Context) ([]byte, error) { return []byte("partial"), errDown })
	require.ErrorIs(t, err, errDown)
	assert.Contains(t, err.Error(), `"m"`)

	res, replayed, err := eng.Do(t.Context(), "s", "m", nil, func(context.Context) ([]byte, error) { return []byte("ok"), nil })
	require.NoError(t, err, "the redelivery runs again")
	assert.False(t, replayed)
	assert.Equal(t, "ok", string(res))
}

func TestDoPanicReleasesTheIDAndPropagates(t *testing.T) {
	t.Parallel()
	eng := newDoEngine(t, core.Config{})
	assert.PanicsWithValue(t, "boom", func() {
		_, _, _ = eng.Do(t.Context(), "s", "m", nil, func(context.Context) ([]byte, error) { panic("boom") })
	})
	_, replayed, err := eng.Do(t.Context(), "s", "m", nil, func(context.Context) ([]byte, error) { return nil, nil })
	require.NoError(t, err)
	assert.False(t, replayed)
}

func TestDoInFlightIsErrInProgress(t *testing.T) {
	t.Parallel()
	eng := newDoEngine(t, core.Config{})
	entered, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, _, err := eng.Do(t.Context(), "s", "m", nil, func(context.Context) ([]byte, error) {
			close(entered)
			<-release
			return []byte("first"), nil
		})
		done <- err
	}()
	<-entered
	_, _, err := eng.Do(t.Context(), "s", "m", nil, func(context.Context) ([]byte, error) {
		t.Fatal("ran while in flight")
		return nil, nil
	})
	require.ErrorIs(t, err, storage.ErrInProgress)
	close(release)
	require.NoError(t, <-done)
	res, replayed, err := eng.Do(t.Context(), "s", "m", nil, nil)
	require.NoError(t, err)
	assert.True(t, replayed)
	assert.Equal(t, "first", string(res))
}

func TestDoParallelDuplicatesRunOnce(t *testing.T) {
	t.Parallel()
	eng := newDoEngine(t, core.Config{LeaseWait: 5 * time.Second})
	var runs atomic.Int64
	var wg sync.WaitGroup
	results := make(chan string, 20)
	for range 20 {
		wg.Go(func() {
			res, _, err := eng.Do(t.Context(), "s", "m", []byte("p"), func(context.Context) ([]byte, error) {
				runs.Add(1)
				return []byte("r"), nil
			})
			assert.NoError(t, err)
			results <- string(res)
		})
	}
	wg.Wait()
	close(results)
	for r := range results {
		assert.Equal(t, "r", r)
	}
	assert.Equal(t, int64(1), runs.Load())
}

func TestDoRefusesABadScopeOrAMalformedID(t *testing.T) {
	t.Parallel()
	eng := newDoEngine(t, core.Config{})
	never := func(context.Context) ([]byte, error) { t.Fatal("ran"); return nil, nil }
	_, _, err := eng.Do(t.Context(), "", "m", nil, never)
	require.ErrorIs(t, err, core.ErrEmptyScope)
	for _, scope := range []string{strings.Repeat("x", core.MaxScopeLength+1), "\xff", "a\x00b"} {
		_, _, err := eng.Do(t.Context(), scope, "m", nil, never)
		require.ErrorIs(t, err, core.ErrInvalidScope, "scope %q", scope)
	}
	for _, id := range []string{"", strings.Repeat("x", 256), "é", "a\nb"} {
		_, _, err := eng.Do(t.Context(), "s", id, nil, never)
		require.ErrorIs(t, err, core.ErrInvalidKey, "id %q", id)
	}
	// MinKeyLength guards clients' keys, not the application's own message IDs.
	short := newDoEngine(t, core.Config{MinKeyLength: 16})
	_, _, err = short.Do(t.Context(), "s", "42", nil, func(context.Context) ([]byte, error) { return nil, nil })
	require.NoError(t, err)
}

func TestDoResultOverTheLimitIsNotRecorded(t *testing.T) {
	t.Parallel()
	eng := newDoEngine(t, core.Config{MaxResponseBody: 8})
	_, _, err := eng.Do(t.Context(), "s", "m", nil, func(context.Context) ([]byte, error) { return []byte("123456789"), nil })
	require.Error(t, err)
	assert.Contains(t, err.Error(), "MaxResponseBody")
	_, replayed, err := eng.Do(t.Context(), "s", "m", nil, func(context.Context) ([]byte, error) { return []byte("12345678"), nil })
	require.NoError(t, err)
	assert.False(t, replayed)
}

func TestDoCancelledBeforeFnReturnedIsNotRecorded(t *testing.T) {
	t.Parallel()
	eng := newDoEngine(t, core.Config{})
	ctx, cancel := context.WithCancel(t.Context())
	_, _, err := eng.Do(ctx, "s", "m", nil, func(context.Context) ([]byte, error) {
		cancel()
		return []byte("done"), nil
	})
	require.ErrorIs(t, err, context.Canceled)
	_, replayed, err := eng.Do(t.Context(), "s", "m", nil, func(context.Context) ([]byte, error) { return nil, nil })
	require.NoError(t, err)
	assert.False(t, replayed)
}

func TestDoStoreFailureFailsClosed(t *testing.T) {
	t.Parallel()
	errDown := errors.New("connection refused")
	eng := newDoEngine(t, core.Config{Store: &failingStore{claimErr: errDown}})
	_, _, err := eng.Do(t.Context(), "s", "m", nil, func(context.Context) ([]byte, error) {
		t.Fatal("ran unprotected")
		return nil, nil
	})
	require.ErrorIs(t, err, errDown)

	s := &failingStore{completeErr: errDown}
	eng = newDoEngine(t, core.Config{Store: s})
	_, _, err = eng.Do(t.Context(), "s", "m", nil, func(context.Context) ([]byte, error) { return []byte("x"), nil })
	require.ErrorIs(t, err, errDown)
	assert.Equal(t, int64(1), s.released.Load(), "a failed recording releases the ID")
}

func TestDoPhasesResumeAfterAFailure(t *testing.T) {
	t.Parallel()
	eng := newDoEngine(t, core.Config{})
	var charged, shipped atomic.Int64
	var derived []string
	fn := func(fail bool) func(ctx context.Context) ([]byte, error) {
		return func(ctx context.Context) ([]byte, error) {
			op := core.MustOperation(ctx)
			derived = append(derived, op.DerivedKey("charge"))
			if err := op.Phase(ctx, "charged", func(context.Context) error { charged.Add(1); return nil }); err != nil {
				return nil, err
			}
			if fail {
				return nil, errors.New("shipping service down")
			}
			if err := op.Phase(ctx, "shipped", func(context.Context) error { shipped.Add(1); return nil }); err != nil {
				return nil, err
			}
			return []byte("ok"), nil
		}
	}
	_, _, err := eng.Do(t.Context(), "s", "job-1", nil, fn(true))
	require.Error(t, err)
	_, _, err = eng.Do(t.Context(), "s", "job-1", nil, fn(false))
	require.NoError(t, err)
	assert.Equal(t, int64(1), charged.Load(), "the committed phase is not run again")
	assert.Equal(t, int64(1), shipped.Load())
	assert.Equal(t, []string{"job-1:charge", "job-1:charge"}, derived, "derived keys are stable across attempts")
}

func TestDoAndRequestsNeverShareAKey(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	eng := newDoEngine(t, core.Config{Store: store})
	h := eng.Middleware(func(*http.Request) string { return "s" })(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	r := httptest.NewRequest(http.MethodPost, "/jobs", nil)
	r.Header.Set("Idempotency-Key", "k")
	h.ServeHTTP(httptest.NewRecorder(), r)
	_, _, err := eng.Do(t.Context(), "s", "k", nil, func(context.Context) ([]byte, error) { return nil, nil })
	require.ErrorIs(t, err, core.ErrKeyReused, "a message ID never replays a request's response")
}

func TestDoHooksObserveOutcomes(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	eng := newDoEngine(t, core.Config{Hooks: core.HookFunc(func(_ context.Context, ev core.Event) {
		mu.Lock()
		defer mu.Unlock()
		assert.Empty(t, ev.Method+ev.Path)
		got = append(got, string(ev.Outcome)+" "+ev.Scope+"/"+ev.Key)
	})})
	ok := func(context.Context) ([]byte, error) { return nil, nil }
	_, _, _ = eng.Do(t.Context(), "s", "a", nil, ok)
	_, _, _ = eng.Do(t.Context(), "s", "a", nil, ok)
	_, _, _ = eng.Do(t.Context(), "s", "a", []byte("other"), ok)
	_, _, _ = eng.Do(t.Context(), "s", "b", nil, func(context.Context) ([]byte, error) { return nil, errors.New("x") })
	assert.Equal(t, []string{"claimed s/a", "completed s/a", "replayed s/a", "mismatch s/a", "claimed s/b", "rolled_back s/b"}, got)
}
