package ginidem

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"

	"github.com/gin-gonic/gin"
)

// ErrStreaming is what Flush panics with and Hijack returns on a keyed route: the
// response is held until the engine has recorded it, so it cannot be streamed or taken
// over. It wraps http.ErrNotSupported. Serve streaming routes without the middleware.
var ErrStreaming = fmt.Errorf("ginidem: a keyed response is held until it is recorded; it cannot be flushed, streamed or hijacked: %w", http.ErrNotSupported)

// writer is c.Writer while a keyed handler runs: everything goes to the engine's held
// writer. Like gin's own writer, WriteHeader only notes the status until the first write
// (WriteHeaderNow, Write or WriteString).
type writer struct {
	gin.ResponseWriter // the real writer; only CloseNotify reaches it (it writes nothing)
	held               http.ResponseWriter
	status             int
	written            bool // the status went to held
	size               int  // body bytes written to held
}

var _ gin.ResponseWriter = (*writer)(nil)

// writerPool keeps writers between requests. Without it a first request takes one
// allocation more (13, over the 12 issue 33 allows) and 6% more time, within the noise of
// the measurement (go test -run '^$' -bench . ./ginidem, medians of 5 alternating rounds
// of 20000x, load 4-6, 2026-12-04): it stays for the allocation, not the time.
var writerPool = sync.Pool{New: func() any { return new(writer) }}

func (w *writer) Header() http.Header { return w.held.Header() }

func (w *writer) WriteHeader(code int) {
	if code > 0 && !w.Written() {
		w.status = code
	}
}

func (w *writer) WriteHeaderNow() {
	if !w.written {
		w.written = true
		w.held.WriteHeader(w.status)
	}
}

func (w *writer) Write(p []byte) (int, error) {
	w.WriteHeaderNow()
	n, err := w.held.Write(p)
	w.size += n
	return n, err
}

func (w *writer) WriteString(s string) (int, error) {
	w.WriteHeaderNow()
	n, err := io.WriteString(w.held, s)
	w.size += n
	return n, err
}

func (w *writer) Status() int   { return w.status }
func (w *writer) Written() bool { return w.written }

// Size reports the body bytes written, or -1 before anything was written, as gin does.
func (w *writer) Size() int {
	if !w.Written() {
		return -1
	}
	return w.size
}

// Flush panics with ErrStreaming: a held response cannot be sent in parts.
func (w *writer) Flush() { panic(ErrStreaming) }

// Hijack returns ErrStreaming.
func (w *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) { return nil, nil, ErrStreaming }

// Pusher returns nil (no server push), as gin does when the connection has none.
func (w *writer) Pusher() http.Pusher { return nil }

// Unwrap returns the held writer, for http.ResponseController.
func (w *writer) Unwrap() http.ResponseWriter { return w.held }
