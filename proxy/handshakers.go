package proxy

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// A TLS server handshake runs deep frames (the ClientHello's parsing, the
// ECDSA signature): on the fresh goroutine net/http starts for every
// connection it grows the stack twice, from 4 to 8 and from 8 to 16 KiB,
// each growth a copy of the whole stack with every frame adjusted
// (docs/BENCHMARKS.md, "connection set-up, before and after", counts
// runtime.newstack's instructions per connection without and with the
// workers). So ListenTLS's
// listener starts every handshake on one of a few long-lived goroutines
// whose stacks have grown already, and net/http is none the wiser: its
// own goroutine still calls HandshakeContext, which waits for the
// handshake in progress (crypto/tls runs one handshake per conn under its
// handshake lock, and a second caller gets the first one's result) and
// goes on exactly as before, with its deadlines, its error log (the
// listener's handshake-failure metric), its 400 to a client speaking plain
// HTTP and Shutdown's view of the connection unchanged. The rest of the
// connection's set-up runs on net/http's goroutine within 8 KiB (dial.go
// keeps its frames small for that).
//
// A worker holds a connection for its whole handshake, the client's round
// trip included, so the set is bounded (maxHandshakers) and a connection
// that finds no idle worker once that many exist is handshaken by
// net/http's goroutine as before: a flood of slow handshakes costs what it
// did, and holds no one else's place.
const (
	maxHandshakers = 64
	// handshakerIdle is how long a worker waits for a connection before
	// it ends: a burst's workers do not outlive it for long.
	handshakerIdle = 30 * time.Second
)

// handshakeListener is tls.NewListener over a readyListener, each
// handshake started on a worker (see above). Its workers end with Close,
// or once idle for handshakerIdle.
type handshakeListener struct {
	net.Listener
	cfg *tls.Config
	max int32 // workers at most

	work      chan *tls.Conn // unbuffered: only an idle worker takes one
	live      atomic.Int32   // workers running
	closed    chan struct{}
	closeOnce sync.Once
}

func newHandshakeListener(l net.Listener, cfg *tls.Config) *handshakeListener {
	return &handshakeListener{Listener: l, cfg: cfg, max: maxHandshakers, work: make(chan *tls.Conn), closed: make(chan struct{})}
}

// Accept returns the next connection as a *tls.Conn, as tls.NewListener's
// does, once a worker holds its handshake (or none could take it).
func (l *handshakeListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := tls.Server(c, l.cfg)
	if ec, ok := c.(*edgeConn); ok {
		l.hand(tc, ec)
	}
	return tc, nil
}

// hand gives tc's handshake to an idle worker, or to a new one below the
// bound, and waits until the worker holds crypto/tls's handshake lock:
// net/http's goroutine must not take it first.
func (l *handshakeListener) hand(tc *tls.Conn, ec *edgeConn) {
	held := make(chan struct{})
	ec.held = held
	select {
	case l.work <- tc:
	default:
		if l.live.Add(1) > l.max {
			l.live.Add(-1)
			ec.held = nil
			return
		}
		go l.run(tc)
	}
	<-held
}

// run is one worker: it handshakes tc, then each connection it is handed,
// until the listener closes or none came for handshakerIdle.
func (l *handshakeListener) run(tc *tls.Conn) {
	defer l.live.Add(-1)
	idle := time.NewTimer(handshakerIdle)
	defer idle.Stop()
	for {
		handshake(tc)
		// A handshake that ended before its first read still lets Accept
		// go on.
		tc.NetConn().(*edgeConn).holdHandshake()
		idle.Reset(handshakerIdle)
		select {
		case tc = <-l.work:
		case <-idle.C:
			return
		case <-l.closed:
			return
		}
	}
}

// handshake runs tc's handshake on a worker. It is bounded by the
// deadline net/http sets on the conn (its TLS handshake timeout), as when
// its own goroutine runs it: no context of its own. A panic in it (a
// certificate or config callback's) ends this connection alone, as
// net/http's recovery in its connection goroutine would: the conn is
// closed, so net/http's own HandshakeContext fails and it drops the
// connection, and the panic is logged with its stack.
func handshake(tc *tls.Conn) {
	defer func() {
		if v := recover(); v != nil {
			tc.NetConn().Close()
			slog.Error("panic in a TLS handshake", "remote", tc.NetConn().RemoteAddr().String(), "panic", v, "stack", string(debug.Stack()))
		}
	}()
	_ = tc.HandshakeContext(context.Background())
}

// Close closes the listener; idle workers end at once, busy ones once
// their handshake is over.
func (l *handshakeListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}
