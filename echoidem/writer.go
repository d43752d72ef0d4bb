package echoidem

import (
	"bufio"
	"fmt"
	"net"
	"net/http"

	"github.com/labstack/echo/v4"
)

// ErrStreaming is what Flush panics with and Hijack returns on a keyed route: the
// response is held until the engine has recorded it, so it cannot be streamed or taken
// over. It wraps http.ErrNotSupported. Serve streaming routes without the middleware.
var ErrStreaming = fmt.Errorf("echoidem: a keyed response is held until it is recorded; it cannot be flushed, streamed or hijacked: %w", http.ErrNotSupported)

// heldResponse is what a keyed handler sees as c.Response(): a fresh echo.Response around
// the engine's held writer, in one allocation. (A pool of them made no difference
// measurable: BenchmarkEcho, 5 alternating rounds, 2026-12-04.)
type heldResponse struct {
	resp echo.Response
	w    heldWriter
}

// heldWriter is the held response's Writer: the engine's held writer, refusing to flush
// or hijack.
type heldWriter struct{ http.ResponseWriter }

// Flush panics with ErrStreaming: a held response cannot be sent in parts.
func (w *heldWriter) Flush() { panic(ErrStreaming) }

// Hijack returns ErrStreaming.
func (w *heldWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) { return nil, nil, ErrStreaming }

// Unwrap returns the held writer, for http.ResponseController.
func (w *heldWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
