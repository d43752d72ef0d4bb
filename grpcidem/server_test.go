package grpcidem_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/grpcidem"
)

// TestContract runs the key contract through a real gRPC server and client on every
// store: memstore and redisstore in phased mode, pgxstore in atomic mode.
func TestContract(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			open := func(t *testing.T) (*service, *grpc.ClientConn) {
				s, b := st.open(t)
				svc := &service{backend: b}
				return svc, dial(t, serve(t, newEngine(t, s), testConfig(), svc, nil))
			}
			t.Run("RepeatGetsTheRecordedAnswer", func(t *testing.T) { t.Parallel(); repeatGetsTheRecordedAnswer(t, open) })
			t.Run("ChangedRequestIsFailedPrecondition", func(t *testing.T) { t.Parallel(); changedRequestIsFailedPrecondition(t, open) })
			t.Run("MissingOrMalformedKeyIsInvalidArgument", func(t *testing.T) { t.Parallel(); missingOrMalformedKey(t, open) })
			t.Run("FinalStatusIsReplayed", func(t *testing.T) { t.Parallel(); finalStatusIsReplayed(t, open) })
			t.Run("TransientStatusReleasesTheKey", func(t *testing.T) { t.Parallel(); transientStatusReleases(t, open) })
			t.Run("InProgressIsAbortedWithRetryInfo", func(t *testing.T) { t.Parallel(); inProgressIsAborted(t, open) })
			t.Run("ScopesAreIsolated", func(t *testing.T) { t.Parallel(); scopesAreIsolated(t, open) })
			t.Run("MethodsOptIn", func(t *testing.T) { t.Parallel(); methodsOptIn(t, open) })
			t.Run("EmptyScopeIsInternal", func(t *testing.T) { t.Parallel(); emptyScopeIsInternal(t, open) })
		})
	}
}

type opener func(t *testing.T) (*service, *grpc.ClientConn)

// The first call's answer is the handler's, with all its metadata; a repeat gets the
// recorded message, the named metadata and idempotent-replayed: true, and the handler
// does not run again.
func repeatGetsTheRecordedAnswer(t *testing.T, open opener) {
	svc, conn := open(t)
	first := unary(t, conn, unaryCall, "acme", "k-first", request("book"))
	require.NoError(t, first.err)
	assert.False(t, first.replayed())
	assert.Equal(t, "run 1", first.resp.GetUsername())
	assert.Equal(t, "k-first:charge", first.resp.GetOauthScope(), "the handler sees the operation")
	assert.Equal(t, []string{"/orders/1"}, first.header.Get("location"))
	assert.Equal(t, []string{"1"}, first.header.Get("x-attempt-only"))
	assert.Equal(t, []string{`"1"`}, first.trailer.Get("etag"))

	again := unary(t, conn, unaryCall, "acme", "k-first", request("book"))
	require.NoError(t, again.err)
	assert.True(t, again.replayed())
	assert.True(t, proto.Equal(first.resp, again.resp), "replay %v, first %v", again.resp, first.resp)
	assert.Equal(t, []string{"/orders/1"}, again.header.Get("location"))
	assert.Empty(t, again.header.Get("x-attempt-only"), "not in ReplayHeader: not recorded")
	assert.Equal(t, []string{`"1"`}, again.trailer.Get("etag"))
	assert.EqualValues(t, 1, svc.runs.Load())
	assert.EqualValues(t, 1, svc.charges.Load())
	if svc.backend != nil {
		assert.Equal(t, 1, svc.backend.Orders(t, "k-first"), "the order committed with the key")
	}
}

// The same key with another message, or another method, is refused with
// FAILED_PRECONDITION (KEY_REUSED), and nothing runs; field order does not matter.
func changedRequestIsFailedPrecondition(t *testing.T, open opener) {
	svc, conn := open(t)
	req := request("book")
	req.ResponseSize, req.FillUsername = 7, true
	require.NoError(t, unary(t, conn, unaryCall, "acme", "k-reused", req).err)

	// The same message, encoded with its fields in another order, is the same request.
	same := &testpb.SimpleRequest{FillUsername: true, ResponseSize: 7, Payload: &testpb.Payload{Body: []byte("book")}}
	c := unary(t, conn, unaryCall, "acme", "k-reused", same)
	require.NoError(t, c.err)
	assert.True(t, c.replayed())

	c = unary(t, conn, unaryCall, "acme", "k-reused", request("pen"))
	requireIdemStatus(t, c.err, codes.FailedPrecondition, core.ProblemKeyReused, false)
	c = unary(t, conn, cacheableCall, "acme", "k-reused", req)
	requireIdemStatus(t, c.err, codes.FailedPrecondition, core.ProblemKeyReused, false)
	assert.EqualValues(t, 1, svc.runs.Load())
}

