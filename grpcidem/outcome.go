package grpcidem

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/idemkit/idem/core"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo every status of idem's own
// carries; its reason names the case (IN_PROGRESS, KEY_REUSED…: Reason).
const ErrorDomain = "github.com/idemkit/idem"

// Reason returns the google.rpc.ErrorInfo reason of a status idem answers with for the
// problem kind k: the kind in upper snake case ("key-reused" → "KEY_REUSED").
func Reason(k core.ProblemKind) string {
	return strings.ToUpper(strings.ReplaceAll(string(k), "-", "_"))
}

// newStatus returns a status of idem's own: code and message, a google.rpc.ErrorInfo
// (ErrorDomain, the kind's reason) and, when retry is positive, a google.rpc.RetryInfo.
func newStatus(c codes.Code, kind core.ProblemKind, msg string, retry time.Duration) error {
	p := &spb.Status{Code: int32(c), Message: msg}
	info, err := anypb.New(&errdetails.ErrorInfo{Reason: Reason(kind), Domain: ErrorDomain})
	if err == nil {
		p.Details = append(p.Details, info)
	}
	if retry > 0 {
		if ri, err := anypb.New(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)}); err == nil {
			p.Details = append(p.Details, ri)
		}
	}
	return status.ErrorProto(p)
}

// outcome is what is recorded for a call, as the result of Engine.Do: the response
// message or the final status, and the named header and trailer metadata. It is encoded
// in protobuf's wire format (see docs/grpc.md, "What is recorded"):
//
//	1 bytes    response: the response message's encoding (a call that returned OK)
//	2 bytes    status: a google.rpc.Status (a call that returned a final error status)
//	3 bytes    header entry, repeated: {1 string key, 2 string value}
//	4 bytes    trailer entry, repeated: {1 string key, 2 string value}
//	5 varint   too large: 1 when the outcome was over MaxResponseBody and is not kept
type outcome struct {
	response        []byte
	status          *spb.Status
	header, trailer metadata.MD
	tooLarge        bool
}

const (
	fieldResponse protowire.Number = 1 + iota
	fieldStatus
	fieldHeader
	fieldTrailer
	fieldTooLarge
)

func (o *outcome) marshal() []byte {
	var b []byte
	switch {
	case o.tooLarge:
		b = protowire.AppendTag(b, fieldTooLarge, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	case o.status != nil:
		st, _ := proto.MarshalOptions{Deterministic: true}.Marshal(o.status)
		b = protowire.AppendTag(b, fieldStatus, protowire.BytesType)
		b = protowire.AppendBytes(b, st)
	default:
		b = protowire.AppendTag(b, fieldResponse, protowire.BytesType)
		b = protowire.AppendBytes(b, o.response)
	}
	b = appendMD(b, fieldHeader, o.header)
	return appendMD(b, fieldTrailer, o.trailer)
}

func appendMD(b []byte, n protowire.Number, md metadata.MD) []byte {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range md[k] {
			var e []byte
			e = protowire.AppendTag(e, 1, protowire.BytesType)
			e = protowire.AppendString(e, k)
			e = protowire.AppendTag(e, 2, protowire.BytesType)
			e = protowire.AppendString(e, v)
			b = protowire.AppendTag(b, n, protowire.BytesType)
			b = protowire.AppendBytes(b, e)
		}
	}
	return b
}

var errMalformed = errors.New("malformed record")

func unmarshalOutcome(b []byte) (*outcome, error) {
	o := &outcome{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, errMalformed
		}
		b = b[n:]
		switch {
		case num == fieldTooLarge && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil, errMalformed
			}
			o.tooLarge, b = v == 1, b[n:]
			continue
		case typ != protowire.BytesType:
			n = protowire.ConsumeFieldValue(num, typ, b) // a field of a later version: skipped
			if n < 0 {
				return nil, errMalformed
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, errMalformed
		}
		b = b[n:]
		switch num {
		case fieldResponse:
			o.response = v
		case fieldStatus:
			o.status = &spb.Status{}
			if err := proto.Unmarshal(v, o.status); err != nil {
				return nil, fmt.Errorf("%w: status: %w", errMalformed, err)
			}
		case fieldHeader, fieldTrailer:
			k, val, err := entry(v)
			if err != nil {
				return nil, err
			}
			md := &o.header
			if num == fieldTrailer {
				md = &o.trailer
			}
			if *md == nil {
				*md = metadata.MD{}
			}
			(*md)[k] = append((*md)[k], val)
		}
	}
	return o, nil
}

// entry decodes one metadata entry {1 key, 2 value}.
func entry(b []byte) (key, value string, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return "", "", errMalformed
		}
		b = b[n:]
		v, n := protowire.ConsumeString(b)
		if n < 0 {
			return "", "", errMalformed
		}
		b = b[n:]
		switch num {
		case 1:
			key = v
		case 2:
			value = v
		}
	}
	return key, value, nil
}

// responseTypes finds the response message type of a method in the global registry
// (every protoc-generated service registers its descriptor there), once per method.
type responseTypes struct{ m sync.Map } // full method → protoreflect.MessageType, or nil

// message decodes a recorded response of method. When the method's response type is not
// registered (a service described by hand), it returns a message that holds the bytes as
// unknown fields and encodes to exactly the bytes recorded: the client decodes it into
// its own response type as usual.
func (t *responseTypes) message(method string, b []byte) (proto.Message, error) {
	var m proto.Message = &emptypb.Empty{}
	if mt := t.lookup(method); mt != nil {
		m = mt.New().Interface()
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, err
	}
	return m, nil
}

func (t *responseTypes) lookup(method string) protoreflect.MessageType {
	if v, ok := t.m.Load(method); ok {
		mt, _ := v.(protoreflect.MessageType)
		return mt
	}
	mt := findResponseType(method)
	t.m.Store(method, mt)
	return mt
}

func findResponseType(method string) protoreflect.MessageType {
	i := strings.LastIndexByte(method, '/')
	if i <= 1 {
		return nil
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(method[1:i]))
	if err != nil {
		return nil
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil
	}
	md := sd.Methods().ByName(protoreflect.Name(method[i+1:]))
	if md == nil {
		return nil
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	if err != nil {
		return nil
	}
	return mt
}
