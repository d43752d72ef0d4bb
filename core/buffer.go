package core

import (
	"bytes"
	"net/http"
	"sync"

	"github.com/idemkit/idem/core/storage"
)

// buffer is the http.ResponseWriter a keyed handler writes into (the held writer of
// Engine.Handle): nothing reaches the client until the engine has recorded (and,
// in atomic mode, committed) the outcome. Adapters wrap it in their framework's writer.
// It deliberately implements neither
// http.Flusher nor http.Hijacker: a streamed or hijacked response cannot be held back
// and stored, so http.ResponseController reports http.ErrNotSupported to a handler that
// tries.
type buffer struct {
	header http.Header
	body   bytes.Buffer
	status int
	// recorded is what the engine records of it (Engine.recordable): stores copy it
	// (Lock.Complete's contract), so it is reused with the buffer.
	recorded storage.Response
}

// bufferPool keeps buffers, their maps and bodies between requests. A Gin + memstore
// first request without it (go test -run '^$' -bench . ./ginidem, medians of 5
// alternating rounds of 20000x, load 4-6, 2026-12-04): the buffer unpooled, 4
// allocations more and 14% more time; recorded's header made for each request (it had a
// pool of its own then), 3 allocations and 9% more.
var bufferPool = sync.Pool{New: func() any {
	return &buffer{header: make(http.Header, 4), recorded: storage.Response{Header: make(http.Header, 4)}}
}}

// maxPooledBody keeps one huge response from pinning its memory in the pool.
const maxPooledBody = 64 << 10

func getBuffer() *buffer { return bufferPool.Get().(*buffer) }

func putBuffer(b *buffer) {
	if b.body.Cap() > maxPooledBody {
		return
	}
	clear(b.header)
	b.body.Reset()
	b.status = 0
	clear(b.recorded.Header)
	b.recorded.Body = nil
	bufferPool.Put(b)
}

// Header returns the header map of the held response.
func (b *buffer) Header() http.Header { return b.header }

// WriteHeader records the status; later calls are ignored, as net/http does. An
// informational status (1xx, such as 103 Early Hints) is dropped: it is not the final
// status, which the handler writes next, and a held response cannot send it ahead.
// 101 Switching Protocols is not dropped: it ends the exchange, and is not storable.
func (b *buffer) WriteHeader(status int) {
	if b.status == 0 && (status >= 200 || status == http.StatusSwitchingProtocols) {
		b.status = status
	}
}

// Write appends to the held body, sending an implicit 200 first as net/http does.
func (b *buffer) Write(p []byte) (int, error) {
	b.WriteHeader(http.StatusOK)
	return b.body.Write(p)
}

// WriteString appends to the held body.
func (b *buffer) WriteString(s string) (int, error) {
	b.WriteHeader(http.StatusOK)
	return b.body.WriteString(s)
}

// Status returns the status written so far, or 200 when none was.
func (b *buffer) Status() int {
	if b.status == 0 {
		return http.StatusOK
	}
	return b.status
}

// Written reports whether a status or body has been written.
func (b *buffer) Written() bool { return b.status != 0 }

// Size returns the number of body bytes written.
func (b *buffer) Size() int { return b.body.Len() }

// Bytes returns the body written so far; valid until the request ends.
func (b *buffer) Bytes() []byte { return b.body.Bytes() }