// A keyed method without a key, or with a malformed one, is INVALID_ARGUMENT and does
// not run.
func missingOrMalformedKey(t *testing.T, open opener) {
	svc, conn := open(t)
	requireIdemStatus(t, unary(t, conn, unaryCall, "acme", "", request("book")).err, codes.InvalidArgument, core.ProblemKeyMissing, false)
	requireIdemStatus(t, unary(t, conn, unaryCall, "acme", "k-a,k-b", request("book")).err, codes.InvalidArgument, core.ProblemKeyInvalid, false)
	requireIdemStatus(t, unary(t, conn, unaryCall, "acme", strings.Repeat("k", core.MaxKeyLength+1), request("book")).err, codes.InvalidArgument, core.ProblemKeyInvalid, false)
	twice := metadata.AppendToOutgoingContext(t.Context(), "x-account", "acme", grpcidem.DefaultMetadata, "k-a", grpcidem.DefaultMetadata, "k-b")
	requireIdemStatus(t, conn.Invoke(twice, unaryCall, request("book"), new(testpb.SimpleResponse)), codes.InvalidArgument, core.ProblemKeyInvalid, false)
	assert.EqualValues(t, 0, svc.runs.Load())
}

// A final status of the handler (NOT_FOUND) is recorded like a 4xx: the repeat gets it
// back, marked replayed, without running; in atomic mode the handler's writes commit.
func finalStatusIsReplayed(t *testing.T, open opener) {
	svc, conn := open(t)
	first := unary(t, conn, unaryCall, "acme", "k-final", failing("book", codes.NotFound, "no such shelf"))
	require.Equal(t, codes.NotFound, status.Code(first.err))
	assert.False(t, first.replayed())
	again := unary(t, conn, unaryCall, "acme", "k-final", failing("book", codes.NotFound, "no such shelf"))
	require.Equal(t, codes.NotFound, status.Code(again.err))
	assert.Equal(t, "no such shelf", status.Convert(again.err).Message())
	assert.True(t, again.replayed())
	assert.Equal(t, []string{"/orders/1"}, again.header.Get("location"))
	assert.EqualValues(t, 1, svc.runs.Load())
	if svc.backend != nil {
		assert.Equal(t, 1, svc.backend.Orders(t, "k-final"))
	}
}

// A transient status (UNAVAILABLE, INTERNAL, UNKNOWN, RESOURCE_EXHAUSTED) or a panic
// releases the key like a 5xx: the client gets the handler's status, and a retry runs
// again. In atomic mode the handler's writes roll back; in phased mode the committed
// phase is not run again.
func transientStatusReleases(t *testing.T, open opener) {
	for _, tc := range []struct {
		code codes.Code
		msg  string
	}{{codes.Unavailable, "try later"}, {codes.Internal, "bug"}, {codes.Unknown, "plain error"}, {codes.ResourceExhausted, "quota"}, {codes.Internal, "panic"}} {
		t.Run(tc.code.String()+"/"+tc.msg, func(t *testing.T) {
			svc, conn := open(t)
			first := unary(t, conn, unaryCall, "acme", "k-transient", failing("book", tc.code, tc.msg))
			require.Equal(t, tc.code, status.Code(first.err), "%v", first.err)
			if tc.msg != "panic" {
				assert.Equal(t, tc.msg, status.Convert(first.err).Message(), "the handler's status as it made it")
				assert.Equal(t, []string{"/orders/1"}, first.header.Get("location"), "the handler's metadata is sent")
			}
			again := unary(t, conn, unaryCall, "acme", "k-transient", failing("book", tc.code, tc.msg))
			require.Equal(t, tc.code, status.Code(again.err))
			assert.False(t, again.replayed())
			assert.EqualValues(t, 2, svc.runs.Load(), "the key was released: the retry ran")
			if svc.backend != nil {
				assert.Equal(t, 0, svc.backend.Orders(t, "k-transient"), "both attempts rolled back")
			} else {
				assert.EqualValues(t, 1, svc.charges.Load(), "the committed phase is not run again")
			}
		})
	}
}

