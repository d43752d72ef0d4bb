package grpcidem_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/grpcidem"
	"github.com/idemkit/idem/redisstore"
)

// storeOnClosedPort returns a redisstore whose server does not answer: a port nothing
// listens on.
func storeOnClosedPort(t *testing.T) storage.Store {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return redisstore.New(c)
}

// AIP-155: the key is the request's request_id field. The client interceptor fills an
// empty one (in a copy), keeps a set one, and the server reads it; the service is
// described by hand (not in the registry), so the replay is the recorded bytes, which
// the client decodes into its own response type.
func TestRequestIDField(t *testing.T) {
	t.Parallel()
	ord := &orders{}
	cfg := grpcidem.Config{Scope: func(context.Context) string { return "single-tenant" }, Methods: []string{ordersCreate}, Field: "request_id"}
	addr := serve(t, newEngine(t, memstore.New()), cfg, &service{}, ord)

	plain := dial(t, addr)
	create := func(conn *grpc.ClientConn, req *errdetails.RequestInfo, opts ...grpc.CallOption) (*wrapperspb.StringValue, metadata.MD, error) {
		var header metadata.MD
		resp := new(wrapperspb.StringValue)
		err := conn.Invoke(t.Context(), ordersCreate, req, resp, append(opts, grpc.Header(&header))...)
		return resp, header, err
	}

	// Without the field: INVALID_ARGUMENT, even with the metadata (Field replaces it).
	ctx := metadata.AppendToOutgoingContext(t.Context(), grpcidem.DefaultMetadata, "k-meta")
	err := plain.Invoke(ctx, ordersCreate, &errdetails.RequestInfo{ServingData: "book"}, new(wrapperspb.StringValue))
	requireIdemStatus(t, err, codes.InvalidArgument, core.ProblemKeyMissing, false)

	req := &errdetails.RequestInfo{RequestId: "2f1e9c1a-3c4b-4d6e-8f00-aa11bb22cc33", ServingData: "book"}
	first, h1, err := create(plain, req)
	require.NoError(t, err)
	again, h2, err := create(plain, req)
	require.NoError(t, err)
	assert.Empty(t, h1.Get(grpcidem.ReplayedMetadata))
	assert.Equal(t, []string{"true"}, h2.Get(grpcidem.ReplayedMetadata))
	assert.Equal(t, "order 1 for book", first.GetValue())
	assert.Equal(t, first.GetValue(), again.GetValue())
	assert.EqualValues(t, 1, ord.runs.Load())

	// The client interceptor with Field: one key per logical call, in the field.
	keyed := dial(t, addr, grpc.WithUnaryInterceptor(grpcidem.UnaryClientInterceptor(grpcidem.ClientConfig{Field: "request_id"})))
	empty := &errdetails.RequestInfo{ServingData: "pen"}
	var res grpcidem.Result
	out, _, err := create(keyed, empty, grpcidem.Report(&res))
	require.NoError(t, err)
	assert.Equal(t, "order 2 for pen", out.GetValue())
	assert.Empty(t, empty.GetRequestId(), "the caller's message is not modified")
	assert.NotEmpty(t, res.Key)
	// The same request_id again, set by the caller: a replay.
	out, _, err = create(keyed, &errdetails.RequestInfo{RequestId: res.Key, ServingData: "pen"}, grpcidem.Report(&res))
	require.NoError(t, err)
	assert.True(t, res.Replayed)
	assert.Equal(t, "order 2 for pen", out.GetValue())
	assert.EqualValues(t, 2, ord.runs.Load())
}

// A Field the request message does not have is the server's mistake: INTERNAL.
func TestMissingFieldIsInternal(t *testing.T) {
	t.Parallel()
	svc := &service{}
	cfg := testConfig()
	cfg.Field = "request_id"
	conn := dial(t, serve(t, newEngine(t, memstore.New()), cfg, svc, nil))
	requireIdemStatus(t, unary(t, conn, unaryCall, "acme", "k", request("book")).err, codes.Internal, core.ProblemMisconfigured, false)
	assert.EqualValues(t, 0, svc.runs.Load())
}

// The client interceptor keeps one key across its own retries: a call that finds its
// twin in progress (ABORTED with RetryInfo) is retried with the same key and gets the
// twin's answer as a replay. WithKey sets the key through the context.
func TestClientRetriesInProgressWithTheSameKey(t *testing.T) {
	t.Parallel()
	svc := &service{entered: make(chan struct{}), gate: make(chan struct{})}
	addr := serve(t, newEngine(t, memstore.New()), testConfig(), svc, nil)
	var retries []grpcidem.RetryInfo
	var once sync.Once
	conn := dial(t, addr, grpc.WithUnaryInterceptor(grpcidem.UnaryClientInterceptor(grpcidem.ClientConfig{
		MaxAttempts: 100,
		OnRetry: func(info grpcidem.RetryInfo) {
			retries = append(retries, info)
			once.Do(func() { close(svc.gate) }) // the twin was answered ABORTED: let the first finish
		},
	})))
	ctx := grpcidem.WithKey(t.Context(), "k-job-42")
	var first call
	var wg sync.WaitGroup
	wg.Go(func() { first = unary(t, conn, unaryCall, "acme", "", request("book"), grpcidem.Key("k-job-42")) })
	<-svc.entered
	var res grpcidem.Result
	resp := new(testpb.SimpleResponse)
	err := conn.Invoke(metadata.AppendToOutgoingContext(ctx, "x-account", "acme"), unaryCall, request("book"), resp, grpcidem.Report(&res))
	wg.Wait()
	require.NoError(t, err)
	require.NoError(t, first.err)
	assert.Equal(t, "run 1", resp.GetUsername())
	assert.True(t, res.Replayed)
	assert.Equal(t, "k-job-42", res.Key)
	assert.GreaterOrEqual(t, res.Attempts, 2)
	require.NotEmpty(t, retries)
	assert.Equal(t, codes.Aborted, status.Code(retries[0].Err))
	assert.True(t, retries[0].FromServer, "the wait is the server's RetryInfo")
	assert.Equal(t, "k-job-42", retries[0].Key)
	assert.EqualValues(t, 1, svc.runs.Load())
}

