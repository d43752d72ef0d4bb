package grpcidem_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/grpcidem"
	"github.com/idemkit/idem/internal/adaptertest"
	"github.com/idemkit/idem/internal/storekit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("github.com/jackc/puddle/v2.(*Pool).createIdleResources"))
}

// The test service is grpc's own grpc.testing.TestService (generated code, registered in
// the global registry), implemented here:
//
//   - UnaryCall and CacheableUnaryCall are keyed (both in Config.Methods); EmptyCall is not.
//   - A request's response_status, when its code is not 0, is returned as the status;
//     the message "panic" panics instead.
//   - The handler sets header metadata location (recorded and replayed) and
//     x-attempt-only (not recorded), and trailer metadata etag (recorded).
//   - In phased mode it runs the phase "charge" (counted in Charges) first; in atomic
//     mode it inserts an order through the store's transaction (Backend.Insert).
//   - The response's username is "run <n>" (n counts runs of the service), its
//     oauth_scope the operation's derived key for "charge", its payload the request's.
//
// A second service, idem.test.Orders, is described by hand (no generated code, not in
// the registry) over well-known messages: Create takes a google.rpc.RequestInfo, whose
// request_id is the AIP-155 key, and returns a google.protobuf.StringValue.

const (
	unaryCall     = "/grpc.testing.TestService/UnaryCall"
	cacheableCall = "/grpc.testing.TestService/CacheableUnaryCall"
	ordersCreate  = "/idem.test.Orders/Create"
)

type service struct {
	testpb.UnimplementedTestServiceServer
	backend *storekit.Backend // atomic mode: orders are inserted through it; nil in phased mode
	runs    atomic.Int64
	charges atomic.Int64
	entered chan struct{} // when non-nil, UnaryCall signals here, then waits on gate
	gate    chan struct{}
}

func (s *service) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	n := s.runs.Add(1)
	if s.entered != nil {
		s.entered <- struct{}{}
		<-s.gate
	}
	if err := grpc.SetHeader(ctx, metadata.Pairs("location", fmt.Sprintf("/orders/%d", n), "x-attempt-only", "1")); err != nil {
		return nil, err
	}
	if err := grpc.SetTrailer(ctx, metadata.Pairs("etag", fmt.Sprintf(`"%d"`, n))); err != nil {
		return nil, err
	}
	op, keyed := core.OperationFromContext(ctx)
	var derived string
	if keyed {
		derived = op.DerivedKey("charge")
		if s.backend != nil {
			if _, err := s.backend.Insert(ctx, op.Key()); err != nil {
				return nil, status.Errorf(codes.Internal, "insert: %v", err)
			}
		}
		if err := op.Phase(ctx, "charge", func(context.Context) error { s.charges.Add(1); return nil }); err != nil {
			return nil, status.Errorf(codes.Internal, "phase: %v", err)
		}
	}
	if st := req.GetResponseStatus(); st.GetCode() != 0 {
		if st.GetMessage() == "panic" {
			panic("the handler panicked")
		}
		return nil, status.Error(codes.Code(st.GetCode()), st.GetMessage())
	}
	return &testpb.SimpleResponse{Username: fmt.Sprintf("run %d", n), OauthScope: derived, Payload: req.GetPayload()}, nil
}

func (s *service) CacheableUnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return s.UnaryCall(ctx, req)
}

func (s *service) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	s.runs.Add(1)
	return &testpb.Empty{}, nil
}

// ordersServer is the hand-described idem.test.Orders service.
type ordersServer interface {
	Create(ctx context.Context, req *errdetails.RequestInfo) (*wrapperspb.StringValue, error)
}

var ordersDesc = grpc.ServiceDesc{
	ServiceName: "idem.test.Orders",
	HandlerType: (*ordersServer)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Create",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(errdetails.RequestInfo)
			if err := dec(in); err != nil {
				return nil, err
			}
			handler := func(ctx context.Context, req any) (any, error) {
				return srv.(ordersServer).Create(ctx, req.(*errdetails.RequestInfo))
			}
			if interceptor == nil {
				return handler(ctx, in)
			}
			return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: ordersCreate}, handler)
		},
	}},
}

type orders struct{ runs atomic.Int64 }

func (o *orders) Create(_ context.Context, req *errdetails.RequestInfo) (*wrapperspb.StringValue, error) {
	n := o.runs.Add(1)
	return wrapperspb.String(fmt.Sprintf("order %d for %s", n, req.GetServingData())), nil
}

// recovery turns a panic into INTERNAL, as a recovery interceptor does in production
// (grpc-go lets a panic crash the server).
func recovery(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = status.Errorf(codes.Internal, "panic: %v", p)
		}
	}()
	return handler(ctx, req)
}

// accountScope is the test's "authentication": the caller's account from the x-account
// metadata.
func accountScope(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-account"); len(v) == 1 {
		return v[0]
	}
	return ""
}

