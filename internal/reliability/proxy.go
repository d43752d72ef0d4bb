package reliability

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a loopback TCP proxy placed between a client (a pgx pool) and a server
// (PostgreSQL), so a test can make the network fail on command: cut every connection,
// refuse new ones, stall (stop forwarding while keeping the connections open) and resume.
// It can also cut at a chosen moment of the PostgreSQL protocol: just before the server's
// answer to a given command reaches the client (see CutOnCommandComplete).
//
// Create it with Listen and close it with Close. It is safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	links   map[*link]struct{}
	down    bool
	stalled chan struct{} // open while stalled; closed (or nil) while forwarding
	closed  bool
	trigger *trigger // armed CutOnCommandComplete, or nil

	wg       sync.WaitGroup
	accepted atomic.Int64
	refused  atomic.Int64
	cut      atomic.Int64
}

// trigger is an armed CutOnCommandComplete.
type trigger struct {
	tag   string
	fired chan struct{}
}

// Listen starts a proxy on 127.0.0.1 (a free port) forwarding every connection to target
// (host:port).
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("reliability: listen: %w", err)
	}
	p := &Proxy{ln: ln, target: target, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's port.
func (p *Proxy) Port() uint16 { return uint16(p.ln.Addr().(*net.TCPAddr).Port) }

// Stats reports how many connections the proxy accepted, refused (while down) and cut.
func (p *Proxy) Stats() (accepted, refused, cut int64) {
	return p.accepted.Load(), p.refused.Load(), p.cut.Load()
}

// Open reports how many connections are being forwarded.
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// CutAll closes every forwarded connection, both sides, at once, and reports how many it
// closed. New connections are still accepted (unless the proxy is down).
func (p *Proxy) CutAll() int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		if l.close() {
			p.cut.Add(1)
		}
	}
	return len(links)
}

// Down cuts every connection and refuses new ones (accepted, then closed at once) until
// Up: the database is unreachable.
func (p *Proxy) Down() {
	p.mu.Lock()
	p.down = true
	p.mu.Unlock()
	p.CutAll()
}

// Up accepts connections again after Down.
func (p *Proxy) Up() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// Stall stops forwarding in both directions, on every connection and on new ones, while
// keeping them open: the database is paused. Bytes already read wait in the proxy.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
}

// Resume forwards again after Stall, starting with the bytes that waited.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
}

// CutOnCommandComplete arms a one-shot cut: the first time the server sends, on any
// connection, a CommandComplete message whose tag is tag (such as "COMMIT"), the proxy
// forwards what preceded that message and then cuts every connection, so the server has
// done the command and the client never learns it. The returned channel is closed when
// the cut has happened. Arming again replaces the previous trigger; Disarm removes it.
//
// The proxy follows the server's messages from the first byte of each connection, so it
// needs a client that does not negotiate TLS (sslmode=disable).
func (p *Proxy) CutOnCommandComplete(tag string) <-chan struct{} {
	t := &trigger{tag: tag, fired: make(chan struct{})}
	p.mu.Lock()
	p.trigger = t
	p.mu.Unlock()
	return t.fired
}

// Disarm removes an armed CutOnCommandComplete that has not fired.
func (p *Proxy) Disarm() {
	p.mu.Lock()
	p.trigger = nil
	p.mu.Unlock()
}

// Close stops the proxy: it stops accepting, cuts every connection and waits for its
// goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.CutAll()
	p.wg.Wait()
	return err
}

// gate returns the channel a pump waits on before forwarding: nil when forwarding.
func (p *Proxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stalled
}

// fire claims the armed trigger for tag, if any: only one connection fires it.
func (p *Proxy) fire(tag string) *trigger {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.trigger
	if t == nil || t.tag != tag {
		return nil
	}
	p.trigger = nil
	return t
}

