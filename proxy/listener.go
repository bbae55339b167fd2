package proxy

import (
	"crypto/tls"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/edgelb/edge/proxy/internal/ready"
	"github.com/pires/go-proxyproto"
)

// readinessOn selects the readiness-driven splice (Linux) for connections
// accepted through WrapListener; false keeps every connection on two
// goroutines.
const readinessOn = true

// WrapListener returns l with connections that the readiness-driven splice
// can take over after the upgrade (see doc.go). Apply it over
// ListenProxyProtocol and under tls.NewListener: crypto/tls and net/http
// must see the returned connections from the start, because a tls.Conn's
// transport cannot be swapped afterwards.
//
// Until the takeover the connections behave exactly like the accepted ones
// (blocking reads, deadlines), so the TLS handshake, PROXY header and HTTP
// phase are unchanged. Connections accepted without the wrapper are spliced
// by two goroutines instead.
func WrapListener(l net.Listener) net.Listener { return &readyListener{Listener: l} }

type readyListener struct {
	net.Listener
	lim *AcceptLimit   // nil: no cap
	cnt *ListenerConns // nil: not counted
	rec *recordLayer   // nil: crypto/tls keeps the records
}

// ListenerConns counts the open client sockets of one listener, from
// accept until their descriptor is closed (after a takeover, when the
// splice closes its duplicate).
type ListenerConns struct {
	open atomic.Int64
	// closed wakes a WaitHTTPPhase when a socket closes.
	closed waker
}

// Open returns the number of open client sockets.
func (n *ListenerConns) Open() int64 { return n.open.Load() }

// WrapListenerCount is WrapListenerLimit with the listener's own sockets
// also counted in n, for a per-listener gauge.
func WrapListenerCount(l net.Listener, lim *AcceptLimit, n *ListenerConns) net.Listener {
	return &readyListener{Listener: l, lim: lim, cnt: n}
}

func (l *readyListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			l.lim.acceptFailed(err)
			return nil, err
		}
		if !l.lim.take() {
			c.Close()
			continue
		}
		if l.cnt != nil {
			l.cnt.open.Add(1)
		}
		ec := &edgeConn{Conn: c, l: l}
		if l.rec != nil && recordLayerOn {
			ec.log = &tlsLog{keys: l.rec.keys}
		}
		return ec, nil
	}
}

// edgeConn is an accepted connection. Before the takeover every method
// goes to the accepted conn; after it (Linux) the conn is closed and
// dropped, reads and writes go to a sock that never blocks, and deadlines
// are ignored: the splice enforces its own timeouts.
type edgeConn struct {
	net.Conn // nil after the takeover

	s   *ready.Sock // set by the takeover
	pre []byte      // bytes a layer below (PROXY reader) still held at takeover

	// The client's address, kept for RemoteAddr after the takeover (the
	// local address is asked of the socket). A TCP one, the usual, is
	// kept as a value: the *net.TCPAddr accept made keeps its IP in the
	// accept's Sockaddr, two objects (80 bytes) for every held
	// connection. Any other (a PROXY header's UNIX or UDP source) is
	// kept as it came in raddr.
	rap   netip.AddrPort
	raddr net.Addr

	// l counts this socket under its AcceptLimit and ListenerConns until
	// its descriptor closes; nil: not counted (an adopted connection).
	l        *readyListener
	released atomic.Bool
	// buffered: reads return only what a layer below already holds (pre)
	// and would-block instead of reading the socket, while the takeover
	// takes from crypto/tls what it already read (tlsrecord_linux.go).
	buffered bool

	log *tlsLog // what crypto/tls read and wrote, until the takeover; nil: not kept

	// held, while a handshake worker starts this conn's TLS handshake, is
	// closed by its first read: the worker holds crypto/tls's handshake
	// lock from then on (handshakers.go). Only the worker touches it.
	held chan struct{}
}

// release gives the socket's place under the AcceptLimit back, once.
func (c *edgeConn) release() {
	l := c.l
	if l != nil && (l.lim != nil || l.cnt != nil) && c.released.CompareAndSwap(false, true) {
		if l.lim != nil {
			l.lim.done()
		}
		if l.cnt != nil {
			l.cnt.open.Add(-1)
			l.cnt.closed.poke()
		}
	}
}

