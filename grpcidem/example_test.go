package grpcidem_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/grpcidem"
)

// orderService is an application's service: grpc's own TestService stands in for one
// generated from the application's .proto.
type orderService struct {
	testpb.UnimplementedTestServiceServer
	orders atomic.Int64
}

func (s *orderService) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	n := s.orders.Add(1) // in production: write through pgxstore.MustTx(ctx) in the same transaction
	_ = grpc.SetHeader(ctx, metadata.Pairs("location", fmt.Sprintf("/orders/%d", n)))
	return &testpb.SimpleResponse{Username: fmt.Sprintf("order %d", n)}, nil
}

// account is the application's authentication: here, the x-account metadata.
func account(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-account"); len(v) == 1 {
		return v[0]
	}
	return ""
}

// A keyed method runs once per idempotency key: the retry gets the first answer again,
// with idempotent-replayed: true in its header metadata.
func ExampleUnaryServerInterceptor() {
	// snippet:begin server
	eng, err := core.New(core.Config{Store: memstore.New()}) // the engine the HTTP routes use too
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
		// your authentication interceptor first, then:
		grpcidem.UnaryServerInterceptor(eng, grpcidem.Config{
			Scope:        account,
			Methods:      []string{"/grpc.testing.TestService/UnaryCall"},
			ReplayHeader: []string{"location"},
		}),
	))
	// snippet:end server
	svc := &orderService{}
	testpb.RegisterTestServiceServer(srv, svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := testpb.NewTestServiceClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-account", "acme", "idempotency-key", "8e0f5b3c-order-1")
	for range 2 {
		var header metadata.MD
		resp, err := client.UnaryCall(ctx, &testpb.SimpleRequest{FillUsername: true}, grpc.Header(&header))
		fmt.Println(resp.GetUsername(), header.Get("location"), header.Get("idempotent-replayed"), err)
	}
	fmt.Println("orders created:", svc.orders.Load())
	// Output:
	// order 1 [/orders/1] [] <nil>
	// order 1 [/orders/1] [true] <nil>
	// orders created: 1
}

// The client interceptor gives each logical call one key, sent before the first attempt
// so that gRPC's own retries keep it, and retries UNAVAILABLE and ABORTED with it. A job
// that may run twice sends its own ID as the key.
func ExampleUnaryClientInterceptor() {
	eng, err := core.New(core.Config{Store: memstore.New()})
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(grpcidem.UnaryServerInterceptor(eng, grpcidem.Config{
		Scope:   func(context.Context) string { return "single-tenant" },
		Methods: []string{"/grpc.testing.TestService/UnaryCall"},
	})))
	svc := &orderService{}
	testpb.RegisterTestServiceServer(srv, svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	// snippet:begin client
	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpcidem.UnaryClientInterceptor(grpcidem.ClientConfig{})))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := testpb.NewTestServiceClient(conn)

	jobID := "job-42" // the job's own ID: a re-run of the job repeats the call
	for range 2 {
		var res grpcidem.Result
		resp, err := client.UnaryCall(context.Background(), &testpb.SimpleRequest{}, grpcidem.Key(jobID), grpcidem.Report(&res))
		fmt.Println(resp.GetUsername(), res.Key, res.Replayed, err)
	}
	// snippet:end client

	// Output:
	// order 1 job-42 false <nil>
	// order 1 job-42 true <nil>
}

// FinalCode is the one mapping of the handler's status codes: recorded and replayed (like
// a 4xx), or released so that a retry runs again (like a 5xx).
func ExampleFinalCode() {
	for _, c := range []codes.Code{codes.OK, codes.NotFound, codes.FailedPrecondition, codes.Unavailable, codes.Internal, codes.Aborted} {
		fmt.Println(c, grpcidem.FinalCode(c))
	}
	// Output:
	// OK true
	// NotFound true
	// FailedPrecondition true
	// Unavailable false
	// Internal false
	// Aborted false
}