func (p *Proxy) armed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.trigger != nil
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.down || p.closed
		if !refuse {
			p.wg.Add(1)
		}
		p.mu.Unlock()
		if refuse {
			p.refused.Add(1)
			_ = c.Close()
			continue
		}
		p.accepted.Add(1)
		go p.serve(c)
	}
}

// serve dials the target for client c and forwards between them until either side ends
// or the proxy cuts them.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	l := &link{client: c, server: s, done: make(chan struct{})}
	p.mu.Lock()
	if p.down || p.closed {
		p.mu.Unlock()
		l.close()
		return
	}
	p.links[l] = struct{}{}
	p.wg.Add(2)
	p.mu.Unlock()
	go p.pump(l, s, c, nil)
	go p.pump(l, c, s, &framer{})
}

// pump copies src to dst chunk by chunk, waiting while the proxy is stalled. For the
// server-to-client direction f follows the protocol messages, for CutOnCommandComplete.
func (p *Proxy) pump(l *link, dst, src net.Conn, f *framer) {
	defer p.wg.Done()
	defer func() {
		l.close()
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if g := p.gate(); g != nil {
				select {
				case <-g:
				case <-l.done:
					return
				}
			}
			chunk := buf[:n]
			if f != nil {
				var t *trigger
				var stop func(string) bool
				if p.armed() {
					stop = func(tag string) bool { t = p.fire(tag); return t != nil }
				}
				if at, ok := f.feed(chunk, stop); ok {
					if at > 0 {
						_, _ = dst.Write(chunk[:at])
					}
					p.CutAll()
					close(t.fired)
					return
				}
			}
			if _, werr := dst.Write(chunk); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// link is one forwarded connection: the client's side and the server's.
type link struct {
	client, server net.Conn
	done           chan struct{}
	once           sync.Once
}

// close closes both sides; it reports whether this call did it.
func (l *link) close() bool {
	did := false
	l.once.Do(func() {
		did = true
		close(l.done)
		_ = l.client.Close()
		_ = l.server.Close()
	})
	return did
}

// framer follows the messages of a PostgreSQL server's stream (a type byte, a 4-byte
// big-endian length counting itself, the body) across chunks, to find CommandComplete
// ('C') messages and their tags.
type framer struct {
	hdr   [5]byte
	hdrN  int
	left  int    // body bytes of the current message still to come
	tag   []byte // body of a CommandComplete so far
	inTag bool
}

// maxTag bounds the tags the framer keeps (CommandComplete tags are short).
const maxTag = 64

// feed consumes chunk. For every complete CommandComplete message it calls stop with the
// message's tag; if stop returns true, feed returns at once with the offset in chunk at
// which that message began (0 when it began in an earlier chunk) and ok true. The framer
// must then not be fed again (the caller cuts the connection).
func (f *framer) feed(chunk []byte, stop func(tag string) bool) (at int, ok bool) {
	start := 0 // where the current message began in chunk (0: in an earlier one)
	i := 0
	for i < len(chunk) {
		if f.hdrN < 5 {
			if f.hdrN == 0 {
				start = i
			}
			k := copy(f.hdr[f.hdrN:], chunk[i:])
			f.hdrN += k
			i += k
			if f.hdrN < 5 {
				break
			}
			f.left = int(binary.BigEndian.Uint32(f.hdr[1:5])) - 4
			f.inTag = f.hdr[0] == 'C'
			f.tag = f.tag[:0]
			if f.left <= 0 {
				f.hdrN = 0
			}
			continue
		}
		k := min(f.left, len(chunk)-i)
		if f.inTag && len(f.tag) < maxTag {
			f.tag = append(f.tag, chunk[i:i+min(k, maxTag-len(f.tag))]...)
		}
		f.left -= k
		i += k
		if f.left == 0 {
			f.hdrN = 0
			if f.inTag && stop != nil {
				t := string(f.tag)
				if len(t) > 0 && t[len(t)-1] == 0 {
					t = t[:len(t)-1]
				}
				if stop(t) {
					return start, true
				}
			}
		}
	}
	return 0, false
}
