package grpcidem

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/idemkit/idem/internal/backoff"
)

// The defaults of ClientConfig's zero fields.
const (
	defaultMaxAttempts = 5
	defaultMaxElapsed  = 30 * time.Second
)

// ClientConfig configures the client interceptor. Its zero value is ready to use: every
// unary call gets a key in the "idempotency-key" metadata and up to 5 attempts.
type ClientConfig struct {
	// Methods lists the full method names that get a key and retries. Default (nil):
	// every unary call made through the interceptor (a key on a method the server does not
	// key is ignored there). Use it or Keyed.
	Methods []string

	// Keyed reports whether the method named fullMethod gets a key and retries. With
	// Methods too, a method is keyed when either says so.
	Keyed func(fullMethod string) bool

	// Metadata is the outgoing metadata key the key is sent in. Default: DefaultMetadata.
	Metadata string

	// Field, when set, names a string field of the request message that carries the key
	// (AIP-155's "request_id"): a request whose field is empty is sent as a copy with the
	// key set there (the caller's message is not modified); a request whose field is set
	// keeps it, and that value is the key. The key is sent in the metadata as well.
	Field protoreflect.Name

	// MaxAttempts caps the attempts of one logical call made by the interceptor, the
	// first included (gRPC's own retries, under a service config retryPolicy, happen
	// inside each and are not counted); 1 turns the interceptor's retries off.
	// Default (below 1): 5.
	MaxAttempts int

	// MaxElapsed bounds the retrying: no retry starts later than MaxElapsed after the
	// first attempt started. Default (not above 0): 30s.
	MaxElapsed time.Duration

	// InitialBackoff is the longest wait before the first retry of an answer without
	// google.rpc.RetryInfo: the wait is drawn uniformly between half of it and all of it,
	// and each later wait's range doubles, up to MaxBackoff. Default: 500ms.
	InitialBackoff time.Duration

	// MaxBackoff caps a backoff wait (a RetryInfo delay is honoured as sent, within
	// MaxElapsed and the context's deadline). Default: 8s.
	MaxBackoff time.Duration

	// OnRetry, when set, is called before each wait for a retry, on the calling goroutine.
	OnRetry func(info RetryInfo)

	// Logger, when set, gets one line per retry (Info) and one when the interceptor gives
	// up on an answer it would have retried (Warn). Default: nil, quiet.
	Logger *slog.Logger
}

// RetryInfo describes one retry, for ClientConfig.OnRetry.
type RetryInfo struct {
	// Method is the call's full method name.
	Method string
	// Key is the idempotency key every attempt sends.
	Key string
	// Attempt is the number of the attempt that failed, from 1.
	Attempt int
	// Err is that attempt's error; status.Code(Err) is its code.
	Err error
	// Wait is how long the interceptor waits before the next attempt.
	Wait time.Duration
	// FromServer reports whether Wait is the server's google.rpc.RetryInfo delay
	// (otherwise it is the backoff's).
	FromServer bool
}

// Result is what the interceptor did for one logical call. Ask for it with Report.
type Result struct {
	// Key is the idempotency key every attempt sent; empty when the method is not keyed.
	Key string
	// Attempts counts the interceptor's attempts (gRPC's own retries inside one are not
	// counted).
	Attempts int
	// Replayed reports whether the final answer carried idempotent-replayed: true: the
	// server did not run the method again but answered what an earlier attempt (or an
	// earlier call with the same key) had done.
	Replayed bool
}

type keyCtx struct{}

// WithKey returns a copy of ctx that makes the client interceptor send key as the
// idempotency key of the calls made with it (a call whose outgoing metadata has one
// already keeps its own). Keep the key with the operation (a job's ID, the outbox row) so
// that a re-run job repeats the operation instead of doing it again. An empty key is
// refused: the call fails with INVALID_ARGUMENT before it is sent.
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyCtx{}, key)
}

// NewKey returns a fresh random key (a version 4 UUID, the format AIP-155 recommends),
// the kind the interceptor generates for a call without one.
func NewKey() string { return uuid.NewString() }

// keyOption is the call option Key returns.
type keyOption struct {
	grpc.EmptyCallOption
	key string
}

