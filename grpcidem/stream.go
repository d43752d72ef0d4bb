package grpcidem

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// heldStream is the grpc.ServerTransportStream a keyed handler sees: it holds the header
// and trailer metadata the handler sets (grpc.SetHeader, grpc.SendHeader,
// grpc.SetTrailer) until the outcome is recorded, as the HTTP adapters hold the response,
// so that the named keys are recorded with it and nothing reaches the client before.
type heldStream struct {
	parent grpc.ServerTransportStream // nil outside a real server (a handler called directly)

	mu       sync.Mutex
	hdr, trl metadata.MD
}

var _ grpc.ServerTransportStream = (*heldStream)(nil)

// Method returns the full method name of the call.
func (h *heldStream) Method() string {
	if h.parent == nil {
		return ""
	}
	return h.parent.Method()
}

// SetHeader holds md, to be sent with the answer.
func (h *heldStream) SetHeader(md metadata.MD) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hdr = metadata.Join(h.hdr, md)
	return nil
}

// SendHeader holds md like SetHeader: a keyed call's header leaves with its recorded
// outcome, not before.
func (h *heldStream) SendHeader(md metadata.MD) error { return h.SetHeader(md) }

// SetTrailer holds md, to be sent with the answer.
func (h *heldStream) SetTrailer(md metadata.MD) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.trl = metadata.Join(h.trl, md)
	return nil
}

func (h *heldStream) header() metadata.MD {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hdr
}

func (h *heldStream) trailer() metadata.MD {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.trl
}

// forward sets what the handler set on the call's real stream (in ctx, the interceptor's).
func (h *heldStream) forward(ctx context.Context) {
	if hdr := h.header(); len(hdr) > 0 {
		_ = grpc.SetHeader(ctx, hdr)
	}
	if trl := h.trailer(); len(trl) > 0 {
		_ = grpc.SetTrailer(ctx, trl)
	}
}
