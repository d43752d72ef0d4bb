package reliability

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a loopback TCP proxy placed between a client (a connection pool) and a
// database server (PostgreSQL, or MySQL/MariaDB), so a test can make the network fail on
// command: cut every connection, refuse new ones, stall (stop forwarding while keeping the
// connections open) and resume. It follows the protocol's messages in both directions, so
// it can also cut at a chosen moment of a command: just before the client's command
// reaches the server, just before the server's answer reaches the client, or just after
// (see CutAt, CutOnClientBytes and CutOnCommandComplete).
//
// Create it with Listen (PostgreSQL), ListenMySQL or ListenRaw (any other protocol, Redis's
// say, whose messages it does not follow) and close it with Close. It is safe for
// concurrent use. It needs clients that do not negotiate TLS or compression
// (sslmode=disable; the MySQL driver's default).
type Proxy struct {
	ln     net.Listener
	target string
	proto  protocol

	mu      sync.Mutex
	links   map[*link]struct{}
	down    bool
	stalled chan struct{} // open while stalled; closed (or nil) while forwarding
	closed  bool
	trigger *trigger // armed one-shot cut, or nil

	// serverRead, when set (tests of the proxy itself), sees the size of every chunk the
	// proxy reads from a server, before it looks at it.
	serverRead atomic.Pointer[func(n int)]

	wg       sync.WaitGroup
	accepted atomic.Int64
	refused  atomic.Int64
	cut      atomic.Int64
}

// protocol is the wire protocol the proxy frames.
type protocol int

const (
	postgresProto protocol = iota // a type byte, a 4-byte big-endian length counting itself, the body; the client's first message has no type byte
	mysqlProto                    // a 3-byte little-endian payload length, a sequence byte, the payload (whose first byte is the command or the reply's kind)
	rawProto                      // not followed: every chunk a client sends is one command, every chunk a server sends one reply
)

// Moment is when, around a client's command, an armed CutAt cuts.
type Moment int

const (
	// BeforeCommand: the command never reaches the server.
	BeforeCommand Moment = iota + 1
	// BeforeReply: the server receives and runs the command; its reply never reaches the
	// client.
	BeforeReply
	// AfterReply: the client receives the whole reply; then the connections are cut.
	AfterReply
	// Sent: nothing is cut; the channel closes once the command is on its way to the
	// server (for a cut the test times itself).
	Sent
)

// trigger is an armed cut.
type trigger struct {
	// Exactly one of these is set: the server's CommandComplete tag (PostgreSQL), the
	// client's simple query, bytes the client sends, or any command (LoseNextReply).
	tag     string
	query   string
	pattern []byte
	next    bool
	at      Moment
	fired   chan struct{}
}

// Listen starts a proxy on 127.0.0.1 (a free port) forwarding every connection to a
// PostgreSQL server at target (host:port).
func Listen(target string) (*Proxy, error) { return listen(target, postgresProto) }

// ListenMySQL starts a proxy on 127.0.0.1 (a free port) forwarding every connection to
// a MySQL or MariaDB server at target (host:port).
func ListenMySQL(target string) (*Proxy, error) { return listen(target, mysqlProto) }

// ListenRaw starts a proxy on 127.0.0.1 (a free port) forwarding every connection to a
// server at target (host:port) whose protocol the proxy does not follow (Redis): every
// chunk a client sends counts as one command and the server's next chunk as its reply.
// Stall, the cuts of every connection and LoseNextReply work on it; the triggers that
// read a protocol's messages (CutAt, CutOnCommandComplete, CutOnClientBytes) do not.
func ListenRaw(target string) (*Proxy, error) { return listen(target, rawProto) }

func listen(target string, proto protocol) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("reliability: listen: %w", err)
	}
	p := &Proxy{ln: ln, target: target, proto: proto, links: map[*link]struct{}{}}
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

// CutOnCommandComplete arms a one-shot cut on a PostgreSQL proxy: the first time the
// server sends, on any connection, a CommandComplete message whose tag is tag (such as
// "COMMIT"), the proxy forwards what preceded that message and then cuts every
// connection, so the server has done the command and the client never learns it. The
// returned channel is closed when the cut has happened. Arming again replaces the
// previous trigger; Disarm removes it.
func (p *Proxy) CutOnCommandComplete(tag string) <-chan struct{} {
	return p.arm(&trigger{tag: tag, fired: make(chan struct{})})
}

// CutAt arms a one-shot cut at moment at of the first simple-protocol command whose text
// is query (compared without case and surrounding space or ';', such as "COMMIT": a
// PostgreSQL Query message, a MySQL COM_QUERY), on any connection. Except for Sent, the
// cut takes the proxy Down: every connection is cut and new ones are refused until Up.
// The returned channel is closed when the cut (or, for Sent, the forwarding) has
// happened. For BeforeReply and AfterReply the reply is everything the server sends next
// on that connection: for PostgreSQL up to and including ReadyForQuery, for MySQL one
// packet (OK or ERR). Arming again replaces the previous trigger; Disarm removes it.
func (p *Proxy) CutAt(query string, at Moment) <-chan struct{} {
	return p.arm(&trigger{query: normQuery([]byte(query)), at: at, fired: make(chan struct{})})
}

