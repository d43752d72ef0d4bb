package grpcidem_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/grpcidem"
)

// An invalid Config is a programming error: UnaryServerInterceptor and Config.Policy
// panic with an error wrapping core.ErrInvalidConfig that names the field.
func TestInvalidConfigNamesTheField(t *testing.T) {
	t.Parallel()
	eng := newEngine(t, memstore.New())
	scope := func(context.Context) string { return "s" }
	for field, tc := range map[string]struct {
		eng *core.Engine
		cfg grpcidem.Config
	}{
		"engine":           {nil, grpcidem.Config{Scope: scope, Methods: []string{unaryCall}}},
		"Scope":            {eng, grpcidem.Config{Methods: []string{unaryCall}}},
		"Methods or Keyed": {eng, grpcidem.Config{Scope: scope}},
		"Methods:":         {eng, grpcidem.Config{Scope: scope, Methods: []string{"UnaryCall"}}},
		"Metadata":         {eng, grpcidem.Config{Scope: scope, Methods: []string{unaryCall}, Metadata: "Idempotency-Key"}},
		"Field":            {eng, grpcidem.Config{Scope: scope, Methods: []string{unaryCall}, Field: "request-id"}},
		"ReplayHeader":     {eng, grpcidem.Config{Scope: scope, Methods: []string{unaryCall}, ReplayHeader: []string{"Location"}}},
	} {
		for _, build := range []func(){
			func() { grpcidem.UnaryServerInterceptor(tc.eng, tc.cfg) },
			func() { tc.cfg.Policy(tc.eng) },
		} {
			err := panicked(build)
			require.ErrorIs(t, err, core.ErrInvalidConfig, field)
			assert.Contains(t, err.Error(), field)
		}
	}
}

// An outcome over MaxResponseBody is sent whole to the first call and not kept: a
// repeat gets FAILED_PRECONDITION (RESPONSE_TOO_LARGE) and the method never runs again.
func TestResponseTooLargeIsNotRunAgain(t *testing.T) {
	t.Parallel()
	eng, err := core.New(core.Config{Store: memstore.New(), MaxResponseBody: 128})
	require.NoError(t, err)
	svc := &service{}
	conn := dial(t, serve(t, eng, testConfig(), svc, nil))
	big := request(string(make([]byte, 512)))
	first := unary(t, conn, unaryCall, "acme", "k-big", big)
	require.NoError(t, first.err)
	assert.Len(t, first.resp.GetPayload().GetBody(), 512)
	again := unary(t, conn, unaryCall, "acme", "k-big", big)
	requireIdemStatus(t, again.err, codes.FailedPrecondition, core.ProblemResponseTooLarge, false)
	assert.True(t, again.replayed())
	assert.Equal(t, []string{"/orders/1"}, again.header.Get("location"), "the named metadata is kept")
	assert.EqualValues(t, 1, svc.runs.Load())
}

// panicked runs f and returns the error it panicked with, nil if it did not panic.
func panicked(f func()) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err, _ = p.(error)
		}
	}()
	f()
	return nil
}

// With core.Config.KeyOptional (AIP-155's optional request IDs), a keyed method called
// without a key runs unprotected, every time; with a key it is guarded as usual.
func TestKeyOptionalRunsUnkeyedCalls(t *testing.T) {
	t.Parallel()
	eng, err := core.New(core.Config{Store: memstore.New(), KeyOptional: true})
	require.NoError(t, err)
	svc := &service{}
	conn := dial(t, serve(t, eng, testConfig(), svc, nil))
	for range 2 {
		c := unary(t, conn, unaryCall, "acme", "", request("book"))
		require.NoError(t, c.err)
		assert.Empty(t, c.resp.GetOauthScope(), "no operation in the handler's context")
	}
	for range 2 {
		require.NoError(t, unary(t, conn, unaryCall, "acme", "k-opt", request("book")).err)
	}
	assert.EqualValues(t, 3, svc.runs.Load())
}
