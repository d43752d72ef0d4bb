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

// An invalid Config is an error wrapping core.ErrInvalidConfig that names the field, and
// UnaryServerInterceptor panics with it.
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
		_, err := tc.cfg.ToInterceptor(tc.eng)
		require.ErrorIs(t, err, core.ErrInvalidConfig, field)
		assert.Contains(t, err.Error(), field)
		assert.Panics(t, func() { grpcidem.UnaryServerInterceptor(tc.eng, tc.cfg) }, field)
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
