package grpcidem

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
)

// DefaultMetadata is the metadata key the idempotency key is read from (server) and sent
// in (client) unless a Config names another. gRPC metadata keys are lower case.
const DefaultMetadata = "idempotency-key"

// ReplayedMetadata is the header metadata key, with the value "true", of an answer the
// server replayed from a finished earlier call instead of running the method again.
const ReplayedMetadata = "idempotent-replayed"

// Config configures the server interceptor. Scope and one of Methods or Keyed are
// required; every other field has the default its comment states.
type Config struct {
	// Scope names the caller a key belongs to (account, API key, tenant), read from the
	// call's context after authentication (what your auth interceptor stored there, or
	// peer and metadata). Keys never collide across scopes; a single-tenant service
	// returns a constant. A scope of "" refuses the call with INTERNAL (the interceptor
	// ran before authentication) instead of sharing one key space between callers; so
	// does a scope no store can hold (core.MaxScopeLength). Required.
	Scope func(ctx context.Context) string

	// Methods lists the full method names ("/shop.v1.Orders/CreateOrder", as
	// grpc.UnaryServerInfo.FullMethod spells them) that take part. Other methods pass
	// through untouched. Use it or Keyed; with both, a method takes part when either
	// says so.
	Methods []string

	// Keyed reports whether the method named fullMethod takes part. Use it or Methods.
	Keyed func(fullMethod string) bool

	// Metadata is the incoming metadata key the idempotency key is read from, in lower
	// case. It is ignored when Field is set. Default: DefaultMetadata ("idempotency-key").
	Metadata string

	// Field, when set, names a string field of the request message that holds the key,
	// as AIP-155 has a mutating request carry a "request_id": the key is read from the
	// message (through protoreflect) instead of the metadata. A method whose request has
	// no string field of that name is refused with INTERNAL (a misconfiguration).
	// Default: "" (the key is in the metadata).
	Field protoreflect.Name

	// ReplayHeader and ReplayTrailer list the header and trailer metadata keys (lower
	// case) the handler sets that are recorded with the outcome and replayed with it
	// (a resource name, an ETag). The first answer sends everything the handler set;
	// a replay sends these, plus ReplayedMetadata in the header. Default: none.
	ReplayHeader  []string
	ReplayTrailer []string

	// Final reports whether a status code the handler returned is final: recorded and
	// replayed to every repeat, like a 4xx. Any other code releases the key, like a 5xx,
	// so that a retry runs the method again. Default: FinalCode.
	Final func(codes.Code) bool
}

// FinalCode is the default Config.Final: the codes that say something about the request
// and will not change on a retry are recorded; the codes that say the call failed this
// time are not, and release the key.
//
// Recorded: OK, INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED,
// UNAUTHENTICATED, FAILED_PRECONDITION, OUT_OF_RANGE.
//
// Released: CANCELLED, UNKNOWN (a plain Go error), DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED,
// ABORTED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS; and a panic.
func FinalCode(c codes.Code) bool {
	switch c {
	case codes.OK, codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.Unauthenticated, codes.FailedPrecondition, codes.OutOfRange:
		return true
	}
	return false
}

// UnaryServerInterceptor returns a unary server interceptor that runs the methods cfg
// keys at most once per key and scope, on eng: the same engine, store and core.Config
// the application's HTTP routes use (core.Config.KeyOptional, MinKeyLength, RetryAfter,
// MaxResponseBody and the rest apply). See the package documentation for the answers. It
// panics when eng is nil or cfg is invalid (a programming error), with an error wrapping
// core.ErrInvalidConfig that names the field.
func UnaryServerInterceptor(eng *core.Engine, cfg Config) grpc.UnaryServerInterceptor {
	return mustServer(eng, cfg).intercept
}

func mustServer(eng *core.Engine, cfg Config) *server {
	s, err := newServer(eng, cfg)
	if err != nil {
		panic(err)
	}
	return s
}

