package adapter_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/adapter"
	"github.com/idemkit/idem/core/memstore"
)

// handle sends one request through adapter.Handle with a handler that answers 201 into
// the held writer, and reports the result, what reached the client and whether the
// handler ran.
func handle(t *testing.T, eng *core.Engine, method, key string) (adapter.Result, *httptest.ResponseRecorder, bool) {
	t.Helper()
	r := httptest.NewRequest(method, "/orders", strings.NewReader(`{"item":"book"}`))
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	ran := false
	res := adapter.Handle(eng, w, r, func() string { return "acct" }, func(held http.ResponseWriter, r *http.Request) {
		ran = true
		_, keyed := core.OperationFromContext(r.Context())
		assert.True(t, keyed, "next's request carries the operation")
		held.Header().Set("Location", "/orders/1")
		held.WriteHeader(http.StatusCreated)
		_, _ = held.Write([]byte(`{"id":1}`))
		assert.Zero(t, w.Body.Len(), "nothing reaches the client while the handler runs")
	})
	return res, w, ran
}

// TestHandleSaysWhatHappened: each Result is what the engine did, and next runs only for Ran.
func TestHandleSaysWhatHappened(t *testing.T) {
	t.Parallel()
	eng, err := core.New(core.Config{Store: memstore.New()})
	require.NoError(t, err)

	res, w, ran := handle(t, eng, http.MethodGet, "k1")
	assert.Equal(t, adapter.Passed, res, "GET does not take part")
	assert.False(t, ran)
	assert.False(t, w.Flushed || w.Body.Len() > 0 || len(w.Header()) > 0, "the engine wrote nothing")

	res, w, ran = handle(t, eng, http.MethodPost, "k1")
	assert.Equal(t, adapter.Ran, res)
	assert.True(t, ran)
	assert.Equal(t, http.StatusCreated, w.Code)
	assert.Equal(t, `{"id":1}`, w.Body.String(), "the recorded response reaches the client")

	res, w, ran = handle(t, eng, http.MethodPost, "k1")
	assert.Equal(t, adapter.Answered, res, "a replay")
	assert.False(t, ran)
	assert.Equal(t, http.StatusCreated, w.Code)
	assert.Equal(t, "true", w.Header().Get("Idempotent-Replayed"))
	assert.Equal(t, "/orders/1", w.Header().Get("Location"))

	res, w, ran = handle(t, eng, http.MethodPost, "")
	assert.Equal(t, adapter.Answered, res, "a missing key is a problem")
	assert.False(t, ran)
	assert.Equal(t, http.StatusBadRequest, w.Code)
}

// TestHandlePassesAnOptionalKeyThatIsAbsent: a request without its optional key is the
// adapter's to run, untouched.
func TestHandlePassesAnOptionalKeyThatIsAbsent(t *testing.T) {
	t.Parallel()
	eng, err := core.New(core.Config{Store: memstore.New(), KeyOptional: true})
	require.NoError(t, err)
	res, w, ran := handle(t, eng, http.MethodPost, "")
	assert.Equal(t, adapter.Passed, res)
	assert.False(t, ran)
	assert.Zero(t, w.Body.Len())
}

func TestResultString(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "passed ran answered Result(0)",
		strings.Join([]string{adapter.Passed.String(), adapter.Ran.String(), adapter.Answered.String(), adapter.Result(0).String()}, " "))
}
