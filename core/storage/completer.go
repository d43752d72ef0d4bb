package storage

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Request is what a store keeps of a request so that core.Completer can run it again when
// its client never comes back: only for an engine that opts in (core.Config.KeepRequest),
// only in ModePhased. It is data at rest, kept as long as the key: the body whole (within
// core.Config.MaxRequestBody) and only the headers the application names
// (core.Config.KeepHeaders).
type Request struct {
	// Method is the request's method.
	Method string
	// Host is the request's Host (http.Request.Host), for routers that route by host.
	Host string
	// URI is the request's path and query as the client sent them (escaped, as in
	// http.Request.RequestURI without a scheme or host).
	URI string
	// Header holds the kept headers only.
	Header http.Header
	// Body is the request body, byte for byte.
	Body []byte
}

// AbandonedQuery says which started keys Completable.Abandoned lists. Every time is
// measured on the store's clock, as leases are.
type AbandonedQuery struct {
	// Grace: only keys whose lease ended at least this long ago.
	Grace time.Duration
	// Horizon: only keys created less than this long ago.
	Horizon time.Duration
	// MaxAttempts: only keys with fewer completer attempts than this.
	MaxAttempts int
	// Limit: at most this many keys, oldest first.
	Limit int
}

// Completable is implemented by a store that keeps requests (Claim.Request) and can list
// the operations their clients abandoned, for core.Completer. Every store of this module
// implements it.
type Completable interface {
	// Abandoned lists the keys that are started, carry a Request, whose lease ended at
	// least q.Grace ago, that were created less than q.Horizon ago, that have had fewer
	// than q.MaxAttempts completer attempts and whose next attempt is due (NextAttempt
	// zero or not after the store's now): oldest first, at most q.Limit. Each record
	// carries its Request, Attempts and NextAttempt. It changes nothing.
	Abandoned(ctx context.Context, q AbandonedQuery) ([]*Record, error)

	// BeginAttempt counts one completer attempt on a key before it runs: when the key is
	// still started, its lease is not live and it has had exactly seen attempts, it
	// records seen+1 attempts and a next attempt backoff from now, and reports true; in
	// any other case it changes nothing and reports false (another completer began this
	// attempt, the client's retry holds the key, the key completed or is gone). It is
	// one atomic compare-and-set, so of completers racing on one key exactly one wins.
	// Counting before running bounds the attempts even when a completer dies mid-run.
	BeginAttempt(ctx context.Context, scope, key string, seen int, backoff time.Duration) (bool, error)
}

// requestFormat is the first byte of an encoded Request, so that a later format can be
// told apart.
const requestFormat = 1

// EncodeRequest serialises a kept request for a store's column (bytes): a format byte,
// then the method, the host, the URI, the headers (EncodeHeader) and the body, each
// preceded by its length as a uvarint. A nil request encodes as nil (the column stays NULL). Stores give
// the bytes back to DecodeRequest.
func EncodeRequest(r *Request) []byte {
	if r == nil {
		return nil
	}
	h := EncodeHeader(r.Header)
	b := make([]byte, 0, 1+5*binary.MaxVarintLen32+len(r.Method)+len(r.Host)+len(r.URI)+len(h)+len(r.Body))
	b = append(b, requestFormat)
	for _, part := range [][]byte{[]byte(r.Method), []byte(r.Host), []byte(r.URI), h, r.Body} {
		b = binary.AppendUvarint(b, uint64(len(part)))
		b = append(b, part...)
	}
	return b
}

// DecodeRequest parses what EncodeRequest produced; nil or empty input gives nil.
func DecodeRequest(b []byte) (*Request, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if b[0] != requestFormat {
		return nil, fmt.Errorf("storage: kept request: unknown format %d", b[0])
	}
	b = b[1:]
	var parts [5][]byte
	for i := range parts {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, errors.New("storage: kept request: truncated")
		}
		parts[i], b = b[k:k+int(n)], b[k+int(n):]
	}
	if len(b) != 0 {
		return nil, errors.New("storage: kept request: trailing bytes")
	}
	r := &Request{Method: string(parts[0]), Host: string(parts[1]), URI: string(parts[2]), Body: bytes.Clone(parts[4])}
	if len(parts[3]) > 0 {
		h, err := DecodeHeader(parts[3])
		if err != nil {
			return nil, err
		}
		r.Header = h
	}
	return r, nil
}