// Key returns a call option that makes the client interceptor send key as the call's
// idempotency key, as WithKey does for a context: client.CreateOrder(ctx, req,
// grpcidem.Key(job.ID)). It takes precedence over WithKey.
func Key(key string) grpc.CallOption { return keyOption{key: key} }

// reportOption is the call option Report returns.
type reportOption struct {
	grpc.EmptyCallOption
	res *Result
}

// Report returns a call option that makes the client interceptor fill in *res for the
// call before it returns, whatever its outcome. Give each call its own Result.
func Report(res *Result) grpc.CallOption { return reportOption{res: res} }

// UnaryClientInterceptor returns a unary client interceptor that gives each logical call
// of a keyed method one idempotency key, chosen before the first attempt and kept by every
// retry: gRPC's own (a service config retryPolicy resends the same outgoing metadata) and
// the interceptor's. The key is the outgoing metadata's when the caller set it, else
// Key's, else WithKey's, else the request's Field when it is set, else a fresh UUID.
//
// The interceptor retries, with that key, UNAVAILABLE (the server, a proxy or the
// connection failed; idem's server answers it when its store failed), ABORTED (idem's
// "in progress"), and RESOURCE_EXHAUSTED when it carries a google.rpc.RetryInfo; never
// another code, which the server meant. The wait is the status's RetryInfo delay when it
// has one, else a jittered exponential backoff. The retries stop at MaxAttempts, at
// MaxElapsed, and when the call's context ends; a wait that would end past MaxElapsed or
// the context's deadline is not started, and the last error is returned.
//
// Chain it so that it runs before (outside) any interceptor that must see every attempt.
// It is safe for concurrent use.
func UnaryClientInterceptor(cfg ClientConfig) grpc.UnaryClientInterceptor {
	if cfg.Metadata == "" {
		cfg.Metadata = DefaultMetadata
	}
	return cfg.intercept
}

func (c *ClientConfig) keyed(method string) bool {
	if c.Methods == nil && c.Keyed == nil {
		return true
	}
	return slices.Contains(c.Methods, method) || (c.Keyed != nil && c.Keyed(method))
}

func (c *ClientConfig) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var res *Result
	for _, o := range opts {
		if r, ok := o.(reportOption); ok {
			res = r.res
		}
	}
	if !c.keyed(method) {
		return c.invoke(ctx, res, method, req, reply, cc, invoker, opts)
	}
	ctx, req, key, err := c.keyCall(ctx, req, opts)
	if err != nil {
		return err
	}
	if res != nil {
		*res = Result{Key: key}
	}
	maxAttempts := c.MaxAttempts
	if maxAttempts < 1 {
		maxAttempts = defaultMaxAttempts
	}
	maxElapsed := c.MaxElapsed
	if maxElapsed <= 0 {
		maxElapsed = defaultMaxElapsed
	}
	began := time.Now()
	for attempt := 1; ; attempt++ {
		err := c.invoke(ctx, res, method, req, reply, cc, invoker, opts)
		if res != nil {
			res.Attempts = attempt
		}
		if err == nil || ctx.Err() != nil {
			return err
		}
		wait, fromServer, again := c.retryable(err, attempt)
		if !again {
			return err
		}
		info := RetryInfo{Method: method, Key: key, Attempt: attempt, Err: err, Wait: wait, FromServer: fromServer}
		now := time.Now()
		deadline, hasDeadline := ctx.Deadline()
		var stop string
		switch {
		case attempt >= maxAttempts:
			stop = "MaxAttempts reached"
		case now.Add(wait).Sub(began) > maxElapsed:
			stop = "the wait would pass MaxElapsed"
		case hasDeadline && now.Add(wait).After(deadline):
			stop = "the wait would pass the context's deadline"
		}
		if stop != "" {
			c.log(ctx, slog.LevelWarn, "grpcidem: giving up: "+stop, info)
			return err
		}
		c.log(ctx, slog.LevelInfo, "grpcidem: retrying", info)
		if c.OnRetry != nil {
			c.OnRetry(info)
		}
		if werr := backoff.Sleep(ctx, wait); werr != nil {
			return status.FromContextError(werr).Err()
		}
	}
}