// keepRemote keeps a, the client's address, for RemoteAddr after the
// takeover.
func (c *edgeConn) keepRemote(a net.Addr) {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ap := ta.AddrPort(); ap.Addr().IsValid() {
			c.rap, c.raddr = ap, nil
			return
		}
	}
	c.rap, c.raddr = netip.AddrPort{}, a
}

func (c *edgeConn) Read(p []byte) (int, error) {
	if c.held != nil {
		c.holdHandshake()
	}
	n, err := c.read(p)
	if c.log != nil && n > 0 {
		c.log.read(p[:n])
	}
	return n, err
}

// holdHandshake tells the Accept waiting for a handshake worker that the
// worker holds the handshake, once.
func (c *edgeConn) holdHandshake() {
	if h := c.held; h != nil {
		c.held = nil
		close(h)
	}
}

func (c *edgeConn) read(p []byte) (int, error) {
	if c.s == nil {
		return c.Conn.Read(p)
	}
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		if len(c.pre) == 0 {
			c.pre = nil
		}
		return n, nil
	}
	if c.buffered {
		return 0, ready.ErrWouldBlock
	}
	return c.s.Read(p)
}

// Write never reports a would-block after the takeover: what the socket
// does not take is queued. crypto/tls turns any write error into a
// permanent one (docs/ARCHITECTURE.md), so only a dead socket is an error.
func (c *edgeConn) Write(p []byte) (int, error) {
	if c.log != nil {
		c.log.wrote(p)
	}
	if c.s == nil {
		return c.Conn.Write(p)
	}
	return c.s.Write(p)
}

func (c *edgeConn) Close() error {
	if c.log != nil {
		c.log.end()
	}
	if c.s == nil {
		err := c.Conn.Close()
		c.release()
		return err
	}
	return c.s.Close()
}

// CloseWrite sends a FIN, after the queued bytes once taken over.
func (c *edgeConn) CloseWrite() error {
	if c.s != nil {
		return c.s.CloseWrite()
	}
	switch v := c.Conn.(type) {
	case interface{ CloseWrite() error }:
		return v.CloseWrite()
	case *proxyproto.Conn:
		if tc, ok := v.TCPConn(); ok {
			return tc.CloseWrite()
		}
	}
	return nil
}

func (c *edgeConn) LocalAddr() net.Addr {
	if c.s == nil {
		return c.Conn.LocalAddr()
	}
	return c.s.LocalAddr()
}

func (c *edgeConn) RemoteAddr() net.Addr {
	if c.s == nil {
		return c.Conn.RemoteAddr()
	}
	if c.rap.IsValid() {
		return net.TCPAddrFromAddrPort(c.rap)
	}
	return c.raddr
}

func (c *edgeConn) SetDeadline(t time.Time) error {
	if c.s == nil {
		return c.Conn.SetDeadline(t)
	}
	return nil
}

func (c *edgeConn) SetReadDeadline(t time.Time) error {
	if c.s == nil {
		return c.Conn.SetReadDeadline(t)
	}
	return nil
}

func (c *edgeConn) SetWriteDeadline(t time.Time) error {
	if c.s == nil {
		return c.Conn.SetWriteDeadline(t)
	}
	return nil
}

// NetConn returns the accepted conn (nil after the takeover), so the
// two-goroutine splice finds the socket under it.
func (c *edgeConn) NetConn() net.Conn { return c.Conn }

// edgeConnOf finds our conn under a hijacked client connection.
func edgeConnOf(c net.Conn) *edgeConn {
	switch v := c.(type) {
	case *edgeConn:
		return v
	case *tls.Conn:
		ec, _ := v.NetConn().(*edgeConn)
		return ec
	}
	return nil
}

// tcpOf returns the TCP socket under an accepted conn, through TLS, the
// accept cap's edgeConn and a PROXY header's reader; nil when there is
// none (an edgeConn whose socket the readiness splice took over).
func tcpOf(c net.Conn) *net.TCPConn {
	switch v := c.(type) {
	case *net.TCPConn:
		return v
	case *proxyproto.Conn:
		tc, _ := v.TCPConn()
		return tc
	case *tls.Conn:
		return tcpOf(v.NetConn())
	case *edgeConn:
		return tcpOf(v.Conn)
	}
	return nil
}