// Codes the server meant are not retried: a RESOURCE_EXHAUSTED without RetryInfo, an
// INVALID_ARGUMENT.
func TestClientDoesNotRetryWhatTheServerMeant(t *testing.T) {
	t.Parallel()
	svc := &service{}
	conn := dial(t, serve(t, newEngine(t, memstore.New()), testConfig(), svc, nil),
		grpc.WithUnaryInterceptor(grpcidem.UnaryClientInterceptor(grpcidem.ClientConfig{})))
	for _, code := range []codes.Code{codes.ResourceExhausted, codes.InvalidArgument} {
		var res grpcidem.Result
		c := unary(t, conn, unaryCall, "acme", "", failing("book", code, "no"), grpcidem.Report(&res))
		assert.Equal(t, code, status.Code(c.err))
		assert.Equal(t, 1, res.Attempts, code.String())
	}
	assert.EqualValues(t, 2, svc.runs.Load())
}

// core, the HTTP adapters and the stores do not import gRPC: an HTTP-only application
// does not compile it in.
func TestHTTPPackagesDoNotImportGRPC(t *testing.T) {
	t.Parallel()
	pkgs := []string{"core", "core/memstore", "core/storage", "ginidem", "echoidem", "pgxstore", "gormstore", "redisstore", "idemclient"}
	args := []string{"list", "-deps"}
	for _, p := range pkgs {
		args = append(args, "github.com/idemkit/idem/"+p)
	}
	out, err := exec.CommandContext(t.Context(), "go", args...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/idemkit/idem/core")
	for _, d := range deps {
		assert.False(t, strings.HasPrefix(d, "google.golang.org/grpc") || strings.HasPrefix(d, "google.golang.org/genproto"), "%s is imported", d)
	}
}

// The client interceptor's retries stop at MaxAttempts: the last error comes back as it
// came, and every attempt sent the same key (the handler's UNAVAILABLE released it, so
// each ran).
func TestClientStopsAtMaxAttempts(t *testing.T) {
	t.Parallel()
	svc := &service{}
	var keys []string
	conn := dial(t, serve(t, newEngine(t, memstore.New()), testConfig(), svc, nil),
		grpc.WithUnaryInterceptor(grpcidem.UnaryClientInterceptor(grpcidem.ClientConfig{
			MaxAttempts: 3, InitialBackoff: time.Millisecond,
			OnRetry: func(info grpcidem.RetryInfo) { keys = append(keys, info.Key) },
		})))
	var res grpcidem.Result
	c := unary(t, conn, unaryCall, "acme", "", failing("book", codes.Unavailable, "down"), grpcidem.Report(&res))
	assert.Equal(t, codes.Unavailable, status.Code(c.err))
	assert.Equal(t, "down", status.Convert(c.err).Message())
	assert.Equal(t, 3, res.Attempts)
	assert.Equal(t, []string{res.Key, res.Key}, keys)
	assert.EqualValues(t, 3, svc.runs.Load())
}

// One engine serves HTTP and gRPC: the same key in the same scope is one key space, so a
// gRPC call and an HTTP request under one key are two different requests (KEY_REUSED on
// one side, 422 on the other), never two runs of one operation.
func TestOneEngineForHTTPAndGRPC(t *testing.T) {
	t.Parallel()
	eng := newEngine(t, memstore.New())
	svc := &service{}
	conn := dial(t, serve(t, eng, testConfig(), svc, nil))
	var httpRuns atomic.Int64
	h := eng.Middleware(func(r *http.Request) string { return r.Header.Get("X-Account") })(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httpRuns.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	post := func(key string) int {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":"book"}`))
		r.Header.Set("Idempotency-Key", key)
		r.Header.Set("X-Account", "acme")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}

	require.NoError(t, unary(t, conn, unaryCall, "acme", "k-grpc-first", request("book")).err)
	assert.Equal(t, http.StatusUnprocessableEntity, post("k-grpc-first"))

	assert.Equal(t, http.StatusCreated, post("k-http-first"))
	requireIdemStatus(t, unary(t, conn, unaryCall, "acme", "k-http-first", request("book")).err, codes.FailedPrecondition, core.ProblemKeyReused, false)
	assert.EqualValues(t, 1, svc.runs.Load())
	assert.EqualValues(t, 1, httpRuns.Load())
}