// A repeat while the first call runs is ABORTED (IN_PROGRESS) with a RetryInfo, after
// waiting for it in atomic mode (LockWait); once the first has finished, the repeat gets
// its answer.
func inProgressIsAborted(t *testing.T, open opener) {
	svc, conn := open(t)
	svc.entered, svc.gate = make(chan struct{}), make(chan struct{})
	var first call
	var wg sync.WaitGroup
	wg.Go(func() { first = unary(t, conn, unaryCall, "acme", "k-busy", request("book")) })
	<-svc.entered
	twin := unary(t, conn, unaryCall, "acme", "k-busy", request("book"))
	requireIdemStatus(t, twin.err, codes.Aborted, core.ProblemInProgress, true)
	close(svc.gate)
	wg.Wait()
	require.NoError(t, first.err)
	svc.entered = nil
	again := unary(t, conn, unaryCall, "acme", "k-busy", request("book"))
	require.NoError(t, again.err)
	assert.True(t, again.replayed())
	assert.EqualValues(t, 1, svc.runs.Load())
}

// One key in two scopes is two operations.
func scopesAreIsolated(t *testing.T, open opener) {
	svc, conn := open(t)
	a := unary(t, conn, unaryCall, "acme", "k-shared", request("book"))
	b := unary(t, conn, unaryCall, "globex", "k-shared", request("book"))
	require.NoError(t, a.err)
	require.NoError(t, b.err)
	assert.False(t, b.replayed())
	assert.NotEqual(t, a.resp.GetUsername(), b.resp.GetUsername())
	assert.EqualValues(t, 2, svc.runs.Load())
}

// A method that is not keyed runs as usual, with or without a key, every time.
func methodsOptIn(t *testing.T, open opener) {
	svc, conn := open(t)
	for range 2 {
		require.NoError(t, conn.Invoke(t.Context(), "/grpc.testing.TestService/EmptyCall", &testpb.Empty{}, &testpb.Empty{}))
	}
	assert.EqualValues(t, 2, svc.runs.Load())
}

// An empty scope (the interceptor chained before authentication) is the server's
// mistake: INTERNAL (MISCONFIGURED), and nothing runs.
func emptyScopeIsInternal(t *testing.T, open opener) {
	svc, conn := open(t)
	c := unary(t, conn, unaryCall, "", "k-noscope", request("book"))
	requireIdemStatus(t, c.err, codes.Internal, core.ProblemMisconfigured, false)
	assert.EqualValues(t, 0, svc.runs.Load())
}

// Twenty identical calls in parallel, through the client interceptor (which retries
// ABORTED after its RetryInfo): the method runs once, one answer is the original and the
// nineteen others are replays of it.
func TestParallelIdenticalCallsRunOnce(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			s, b := st.open(t)
			svc := &service{backend: b}
			conn := dial(t, serve(t, newEngine(t, s), testConfig(), svc, nil),
				grpc.WithUnaryInterceptor(grpcidem.UnaryClientInterceptor(grpcidem.ClientConfig{MaxAttempts: 100})))
			const n = 20
			calls := make([]call, n)
			results := make([]grpcidem.Result, n)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					<-start
					calls[i] = unary(t, conn, unaryCall, "acme", "", request("book"), grpcidem.Key("k-parallel"), grpcidem.Report(&results[i]))
				})
			}
			close(start)
			wg.Wait()
			originals := 0
			for i, c := range calls {
				require.NoError(t, c.err, "call %d", i)
				assert.Equal(t, "run 1", c.resp.GetUsername(), "call %d", i)
				assert.Equal(t, "k-parallel", results[i].Key)
				assert.Equal(t, c.replayed(), results[i].Replayed)
				if !c.replayed() {
					originals++
				}
			}
			assert.Equal(t, 1, originals)
			assert.EqualValues(t, 1, svc.runs.Load())
			if b != nil {
				assert.Equal(t, 1, b.Orders(t, "k-parallel"))
			}
		})
	}
}

// A store that cannot be reached: UNAVAILABLE (STORE_UNAVAILABLE) with a RetryInfo, and
// the method does not run unprotected.
func TestStoreUnavailableIsUnavailable(t *testing.T) {
	t.Parallel()
	b := storeOnClosedPort(t)
	svc := &service{}
	conn := dial(t, serve(t, newEngine(t, b), testConfig(), svc, nil))
	c := unary(t, conn, unaryCall, "acme", "k-down", request("book"))
	requireIdemStatus(t, c.err, codes.Unavailable, core.ProblemStoreUnavailable, true)
	assert.EqualValues(t, 0, svc.runs.Load())
}
