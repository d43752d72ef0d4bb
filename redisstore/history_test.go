package redisstore_test

import (
	"context"
	"net/http"

	"github.com/idemkit/idem/internal/history"
)

// The failover tests record every request they send in a history (internal/history),
// carried by the context, and check it against the model of one key.

type historyKey struct{}

// withHistory returns ctx carrying rec: post records every request sent with it.
func withHistory(ctx context.Context, rec *history.Recorder) context.Context {
	return context.WithValue(ctx, historyKey{}, rec)
}

// recorded runs send, one request for key, and records it in ctx's history if it carries
// one.
func recorded(ctx context.Context, key string, send func() (*reply, error)) (*reply, error) {
	rec, ok := ctx.Value(historyKey{}).(*history.Recorder)
	if !ok {
		return send()
	}
	c := rec.Begin(key)
	r, err := send()
	var resp *http.Response
	var body []byte
	if r != nil {
		resp, body = &http.Response{StatusCode: r.Status, Header: r.Header}, r.Body
	}
	c.End(history.Answer(resp, body, err))
	return r, err
}
