package grpcidem_test

import (
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/idemkit/idem/grpcidem"
)

// cutProxy forwards TCP connections to a gRPC server and drops answers: it reads the
// server's HTTP/2 frames and, when cut says so for a response (the first HEADERS frame of
// a stream, counted from 1 across connections), closes both connections instead of
// forwarding it. The server has run the call; the client never hears of it and sees the
// connection fail (UNAVAILABLE).
type cutProxy struct {
	ln        net.Listener
	target    string
	cut       func(n int64) bool
	responses atomic.Int64
	cuts      atomic.Int64
	wg        sync.WaitGroup
}

func startCutProxy(t *testing.T, target string, cut func(n int64) bool) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{ln: ln, target: target, cut: cut}
	p.wg.Go(p.accept)
	t.Cleanup(func() { _ = ln.Close(); p.wg.Wait() })
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		var once sync.Once
		closeBoth := func() { once.Do(func() { _ = c.Close(); _ = s.Close() }) }
		p.wg.Go(func() { _, _ = io.Copy(s, c); closeBoth() })
		p.wg.Go(func() { p.fromServer(c, s); closeBoth() })
	}
}

// fromServer forwards the server's frames to the client, frame by frame, until the
// connection ends or a response is cut.
func (p *cutProxy) fromServer(client, server net.Conn) {
	started := map[uint32]bool{} // streams whose response has begun
	head := make([]byte, 9)
	for {
		if _, err := io.ReadFull(server, head); err != nil {
			return
		}
		length := int(head[0])<<16 | int(head[1])<<8 | int(head[2])
		frame := make([]byte, 9+length)
		copy(frame, head)
		if _, err := io.ReadFull(server, frame[9:]); err != nil {
			return
		}
		const headers = 0x1
		if stream := binary.BigEndian.Uint32(head[5:9]) & 0x7fffffff; head[3] == headers && stream != 0 && !started[stream] {
			started[stream] = true
			if p.cut(p.responses.Add(1)) {
				p.cuts.Add(1)
				return
			}
		}
		if _, err := client.Write(frame); err != nil {
			return
		}
	}
}

// retryPolicy is a service config that has gRPC itself retry UNAVAILABLE.
const retryPolicy = `{"methodConfig":[{"name":[{"service":"grpc.testing.TestService"}],
  "retryPolicy":{"maxAttempts":5,"initialBackoff":"0.01s","maxBackoff":"0.1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`

// Over a connection that loses every other answer after the server ran the call, gRPC's
// own retry policy resends each call with the key the client interceptor set before the
// first attempt: every logical call runs exactly once, and its answer is the replay of
// that run.
func TestLossyConnectionRunsEachCallOnce(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			s, b := st.open(t)
			svc := &service{backend: b}
			proxy := startCutProxy(t, serve(t, newEngine(t, s), testConfig(), svc, nil), func(n int64) bool { return n%2 == 1 })
			conn := dial(t, proxy.addr(), grpc.WithDefaultServiceConfig(retryPolicy),
				grpc.WithUnaryInterceptor(grpcidem.UnaryClientInterceptor(grpcidem.ClientConfig{MaxAttempts: 1})))
			const calls = 10
			keys := map[string]bool{}
			for i := range calls {
				var res grpcidem.Result
				c := unary(t, conn, unaryCall, "acme", "", request("book"), grpcidem.Report(&res))
				require.NoError(t, c.err, "call %d", i)
				assert.True(t, c.replayed(), "call %d: the first answer was lost, this is the replay", i)
				assert.Equal(t, 1, res.Attempts, "gRPC retried, not the interceptor")
				assert.Equal(t, []string{"/orders/" + strconv.Itoa(i+1)}, c.header.Get("location"), "call %d", i)
				keys[res.Key] = true
			}
			assert.Len(t, keys, calls, "one key per logical call")
			assert.EqualValues(t, calls, proxy.cuts.Load())
			assert.EqualValues(t, calls, svc.runs.Load(), "exactly one execution per logical call")
			if b != nil {
				for k := range keys {
					assert.Equal(t, 1, b.Orders(t, k))
				}
			}
		})
	}
}
