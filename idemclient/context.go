package idemclient

import (
	"context"

	"github.com/google/uuid"
)

type (
	keyKey    struct{}
	resultKey struct{}
)

// WithKey returns a copy of ctx that makes Transport send key as the idempotency key of
// a request made with it (a request that has the header already keeps its own). Use it
// whenever the logical operation outlives one call: keep the key with the operation (in
// the form, the job's row, the outbox) and send every try of it with that key, so that a
// double click, a re-run job or a restarted process repeats the operation instead of
// doing it again. An empty key is refused: RoundTrip returns an error.
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyKey{}, key)
}

// NewKey returns a fresh random key (a version 4 UUID), the kind Transport generates for
// a request without one: for a caller that stores the key before sending (see WithKey).
func NewKey() string { return uuid.NewString() }

// Result is what Transport did for one logical request. Ask for it with WithResult.
type Result struct {
	// Key is the idempotency key every attempt sent; empty when the request's method is
	// not one Transport keys.
	Key string
	// Attempts counts the attempts Transport made (calls of Base.RoundTrip). A resend
	// that net/http makes inside one of them (see the package doc) is not counted.
	Attempts int
	// Replayed reports whether the final response carried Idempotent-Replayed: true:
	// the server did not run the request again but answered what an earlier attempt (or
	// an earlier call with the same key) had done.
	Replayed bool
}

// WithResult returns a copy of ctx that makes Transport fill in *res for the request
// made with it, before RoundTrip returns, whatever its outcome (error included). It is
// the way to learn the attempts and the key of a request, as httptrace.WithClientTrace is
// the way to learn its connections. Give each request its own Result.
func WithResult(ctx context.Context, res *Result) context.Context {
	return context.WithValue(ctx, resultKey{}, res)
}

func resultFrom(ctx context.Context) *Result {
	res, _ := ctx.Value(resultKey{}).(*Result)
	return res
}