// The policy of a gRPC method is policy.Policy data (core/policy), and Policy.Markdown writes its record.
func ExampleConfig_Policy() {
	eng, err := core.New(core.Config{Store: memstore.New()})
	if err != nil {
		panic(err)
	}
	p := grpcidem.Config{
		Scope:         account,
		Methods:       []string{"/shop.v1.Orders/CreateOrder"},
		ReplayHeader:  []string{"location"},
		ReplayTrailer: []string{"etag"},
	}.Policy(eng)
	p.Scope = "the account the caller authenticated as"
	fmt.Print(p.Markdown("/shop.v1.Orders/CreateOrder"))
	// Output:
	// ### Idempotency for /shop.v1.Orders/CreateOrder
	//
	// - **Mechanism:** idem, phased mode: the claim commits with a 60s lease, each named phase commits with its recovery point, and a retry after a crash takes over once the lease has passed and resumes after the last committed phase.
	// - **Key:** the `idempotency-key` header, required on /shop.v1.Orders/CreateOrder; 1–255 characters of printable ASCII: the metadata value as it is (no RFC 8941 quoting); one value only, no commas.
	// - **Scope and retention:** keys belong to the account the caller authenticated as and never collide across scopes; a key is kept 24h (86400 seconds), then counts as absent and a retry runs again.
	// - **Fingerprint:** method, message; the request message's deterministic protobuf encoding (proto.MarshalOptions{Deterministic: true}): the order of fields on the wire does not matter, any changed field does. The same key with another fingerprint is refused.
	// - **Stored:** statuses OK, INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED, FAILED_PRECONDITION, OUT_OF_RANGE, UNAUTHENTICATED; headers `location`, `etag (trailer)`; request bodies up to 4194304 bytes, recorded response bodies up to 1048576 bytes.
	// - **Responses:**
	//
	//   | case | status | problem | headers |
	//   | --- | --- | --- | --- |
	//   | A new key: the handler runs once; an outcome whose code is stored is recorded (with the response message and the named metadata) before it is sent. | the handler's |  |  |
	//   | The same key and request after the first completed: the recorded response message or status, with the named header and trailer metadata. | the handler's |  | `idempotent-replayed: true` |
	//   | The handler returned a code that is not stored (CANCELLED, UNKNOWN, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS) or panicked: the answer is sent once and the key released, so a retry with it runs again. | the handler's |  |  |
	//   | ABORTED: the same key and request while the first is still running: this status at once, with a google.rpc.RetryInfo of 1s. A retry with the same key gets the outcome once there is one. | 10 | [in-progress](https://github.com/idemkit/idem/blob/main/docs/problems.md#in-progress) |  |
	//   | FAILED_PRECONDITION: the key was first used with another method or request message: nothing runs. | 9 | [key-reused](https://github.com/idemkit/idem/blob/main/docs/problems.md#key-reused) |  |
	//   | INVALID_ARGUMENT: a keyed method called without metadata "idempotency-key": nothing runs. | 3 | [key-missing](https://github.com/idemkit/idem/blob/main/docs/problems.md#key-missing) |  |
	//   | INVALID_ARGUMENT: a malformed key (not 1–255 characters of printable ASCII, more than one value, or a comma in it): nothing runs. | 3 | [key-invalid](https://github.com/idemkit/idem/blob/main/docs/problems.md#key-invalid) |  |
	//   | UNAVAILABLE: the key store failed or did not answer in time: the method did not run (fail closed), with a google.rpc.RetryInfo of 1s. Retry with the same key. | 14 | [store-unavailable](https://github.com/idemkit/idem/blob/main/docs/problems.md#store-unavailable) |  |
	//   | UNAVAILABLE: the call collided with a concurrent twin and was rolled back, with a google.rpc.RetryInfo of 1s. Retry with the same key. | 14 | [collision](https://github.com/idemkit/idem/blob/main/docs/problems.md#collision) |  |
	//   | UNAVAILABLE: the outcome could not be recorded or confirmed: nothing was kept, with a google.rpc.RetryInfo of 1s. Retry with the same key. | 14 | [not-recorded](https://github.com/idemkit/idem/blob/main/docs/problems.md#not-recorded) |  |
	//   | FAILED_PRECONDITION: a retry of a call whose recorded outcome was over 1048576 bytes: it happened once and does not run again, and there is nothing to replay. Do not retry. | 9 | [response-too-large](https://github.com/idemkit/idem/blob/main/docs/problems.md#response-too-large) |  |
	//   | INTERNAL: a server misconfiguration (an empty or unusable scope, a Config.Field the request lacks, a request or response that is not a protobuf message): nothing runs. | 13 | [misconfigured](https://github.com/idemkit/idem/blob/main/docs/problems.md#misconfigured) |  |
	//   | INTERNAL: a resumed operation whose handler no longer runs the phase an earlier attempt committed: nothing is recorded. | 13 | [cannot-resume](https://github.com/idemkit/idem/blob/main/docs/problems.md#cannot-resume) |  |
	//
	// - **Downstream keys:** `<key>:<suffix>` (`Operation.DerivedKey`), or `<scope id>:<key>:<suffix>` for a provider account several scopes share (`Operation.ScopedDerivedKey`); this endpoint lists none.
	// - **Tests:** none listed.
}
