package reliability_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/reliability"
)

// echoServer answers every line with the same line, until closed at cleanup.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(c, c)
				_ = c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func startProxy(t *testing.T, target string) *reliability.Proxy {
	t.Helper()
	p, err := reliability.Listen(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// roundTrip writes line and reads the echo, within d.
func roundTrip(c net.Conn, r *bufio.Reader, line string, d time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	s, err := r.ReadString('\n')
	if len(s) > 0 {
		s = s[:len(s)-1]
	}
	return s, err
}

func TestProxyForwardsCutsStallsAndRefuses(t *testing.T) {
	t.Parallel()
	p := startProxy(t, echoServer(t))

	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, "hello", 5*time.Second); err != nil || got != "hello" {
		t.Fatalf("forwarding: %q, %v", got, err)
	}

	// Stalled: nothing comes back, the connection stays open; after Resume the waiting
	// bytes arrive.
	p.Stall()
	if _, err := roundTrip(c, r, "paused", 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("stalled proxy answered: %v", err)
	}
	p.Resume()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "paused\n" {
		t.Fatalf("after resume: %q, %v", got, err)
	}

	// Cut: the client sees the connection end.
	if n := p.CutAll(); n != 1 {
		t.Fatalf("CutAll cut %d connections, want 1", n)
	}
	if _, err := roundTrip(c, r, "after cut", 5*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("cut connection still works: %v", err)
	}

	// Down: new connections are closed at once; Up: they work again.
	p.Down()
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(c2, bufio.NewReader(c2), "down", 5*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("proxy down but a connection worked: %v", err)
	}
	c2.Close()
	p.Up()
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(c3, bufio.NewReader(c3), "up", 5*time.Second); err != nil || got != "up" {
		t.Fatalf("after Up: %q, %v", got, err)
	}
	if accepted, refused, cut := p.Stats(); accepted != 2 || refused != 1 || cut != 1 {
		t.Fatalf("stats: accepted %d refused %d cut %d, want 2 1 1", accepted, refused, cut)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// pgMessage frames a PostgreSQL backend message.
func pgMessage(typ byte, body string) []byte {
	b := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(4+len(body)))
	return append(b, body...)
}

// TestProxyCutOnCommandComplete feeds the proxy a server stream split at every byte
// boundary and checks that it forwards exactly what precedes the COMMIT message, then
// cuts.
func TestProxyCutOnCommandComplete(t *testing.T) {
	t.Parallel()
	before := append(pgMessage('1', ""), pgMessage('C', "UPDATE 1\x00")...)
	stream := append(append(append([]byte(nil), before...), pgMessage('C', "COMMIT\x00")...), pgMessage('Z', "I")...)
	for split := 1; split < len(stream); split++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p, err := reliability.Listen(ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		// The second part is sent only once the proxy has read the first, so that it
		// reads the stream in two chunks split exactly there.
		var readBytes atomic.Int64
		firstRead := make(chan struct{})
		var firstChunk atomic.Int64
		reliability.OnServerRead(p, func(n int) {
			firstChunk.CompareAndSwap(0, int64(n))
			if after := readBytes.Add(int64(n)); after >= int64(split) && after-int64(n) < int64(split) {
				close(firstRead)
			}
		})
		served := make(chan struct{})
		go func() {
			defer close(served)
			s, err := ln.Accept()
			if err != nil {
				return
			}
			defer s.Close()
			_, _ = s.Write(stream[:split])
			select {
			case <-firstRead:
			case <-time.After(5 * time.Second):
				return
			}
			_, _ = s.Write(stream[split:])
			_, _ = io.Copy(io.Discard, s)
		}()
		fired := p.CutOnCommandComplete("COMMIT")
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(c)
		if err != nil {
			t.Fatalf("split %d: read: %v", split, err)
		}
		select {
		case <-fired:
		case <-time.After(5 * time.Second):
			t.Fatalf("split %d: trigger never fired", split)
		}
		if n := firstChunk.Load(); n != int64(split) {
			t.Fatalf("split %d: the proxy's first read was %d bytes", split, n)
		}
		// Everything before COMMIT arrives, except a tail of a message cut across chunks;
		// nothing of COMMIT's CommandComplete is complete.
		if len(got) > len(before)+len(pgMessage('C', "COMMIT\x00"))-1 || string(got) != string(stream[:len(got)]) {
			t.Fatalf("split %d: client got %q", split, got)
		}
		if split > len(before) && len(got) < len(before) {
			t.Fatalf("split %d: client got %q, want at least the messages before COMMIT", split, got)
		}
		c.Close()
		_ = p.Close()
		_ = ln.Close()
		<-served
	}
}

// TestProxyLoseNextReply: on a raw proxy, the command sent after LoseNextReply reaches the
// server and its reply does not reach the client, whose connection is cut; a new
// connection then goes through.
func TestProxyLoseNextReply(t *testing.T) {
	t.Parallel()
	p, err := reliability.ListenRaw(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, "before", 5*time.Second); err != nil || got != "before" {
		t.Fatalf("before arming: %q, %v", got, err)
	}
	lost := p.LoseNextReply()
	if got, err := roundTrip(c, r, "lost", 5*time.Second); err == nil {
		t.Fatalf("the reply after LoseNextReply reached the client: %q", got)
	}
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Fatal("LoseNextReply's channel was not closed")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got, err := roundTrip(c2, bufio.NewReader(c2), "after", 5*time.Second); err != nil || got != "after" {
		t.Fatalf("a new connection after the lost reply: %q, %v", got, err)
	}
}