// server is the interceptor of one Config.
type server struct {
	eng         *core.Engine
	cfg         Config
	minKey      int
	optional    bool // core.Config.KeyOptional: a call without a key runs unprotected
	retryAfter  time.Duration
	maxResponse int64
	types       responseTypes
}

func newServer(eng *core.Engine, cfg Config) (*server, error) {
	switch {
	case eng == nil:
		return nil, fmt.Errorf("grpcidem: %w: engine: required (core.New)", core.ErrInvalidConfig)
	case cfg.Scope == nil:
		return nil, fmt.Errorf("grpcidem: %w: Scope: required (return a constant for a single-tenant service)", core.ErrInvalidConfig)
	case cfg.Methods == nil && cfg.Keyed == nil:
		return nil, fmt.Errorf("grpcidem: %w: Methods or Keyed: required (methods opt in)", core.ErrInvalidConfig)
	}
	for _, m := range cfg.Methods {
		if !strings.HasPrefix(m, "/") || strings.Count(m, "/") != 2 {
			return nil, fmt.Errorf("grpcidem: %w: Methods: %q is not a full method name (\"/package.Service/Method\")", core.ErrInvalidConfig, m)
		}
	}
	if cfg.Metadata == "" {
		cfg.Metadata = DefaultMetadata
	}
	if cfg.Metadata != strings.ToLower(cfg.Metadata) {
		return nil, fmt.Errorf("grpcidem: %w: Metadata: %q must be lower case", core.ErrInvalidConfig, cfg.Metadata)
	}
	if cfg.Field != "" && !cfg.Field.IsValid() {
		return nil, fmt.Errorf("grpcidem: %w: Field: %q is not a field name", core.ErrInvalidConfig, cfg.Field)
	}
	for _, keys := range [][]string{cfg.ReplayHeader, cfg.ReplayTrailer} {
		for _, k := range keys {
			if k != strings.ToLower(k) || k == "" {
				return nil, fmt.Errorf("grpcidem: %w: ReplayHeader/ReplayTrailer: %q must be a lower-case metadata key", core.ErrInvalidConfig, k)
			}
		}
	}
	if cfg.Final == nil {
		cfg.Final = FinalCode
	}
	p := eng.Policy()
	return &server{eng: eng, cfg: cfg, minKey: max(p.Key.MinLength, 1), optional: !p.Key.Required, retryAfter: p.RetryAfter, maxResponse: p.MaxResponseBody}, nil
}

func (s *server) keyed(method string) bool {
	return slices.Contains(s.cfg.Methods, method) || (s.cfg.Keyed != nil && s.cfg.Keyed(method))
}

// intercept is the interceptor: read the key and the scope, fingerprint the request,
// and run the handler through Engine.Do, whose recorded result is the call's outcome.
func (s *server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !s.keyed(info.FullMethod) {
		return handler(ctx, req)
	}
	msg, ok := req.(proto.Message)
	if !ok {
		return nil, s.misconfigured(fmt.Sprintf("the request of %s is a %T, not a protobuf message", info.FullMethod, req))
	}
	key, present, err := s.key(ctx, msg)
	switch {
	case err != nil && errors.Is(err, errKey):
		return nil, s.keyInvalid(err.Error())
	case err != nil:
		return nil, s.misconfigured(err.Error())
	case !present && s.optional:
		return handler(ctx, req)
	case !present:
		return nil, newStatus(codes.InvalidArgument, core.ProblemKeyMissing, fmt.Sprintf("%s requires %s.", info.FullMethod, s.where()), 0)
	}
	fp, err := fingerprint(info.FullMethod, msg)
	if err != nil {
		return nil, s.misconfigured(fmt.Sprintf("the request of %s could not be encoded: %v", info.FullMethod, err))
	}

	held := &heldStream{parent: grpc.ServerTransportStreamFromContext(ctx)}
	var (
		ran  bool // fn ran to its end and returned
		resp any
		herr error // the handler's error, returned to the client as it is
		ferr error // the error fn returned: the key was released
	)
	result, replayed, err := s.eng.Do(ctx, s.cfg.Scope(ctx), key, fp, func(ctx context.Context) ([]byte, error) {
		resp, herr = handler(grpc.NewContextWithServerTransportStream(ctx, held), req)
		ran = true
		out, err := s.outcome(resp, herr, held)
		if err != nil {
			ferr = err
			return nil, err // not final: Do releases the key
		}
		b := out.marshal()
		if int64(len(b)) > s.maxResponse {
			// The first answer is sent whole; repeats get RESPONSE_TOO_LARGE, never a re-run.
			b = (&outcome{tooLarge: true, header: out.header, trailer: out.trailer}).marshal()
		}
		return b, nil
	})
	switch {
	case err == nil && replayed:
		return s.replay(ctx, info.FullMethod, result)
	case err == nil:
		held.forward(ctx)
		return resp, herr
	case herr != nil && errors.Is(err, herr):
		held.forward(ctx) // a released (transient) status: the client gets it as the handler made it
		return nil, herr
	case ferr != nil && errors.Is(err, ferr):
		return nil, s.misconfigured(ferr.Error())
	}
	return nil, s.doFailed(ctx, err, ran)
}