// CutOnClientBytes arms a one-shot cut: the first client message, on any connection,
// whose first 4 KiB hold pattern (a key sent as a statement's parameter, say) never
// reaches the server, and the proxy goes Down as for CutAt. The returned channel is
// closed when the cut has happened.
func (p *Proxy) CutOnClientBytes(pattern []byte) <-chan struct{} {
	return p.arm(&trigger{pattern: bytes.Clone(pattern), at: BeforeCommand, fired: make(chan struct{})})
}

// LoseNextReply arms a one-shot lost reply: the next command a client sends, on any
// connection, that runs something on the server (a PostgreSQL Bind or simple Query other
// than a ping's, a MySQL COM_QUERY or COM_STMT_EXECUTE, any chunk on a ListenRaw proxy;
// not a statement's preparation) reaches the server, which runs it; the reply never
// reaches the client: the proxy drops it and cuts that connection, so the client sees a
// network error after the server did the work (a client that sends the command again
// does so on a new connection, which the proxy accepts). The returned channel is closed
// when the reply has been dropped.
func (p *Proxy) LoseNextReply() <-chan struct{} {
	return p.arm(&trigger{next: true, at: BeforeReply, fired: make(chan struct{})})
}

func (p *Proxy) arm(t *trigger) <-chan struct{} {
	p.mu.Lock()
	p.trigger = t
	p.mu.Unlock()
	return t.fired
}

// Disarm removes an armed trigger that has not fired.
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

// take claims the armed trigger if match accepts it: only one connection fires it.
func (p *Proxy) take(match func(*trigger) bool) *trigger {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.trigger
	if t == nil || !match(t) {
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
	go p.pump(l, s, c, &framer{proto: p.proto, untyped: p.proto == postgresProto}, p.fromClient)
	go p.pump(l, c, s, &framer{proto: p.proto}, p.fromServer)
}

// A watcher looks at the complete messages of one chunk a pump read, before the chunk is
// forwarded. It may stop the pump: then only chunk[:keep] is forwarded, done runs, and
// the pump ends. Otherwise, if done is not nil, it runs after the chunk is forwarded.
type watcher func(l *link, chunk []byte, f *framer) (stop bool, keep int, done func())

// pump copies src to dst chunk by chunk, waiting while the proxy is stalled, and shows
// every chunk to watch first.
func (p *Proxy) pump(l *link, dst, src net.Conn, f *framer, watch watcher) {
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
			stop, keep, done := watch(l, chunk, f)
			if stop {
				if keep > 0 {
					_, _ = dst.Write(chunk[:keep])
				}
				done()
				return
			}
			if _, werr := dst.Write(chunk); werr != nil {
				return
			}
			if done != nil {
				done()
			}
		}
		if err != nil {
			return
		}
	}
}

// fromClient watches the client's commands for CutAt and CutOnClientBytes.
func (p *Proxy) fromClient(l *link, chunk []byte, f *framer) (stop bool, keep int, done func()) {
	var t *trigger
	check := p.armed()
	f.feed(chunk, func(m message) bool {
		if !check {
			return false
		}
		t = p.take(func(t *trigger) bool {
			switch {
			case t.pattern != nil:
				return bytes.Contains(m.body, t.pattern)
			case t.query != "":
				return m.isQuery(p.proto) && normQuery(m.body) == t.query
			case t.next:
				return m.runs(p.proto)
			}
			return false
		})
		if t == nil {
			return false
		}
		switch t.at {
		case BeforeCommand:
			stop, keep = true, m.start
		case BeforeReply, AfterReply:
			l.pending.Store(t) // before the command is forwarded: its reply cannot come first
		}
		return true
	})
	switch {
	case t == nil:
		return false, 0, nil
	case stop:
		return true, keep, func() { p.Down(); close(t.fired) }
	case t.at == Sent:
		return false, 0, func() { close(t.fired) }
	}
	return false, 0, nil
}