// invoke makes one attempt; with res, it reads the answer's header to learn whether it
// was a replay.
func (c *ClientConfig) invoke(ctx context.Context, res *Result, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	if res == nil {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	var header metadata.MD
	err := invoker(ctx, method, req, reply, cc, append(slices.Clip(opts), grpc.Header(&header))...)
	res.Replayed = slices.Contains(header.Get(ReplayedMetadata), "true")
	if res.Attempts == 0 {
		res.Attempts = 1 // an unkeyed call
	}
	return err
}

// keyCall chooses the call's key and returns ctx with it in the outgoing metadata and
// req with it in Field (a copy), when Field is set.
func (c *ClientConfig) keyCall(ctx context.Context, req any, opts []grpc.CallOption) (context.Context, any, string, error) {
	md, _ := metadata.FromOutgoingContext(ctx)
	if v := md.Get(c.Metadata); len(v) > 0 {
		return ctx, req, v[0], nil // the caller's own, sent as it is
	}
	key, fromField := "", false
	for _, o := range opts {
		if k, ok := o.(keyOption); ok {
			key = k.key
			if key == "" {
				return nil, nil, "", status.Error(codes.InvalidArgument, "grpcidem: Key was given an empty key")
			}
		}
	}
	if v, ok := ctx.Value(keyCtx{}).(string); ok && key == "" {
		if v == "" {
			return nil, nil, "", status.Error(codes.InvalidArgument, "grpcidem: WithKey was given an empty key")
		}
		key = v
	}
	var (
		m  protoreflect.Message
		fd protoreflect.FieldDescriptor
	)
	if c.Field != "" {
		msg, ok := req.(proto.Message)
		if !ok {
			return nil, nil, "", status.Errorf(codes.Internal, "grpcidem: the request is a %T, not a protobuf message", req)
		}
		m = msg.ProtoReflect()
		if fd = m.Descriptor().Fields().ByName(c.Field); fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() || fd.IsMap() {
			return nil, nil, "", status.Errorf(codes.Internal, "grpcidem: the request message %s has no string field %q (ClientConfig.Field)", m.Descriptor().FullName(), c.Field)
		}
		if v := m.Get(fd).String(); v != "" {
			key, fromField = v, true
		}
	}
	if key == "" {
		id, err := uuid.NewRandom()
		if err != nil {
			return nil, nil, "", status.Errorf(codes.Internal, "grpcidem: generating a key: %v", err)
		}
		key = id.String()
	}
	if fd != nil && !fromField {
		cp := proto.Clone(m.Interface())
		cp.ProtoReflect().Set(fd, protoreflect.ValueOfString(key))
		req = cp
	}
	return metadata.AppendToOutgoingContext(ctx, c.Metadata, key), req, key, nil
}

// retryable reports whether err may be cured by sending again with the same key, and
// the wait before that attempt.
func (c *ClientConfig) retryable(err error, attempt int) (wait time.Duration, fromServer, again bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, false, false
	}
	delay, hasDelay := retryDelay(st)
	switch st.Code() {
	case codes.Unavailable, codes.Aborted:
	case codes.ResourceExhausted:
		if !hasDelay {
			return 0, false, false
		}
	default:
		return 0, false, false
	}
	if hasDelay {
		return delay, true, true
	}
	return backoff.Delay(c.InitialBackoff, c.MaxBackoff, attempt), false, true
}

// retryDelay returns the delay of st's google.rpc.RetryInfo, if it carries one.
func retryDelay(st *status.Status) (time.Duration, bool) {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return max(ri.GetRetryDelay().AsDuration(), 0), true
		}
	}
	return 0, false
}

func (c *ClientConfig) log(ctx context.Context, level slog.Level, msg string, info RetryInfo) {
	if c.Logger == nil || !c.Logger.Enabled(ctx, level) {
		return
	}
	c.Logger.LogAttrs(ctx, level, msg, slog.String("method", info.Method), slog.String("key", info.Key),
		slog.Int("attempt", info.Attempt), slog.String("code", status.Code(info.Err).String()), slog.Any("error", info.Err),
		slog.Duration("wait", info.Wait), slog.Bool("from_server", info.FromServer))
}