// errKey is a malformed key, the client's mistake (INVALID_ARGUMENT).
var errKey = errors.New("malformed key")

// key returns the call's idempotency key and whether it has one, from the metadata or
// from Config.Field. An error wrapping errKey is the client's, any other the server's
// configuration. It checks what is particular to gRPC (one metadata value, no comma, as
// a proxy may join repeated values with commas; Config.MinKeyLength); Engine.Do holds the
// key to the rest of the contract (1–255 characters of printable ASCII).
func (s *server) key(ctx context.Context, msg proto.Message) (string, bool, error) {
	var v string
	if s.cfg.Field == "" {
		md, _ := metadata.FromIncomingContext(ctx)
		switch vs := md.Get(s.cfg.Metadata); len(vs) {
		case 0:
			return "", false, nil
		case 1:
			v = vs[0]
		default:
			return "", true, fmt.Errorf("%w: %d values, want one", errKey, len(vs))
		}
	} else {
		m := msg.ProtoReflect()
		fd := m.Descriptor().Fields().ByName(s.cfg.Field)
		if fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() || fd.IsMap() {
			return "", false, fmt.Errorf("the request message %s has no string field %q (Config.Field)", m.Descriptor().FullName(), s.cfg.Field)
		}
		if v = m.Get(fd).String(); v == "" {
			return "", false, nil // proto3: an empty string is an absent field
		}
	}
	switch {
	case strings.ContainsRune(v, ','):
		return "", true, fmt.Errorf("%w: a comma makes it ambiguous", errKey)
	case len(v) < s.minKey:
		return "", true, fmt.Errorf("%w: shorter than %d characters", errKey, s.minKey)
	}
	return v, true, nil
}

// where names where the key goes, for a status message.
func (s *server) where() string {
	if s.cfg.Field != "" {
		return fmt.Sprintf("request field %q", s.cfg.Field)
	}
	return fmt.Sprintf("metadata %q", s.cfg.Metadata)
}

// fingerprintDomain starts every gRPC fingerprint, so that a call never matches a
// message ID given to Engine.Do directly with the same bytes.
const fingerprintDomain = "idem.grpc\x00"

// fingerprint frames the full method name and the request's deterministic protobuf
// encoding: field order on the wire does not matter, a changed field does.
func fingerprint(method string, msg proto.Message) ([]byte, error) {
	b := make([]byte, 0, len(fingerprintDomain)+len(method)+1+proto.Size(msg))
	b = append(append(append(b, fingerprintDomain...), method...), 0)
	return proto.MarshalOptions{Deterministic: true}.MarshalAppend(b, msg)
}

// outcome encodes what the handler returned, or returns an error when it is not final
// (the key is released).
func (s *server) outcome(resp any, herr error, held *heldStream) (*outcome, error) {
	out := &outcome{header: pick(held.header(), s.cfg.ReplayHeader), trailer: pick(held.trailer(), s.cfg.ReplayTrailer)}
	if herr != nil {
		st, ok := status.FromError(herr)
		if !ok || !s.cfg.Final(st.Code()) {
			return nil, herr
		}
		out.status = st.Proto()
		return out, nil
	}
	m, ok := resp.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("grpcidem: the response is a %T, not a protobuf message", resp)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("grpcidem: encoding the response: %w", err)
	}
	out.response = b
	return out, nil
}

