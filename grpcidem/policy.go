package grpcidem

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/policy"
)

// Policy returns the idempotency policy of the methods cfg keys on eng, as policy.Policy
// data, so that Policy.Markdown writes the record of a gRPC method as it does of an HTTP
// route: eng.Policy() with gRPC's terms where they differ.
//
//   - Key: In "header" and Name the metadata key (gRPC metadata travels as HTTP/2
//     headers), or, with Config.Field, In "custom" and a Format naming the field.
//   - Methods: Config.Methods (plus "methods Config.Keyed selects" when Keyed is set).
//   - Fingerprint: covers "method" (the full method name) and "message" (its
//     deterministic protobuf encoding).
//   - Stored: the gRPC codes Config.Final records, by name ("OK, INVALID_ARGUMENT, …"):
//     not HTTP statuses, so its Has method does not apply.
//   - ReplayHeaders: Config.ReplayHeader, then Config.ReplayTrailer marked "(trailer)".
//   - MaxRequestBody: gRPC's default grpc.MaxRecvMsgSize (4 MiB), which bounds a
//     request (the interceptor reads no body of its own); set it to your server's.
//   - Answers: each Status is the gRPC code's number (10 is ABORTED), and each Case
//     starts with the code's name; Problem links the problem kind whose documentation
//     says what happened and what the client should do (the ErrorInfo reason is Reason of
//     it).
//
// Scope, Downstream and Tests are the application's to fill in, as for HTTP.
//
// It panics as UnaryServerInterceptor does, on the same mistakes.
func (cfg Config) Policy(eng *core.Engine) policy.Policy {
	s := mustServer(eng, cfg)
	cfg = s.cfg
	p := eng.Policy()
	if cfg.Field != "" {
		p.Key = policy.Key{In: "custom", Format: fmt.Sprintf("the request message's string field `%s` (AIP-155), as it is; no commas", cfg.Field)}
	} else {
		p.Key = policy.Key{In: "header", Name: cfg.Metadata, Format: "the metadata value as it is (no RFC 8941 quoting); one value only, no commas"}
	}
	p.Key.Required, p.Key.MinLength, p.Key.MaxLength = !s.optional, s.minKey, core.MaxKeyLength
	p.Methods = slices.Clone(cfg.Methods)
	if cfg.Keyed != nil {
		p.Methods = append(p.Methods, "methods Config.Keyed selects")
	}
	p.Fingerprint = policy.Fingerprint{Covers: []string{"method", "message"},
		Body: "the request message's deterministic protobuf encoding (proto.MarshalOptions{Deterministic: true}): the order of fields on the wire does not matter, any changed field does"}
	p.Stored = policy.Statuses(codeNames(cfg.Final, true))
	p.ReplayHeaders = slices.Clone(cfg.ReplayHeader)
	for _, k := range cfg.ReplayTrailer {
		p.ReplayHeaders = append(p.ReplayHeaders, k+" (trailer)")
	}
	p.MaxRequestBody = defaultMaxRecvMsgSize
	p.Answers = s.answers(p)
	return p
}

// codeNames lists the codes for which final reports want, by name.
func codeNames(final func(codes.Code) bool, want bool) string {
	var names []string
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if final(c) == want {
			names = append(names, codeName(c))
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// codeName is a code's name as gRPC's documentation writes it: INVALID_ARGUMENT.
func codeName(c codes.Code) string {
	switch c {
	case codes.OK:
		return "OK"
	case codes.Canceled:
		return "CANCELLED"
	}
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

// answers lists every answer of a keyed method, in the order core lists an HTTP route's.
func (s *server) answers(p policy.Policy) []policy.Answer {
	wait := "at once"
	if p.Mode == core.ModeAtomic {
		wait = fmt.Sprintf("after waiting up to %s for the first to commit (it gets the outcome if the first commits in that time)", durationText(p.Wait))
	} else if p.Wait > 0 {
		wait = fmt.Sprintf("if the first has not finished within %s (otherwise its outcome)", durationText(p.Wait))
	}
	retry := fmt.Sprintf("with a google.rpc.RetryInfo of %s", durationText(s.retryAfter))
	inProgress := fmt.Sprintf("the same key and request while the first is still running: this status %s, %s. A retry with the same key gets the outcome once there is one.", wait, retry)
	answer := func(c codes.Code, k core.ProblemKind, text string) policy.Answer {
		return policy.Answer{Name: string(k), Case: codeName(c) + ": " + text, Status: int(c), Problem: string(k), Type: problemType(p, k), Title: k.Title()}
	}
	as := []policy.Answer{
		{Name: "first", Case: "A new key: the handler runs once; an outcome whose code is stored is recorded (with the response message and the named metadata) before it is sent."},
		{Name: "replay", Case: "The same key and request after the first completed: the recorded response message or status, with the named header and trailer metadata.", Headers: []string{ReplayedMetadata + ": true"}},
		{Name: "not-stored", Case: fmt.Sprintf("The handler returned a code that is not stored (%s) or panicked: the answer is sent once and the key released, so a retry with it runs again.", codeNames(s.cfg.Final, false))},
		answer(codes.Aborted, core.ProblemInProgress, inProgress),
		answer(codes.FailedPrecondition, core.ProblemKeyReused, "the key was first used with another method or request message: nothing runs."),
	}
	if !s.optional {
		as = append(as, answer(codes.InvalidArgument, core.ProblemKeyMissing, fmt.Sprintf("a keyed method called without %s: nothing runs.", s.where())))
	}
	as = append(as,
		answer(codes.InvalidArgument, core.ProblemKeyInvalid, fmt.Sprintf("a malformed key (not %d–%d characters of printable ASCII, more than one value, or a comma in it): nothing runs.", p.Key.MinLength, p.Key.MaxLength)),
		answer(codes.Unavailable, core.ProblemStoreUnavailable, "the key store failed or did not answer in time: the method did not run (fail closed), "+retry+". Retry with the same key."),
		answer(codes.Unavailable, core.ProblemCollision, "the call collided with a concurrent twin and was rolled back, "+retry+". Retry with the same key."),
		answer(codes.Unavailable, core.ProblemNotRecorded, "the outcome could not be recorded or confirmed: nothing was kept, "+retry+". Retry with the same key."),
		answer(codes.FailedPrecondition, core.ProblemResponseTooLarge, fmt.Sprintf("a retry of a call whose recorded outcome was over %d bytes: it happened once and does not run again, and there is nothing to replay. Do not retry.", p.MaxResponseBody)),
		answer(codes.Internal, core.ProblemMisconfigured, "a server misconfiguration (an empty or unusable scope, a Config.Field the request lacks, a request or response that is not a protobuf message): nothing runs."),
		answer(codes.Internal, core.ProblemCannotResume, "a resumed operation whose handler no longer runs the phase an earlier attempt committed: nothing is recorded."),
	)
	return as
}

// defaultMaxRecvMsgSize is grpc.Server's default limit on a received message.
const defaultMaxRecvMsgSize = 4 << 20

// problemType is the type URI (the documentation) of kind k in p's answers.
func problemType(p policy.Policy, k core.ProblemKind) string {
	for _, a := range p.Answers {
		if a.Problem == string(k) {
			return a.Type
		}
	}
	return core.DefaultProblemBase + string(k)
}

// durationText writes d as people do: 2s, 500ms, 1m.
func durationText(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}