// fromServer watches the server's replies for CutOnCommandComplete and for the reply a
// CutAt waits for on this link.
func (p *Proxy) fromServer(l *link, chunk []byte, f *framer) (stop bool, keep int, done func()) {
	if read := p.serverRead.Load(); read != nil {
		(*read)(len(chunk))
	}
	pending := l.pending.Load()
	if pending != nil && pending.at == BeforeReply {
		if pending.next { // LoseNextReply: this connection only
			return true, 0, func() { l.close(); p.cut.Add(1); close(pending.fired) }
		}
		return true, 0, func() { p.Down(); close(pending.fired) }
	}
	var t *trigger
	check := p.armed()
	f.feed(chunk, func(m message) bool {
		if pending != nil && (p.proto == mysqlProto || m.typ == 'Z') {
			stop, keep = true, m.end
			return true
		}
		if !check || p.proto != postgresProto || m.typ != 'C' {
			return false
		}
		tag := string(bytes.TrimRight(m.body, "\x00"))
		if t = p.take(func(t *trigger) bool { return t.tag != "" && t.tag == tag }); t != nil {
			stop, keep = true, m.start
			return true
		}
		return false
	})
	switch {
	case !stop:
		return false, 0, nil
	case pending != nil && t == nil:
		return true, keep, func() { p.Down(); close(pending.fired) }
	}
	return true, keep, func() { p.CutAll(); close(t.fired) }
}

// normQuery is a command's text as CutAt compares it.
func normQuery(b []byte) string {
	return string(bytes.ToUpper(bytes.Trim(b, " \t\r\n;\x00")))
}

// link is one forwarded connection: the client's side and the server's.
type link struct {
	client, server net.Conn
	done           chan struct{}
	once           sync.Once
	pending        atomic.Pointer[trigger] // a CutAt waiting for the server's reply
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

// message is one complete protocol message as a framer saw it.
type message struct {
	typ        byte   // PostgreSQL: the type byte (0 for the untyped startup message); MySQL: the payload's first byte
	body       []byte // the first maxBody bytes after typ
	start, end int    // where the message began (0: in an earlier chunk) and ended in the chunk
}

// isQuery reports whether m is a simple-protocol query: PostgreSQL's Query ('Q'), a
// MySQL COM_QUERY (0x03).
func (m message) isQuery(proto protocol) bool {
	if proto == mysqlProto {
		return m.typ == 0x03
	}
	return m.typ == 'Q'
}

// runs reports whether m makes the server run something (LoseNextReply): a PostgreSQL
// Bind (the prepared statement's run follows it in the same message train) or a simple
// Query other than pgx's ping ("-- ping"); a MySQL COM_QUERY or COM_STMT_EXECUTE; any
// chunk of a protocol the proxy does not follow.
func (m message) runs(proto protocol) bool {
	switch proto {
	case mysqlProto:
		return m.typ == 0x03 || m.typ == 0x17
	case rawProto:
		return true
	}
	return m.typ == 'B' || m.typ == 'Q' && !bytes.HasPrefix(bytes.TrimSpace(m.body), []byte("--"))
}

// maxBody bounds what the framer keeps of a message's body.
const maxBody = 4 << 10

// framer follows one direction's messages across chunks.
type framer struct {
	proto   protocol
	untyped bool // PostgreSQL client: the next message (startup) has no type byte
	hdr     [5]byte
	hdrN    int
	need    int // header bytes of the current message
	left    int // body bytes of the current message still to come
	typ     byte
	gotTyp  bool // MySQL: the payload's first byte has been read
	body    []byte
}

// feed consumes chunk, calling visit with every message that ends in it, in order, until
// visit returns true. The framer must not be fed again after visit returned true (the
// caller cuts the connection).
func (f *framer) feed(chunk []byte, visit func(message) bool) {
	if f.proto == rawProto {
		visit(message{body: chunk[:min(len(chunk), maxBody)], end: len(chunk)})
		return
	}
	start := 0
	i := 0
	for i < len(chunk) {
		if f.need == 0 { // a new message
			start = i
			f.hdrN, f.body, f.gotTyp = 0, f.body[:0], false
			switch {
			case f.proto == mysqlProto:
				f.need = 4
			case f.untyped:
				f.need, f.typ = 4, 0
			default:
				f.need = 5
			}
		}
		if f.hdrN < f.need {
			k := copy(f.hdr[f.hdrN:f.need], chunk[i:])
			f.hdrN += k
			i += k
			if f.hdrN < f.need {
				break
			}
			switch {
			case f.proto == mysqlProto:
				f.left = int(f.hdr[0]) | int(f.hdr[1])<<8 | int(f.hdr[2])<<16
			case f.untyped:
				f.left = int(binary.BigEndian.Uint32(f.hdr[0:4])) - 4
				f.untyped = false
			default:
				f.typ = f.hdr[0]
				f.left = int(binary.BigEndian.Uint32(f.hdr[1:5])) - 4
			}
		}
		k := min(f.left, len(chunk)-i)
		seg := chunk[i : i+k]
		if f.proto == mysqlProto && !f.gotTyp && len(seg) > 0 {
			f.typ, f.gotTyp, seg = seg[0], true, seg[1:]
		}
		if room := maxBody - len(f.body); room > 0 {
			f.body = append(f.body, seg[:min(len(seg), room)]...)
		}
		f.left -= k
		i += k
		if f.left <= 0 {
			f.need = 0
			if visit(message{typ: f.typ, body: f.body, start: start, end: i}) {
				return
			}
		}
	}
}