// testConfig is the interceptor's configuration in the tests.
func testConfig() grpcidem.Config {
	return grpcidem.Config{
		Scope:         accountScope,
		Methods:       []string{unaryCall, cacheableCall},
		ReplayHeader:  []string{"location"},
		ReplayTrailer: []string{"etag"},
	}
}

// newEngine returns an engine on store whose atomic twins wait a short LockWait for the
// call in flight before answering ABORTED. (RetryInfo carries RetryAfter in whole
// seconds, as HTTP's Retry-After: its default, 1s, is the shortest.)
func newEngine(t testing.TB, store storage.Store) *core.Engine {
	t.Helper()
	eng, err := core.New(core.Config{Store: store, LockWait: 300 * time.Millisecond})
	require.NoError(t, err)
	return eng
}

// serve starts a grpc.Server on loopback with the recovery interceptor, then the idem
// interceptor for cfg on eng, serving svc and the Orders service ord; it returns the
// server's address. The server stops at cleanup.
func serve(t testing.TB, eng *core.Engine, cfg grpcidem.Config, svc testpb.TestServiceServer, ord *orders) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(recovery, grpcidem.UnaryServerInterceptor(eng, cfg)))
	testpb.RegisterTestServiceServer(srv, svc)
	if ord != nil {
		srv.RegisterService(&ordersDesc, ord)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return ln.Addr().String()
}

// dial returns a client connection to addr with opts, closed at cleanup.
func dial(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// store is a store the gRPC tests run on.
type store struct {
	name string
	open func(t *testing.T) (storage.Store, *storekit.Backend) // the backend is nil in phased mode
}

// stores are memstore and redisstore (phased) and pgxstore (atomic, with its orders
// table).
var stores = []store{
	{"memstore", func(t *testing.T) (storage.Store, *storekit.Backend) { return adaptertest.Stores[0].Open(t), nil }},
	{"redisstore", func(t *testing.T) (storage.Store, *storekit.Backend) { return adaptertest.Stores[1].Open(t), nil }},
	{"pgxstore", func(t *testing.T) (storage.Store, *storekit.Backend) {
		b := storekit.Backends[0].Open(t)
		return b.Store, b
	}},
}

// call is one call's answer.
type call struct {
	resp    *testpb.SimpleResponse
	err     error
	header  metadata.MD
	trailer metadata.MD
}

func (c call) replayed() bool {
	return len(c.header.Get(grpcidem.ReplayedMetadata)) == 1 && c.header.Get(grpcidem.ReplayedMetadata)[0] == "true"
}

// unary calls method with req, sending key (none when "") as the account's (none when "").
func unary(t testing.TB, conn *grpc.ClientConn, method, account, key string, req *testpb.SimpleRequest, opts ...grpc.CallOption) call {
	t.Helper()
	ctx := t.Context()
	if account != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-account", account)
	}
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, grpcidem.DefaultMetadata, key)
	}
	var c call
	resp := new(testpb.SimpleResponse)
	c.err = conn.Invoke(ctx, method, req, resp, append(opts, grpc.Header(&c.header), grpc.Trailer(&c.trailer))...)
	if c.err == nil {
		c.resp = resp
	}
	return c
}

// request returns a SimpleRequest whose payload says body.
func request(body string) *testpb.SimpleRequest {
	return &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(body)}}
}

// failing returns a request that makes the handler answer code (message "panic" panics).
func failing(body string, code codes.Code, msg string) *testpb.SimpleRequest {
	r := request(body)
	r.ResponseStatus = &testpb.EchoStatus{Code: int32(code), Message: msg}
	return r
}

// errorInfo returns the ErrorInfo and RetryInfo of err's status.
func errorInfo(t testing.TB, err error) (*errdetails.ErrorInfo, *errdetails.RetryInfo) {
	t.Helper()
	var (
		info  *errdetails.ErrorInfo
		retry *errdetails.RetryInfo
	)
	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			info = d
		case *errdetails.RetryInfo:
			retry = d
		}
	}
	return info, retry
}

// requireIdemStatus asserts that err is a status of idem's with code and the reason of
// kind, and a RetryInfo exactly when retry is true.
func requireIdemStatus(t testing.TB, err error, code codes.Code, kind core.ProblemKind, retry bool) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, code, status.Code(err), "status: %v", err)
	info, ri := errorInfo(t, err)
	require.NotNil(t, info, "no ErrorInfo in %v", err)
	require.Equal(t, grpcidem.ErrorDomain, info.GetDomain())
	require.Equal(t, grpcidem.Reason(kind), info.GetReason())
	if retry {
		require.NotNil(t, ri, "no RetryInfo in %v", err)
		require.Positive(t, ri.GetRetryDelay().AsDuration())
	} else {
		require.Nil(t, ri)
	}
}
