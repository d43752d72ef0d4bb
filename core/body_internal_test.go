package core

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// trickle is a request body that hands out at most step bytes of data per Read, then
// ends with end (io.EOF, or an error for a client that hung up), and records the room
// each Read was given on top of what had arrived: the capacity of the reader's buffer.
type trickle struct {
	data []byte
	step int
	end  error
	read int
	caps []int
}

func (b *trickle) Read(p []byte) (int, error) {
	b.caps = append(b.caps, b.read+len(p))
	if b.read == len(b.data) {
		return 0, b.end
	}
	n := copy(p[:min(len(p), b.step)], b.data[b.read:])
	b.read += n
	return n, nil
}

func (b *trickle) Close() error { return nil }

func trickleRequest(body *trickle, declared int64) *http.Request {
	r, _ := http.NewRequest(http.MethodPost, "/", nil)
	r.Body, r.ContentLength = body, declared
	return r
}

// TestReadBodyAllocatesAsTheBytesArrive: a client that declares 1 MiB and sends one byte
// holds at most 64 KiB of the server's memory, not the 1 MiB it declared; a body that does
// arrive is read whole, in a buffer that at most doubles what has arrived and never
// exceeds the declared length and one byte.
func TestReadBodyAllocatesAsTheBytesArrive(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	e := &Engine{cfg: Config{MaxRequestBody: mib}}

	t.Run("declares 1 MiB, sends 1 byte", func(t *testing.T) {
		t.Parallel()
		body := &trickle{data: []byte("x"), step: 1, end: io.ErrUnexpectedEOF}
		b, err := e.readBody(trickleRequest(body, mib))
		require.Error(t, err)
		assert.NotErrorIs(t, err, ErrBodyTooLarge)
		require.GreaterOrEqual(t, len(body.caps), 2, "the second read is the wait for bytes that never come")
		for i, c := range body.caps {
			assert.LessOrEqual(t, c, firstBodyRead, "read %d: buffer of %d bytes for %d received", i, c, 1)
		}
		assert.Equal(t, "x", b.String())
	})

	t.Run("1 MiB in 1 KiB steps", func(t *testing.T) {
		t.Parallel()
		data := bytes.Repeat([]byte("0123456789abcdef"), mib/16)
		body := &trickle{data: data, step: 1 << 10, end: io.EOF}
		b, err := e.readBody(trickleRequest(body, mib))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(data, b.Bytes()), "the body is read whole")
		arrived := 0
		for i, c := range body.caps {
			assert.LessOrEqual(t, c, max(firstBodyRead, 2*arrived), "read %d: buffer of %d bytes for %d received", i, c, arrived)
			assert.LessOrEqual(t, c, mib+1, "read %d: over the declared length and one byte", i)
			arrived = min(arrived+1<<10, mib)
		}
	})

	t.Run("no length, over the limit", func(t *testing.T) {
		t.Parallel()
		body := &trickle{data: make([]byte, 2*mib), step: 32 << 10, end: io.EOF}
		_, err := e.readBody(trickleRequest(body, -1))
		require.ErrorIs(t, err, ErrBodyTooLarge)
		for i, c := range body.caps {
			assert.LessOrEqual(t, c, mib+1, "read %d: over the limit and one byte", i)
		}
		assert.LessOrEqual(t, body.read, mib+1, "reading stops past the limit")
	})

	t.Run("longer than declared", func(t *testing.T) {
		t.Parallel()
		data := bytes.Repeat([]byte("y"), 100<<10)
		b, err := e.readBody(trickleRequest(&trickle{data: data, step: 4 << 10, end: io.EOF}, 10))
		require.NoError(t, err)
		assert.Equal(t, len(data), b.Len(), "a body longer than its Content-Length is read to its end, within the limit")
	})

	t.Run("declared over the limit", func(t *testing.T) {
		t.Parallel()
		body := &trickle{data: []byte("x"), step: 1, end: io.EOF}
		_, err := e.readBody(trickleRequest(body, mib+1))
		require.True(t, errors.Is(err, ErrBodyTooLarge), "413 before reading: %v", err)
		assert.Empty(t, body.caps, "nothing was read")
	})
}