// replay answers a repeat with the recorded outcome.
func (s *server) replay(ctx context.Context, method string, result []byte) (any, error) {
	out, err := unmarshalOutcome(result)
	if err != nil {
		return nil, newStatus(codes.Internal, core.ProblemMisconfigured, "The recorded outcome of this call could not be read: "+err.Error(), 0)
	}
	header := metadata.Join(out.header, metadata.Pairs(ReplayedMetadata, "true"))
	_ = grpc.SetHeader(ctx, header)
	if len(out.trailer) > 0 {
		_ = grpc.SetTrailer(ctx, out.trailer)
	}
	switch {
	case out.tooLarge:
		return nil, newStatus(codes.FailedPrecondition, core.ProblemResponseTooLarge,
			"This call completed once, and its response was too large to keep: it will not run again. Read the result another way.", 0)
	case out.status != nil:
		return nil, status.ErrorProto(out.status)
	}
	m, err := s.types.message(method, out.response)
	if err != nil {
		return nil, newStatus(codes.Internal, core.ProblemMisconfigured, "The recorded response of this call could not be decoded: "+err.Error(), 0)
	}
	return m, nil
}

// doFailed turns an error of Engine.Do (other than the handler's own) into a status.
func (s *server) doFailed(ctx context.Context, err error, ran bool) error {
	switch {
	case errors.Is(err, storage.ErrInProgress):
		return newStatus(codes.Aborted, core.ProblemInProgress, "Another call with this idempotency key is in progress; retry after the delay.", s.retryAfter)
	case errors.Is(err, core.ErrKeyReused):
		return newStatus(codes.FailedPrecondition, core.ProblemKeyReused, "This idempotency key was used with a different request (method or message); use a new key for a new request.", 0)
	case errors.Is(err, core.ErrEmptyScope), errors.Is(err, core.ErrInvalidScope):
		return s.misconfigured(fmt.Sprintf("the scope of the call is unusable (%v); is the interceptor chained before authentication?", err))
	case errors.Is(err, core.ErrInvalidKey):
		return s.keyInvalid(fmt.Sprintf("want %d–%d characters of printable ASCII", s.minKey, core.MaxKeyLength))
	case errors.Is(err, core.ErrRecoveryPointUnreached):
		return newStatus(codes.Internal, core.ProblemCannotResume, "An earlier attempt committed a phase this server no longer runs; nothing was recorded.", 0)
	case ctx.Err() != nil:
		return status.FromContextError(context.Cause(ctx)).Err()
	case errors.Is(err, storage.ErrTransient) && !ran:
		return newStatus(codes.Unavailable, core.ProblemCollision, "The call collided with a twin and was rolled back; retry.", s.retryAfter)
	case ran:
		return newStatus(codes.Unavailable, core.ProblemNotRecorded, "The outcome of the call was not recorded; retry with the same key.", s.retryAfter)
	}
	return newStatus(codes.Unavailable, core.ProblemStoreUnavailable, "The idempotency store is unavailable; the method did not run. Retry with the same key.", s.retryAfter)
}

func (s *server) keyInvalid(detail string) error {
	return newStatus(codes.InvalidArgument, core.ProblemKeyInvalid, fmt.Sprintf("The %s is malformed: %s.", s.where(), detail), 0)
}

func (s *server) misconfigured(detail string) error {
	return newStatus(codes.Internal, core.ProblemMisconfigured, "grpcidem: "+detail, 0)
}

// pick returns the entries of md whose keys are in keys.
func pick(md metadata.MD, keys []string) metadata.MD {
	var out metadata.MD
	for _, k := range keys {
		if v, ok := md[k]; ok {
			if out == nil {
				out = metadata.MD{}
			}
			out[k] = slices.Clone(v)
		}
	}
	return out
}
