package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/pires/go-proxyproto"
)

// Buffer sizes. A busy direction borrows a 16 KiB buffer (one TLS record)
// and gives it back as soon as its source would block, so an idle
// connection holds no copy buffer at all: memory per idle connection is the
// headline figure. Sources that expose no socket fall back to a small buffer
// held across a blocking read.
const (
	bufSize      = 16 << 10
	smallBufSize = 2 << 10
	// finTimeout bounds how long one half stays open after the other closed.
	finTimeout = 10 * time.Second
)

// aLongTimeAgo is a read deadline in the past: a read with it returns only
// what a layer above the socket (crypto/tls, a PROXY-protocol reader)
// already holds, and a parked wait returns at once.
var aLongTimeAgo = time.Unix(1, 0)

// errWake reports a close request noticed before parking.
var errWake = errors.New("close requested")

// wsConn is one live upgraded connection.
type wsConn struct {
	s       *Server
	x       *exchange
	client  net.Conn
	backend *net.TCPConn
	be      *balance.Backend
	pool    *Pool

	ctx    context.Context
	cancel context.CancelFunc

	closeCode atomic.Int32 // requested close code; 0 = none
	timer     *time.Timer  // jittered close request; guarded by the registry lock

	reasonMu sync.Mutex
	reason   CloseReason
	// The first close edge saw: a close frame from either side or one
	// edge sent (closeAt > 0 has its code), guarded by reasonMu.
	closeBy   CloseSide
	closeAt   int
	closeSeen bool

	closeOnce sync.Once
	last      atomic.Int64 // unix nanos of the last byte read either way
	in, out   atomic.Int64

	// b2c state, owned by the backend->client goroutine (or the runner).
	frames       frameTracker
	closeNoticed bool
	closeSent    bool

	fw *frameState // frame-aware mode; nil: opaque

	// Lingering close (linger.go). closeOut: a close frame went to the
	// client; clientEOF: the client's input ended; c2bGone: the goroutine
	// splice's client reader returned. lingered is owned by whoever reads
	// the client.
	closeOut, clientEOF, c2bGone atomic.Bool
	linger                       atomic.Int32
	lingerUntil                  atomic.Int64 // unix nanos
	lingered                     int64

	rd readyState // readiness-driven splice only
}

func newWSConn(s *Server, x *exchange, client net.Conn, bc *backendConn) *wsConn {
	c := &wsConn{s: s, x: x, client: client, backend: bc.conn, be: bc.backend, pool: x.pool}
	c.ctx, c.cancel = context.WithCancel(s.ctx)
	c.touch()
	c.frames.onClose = func(code int) { c.noteClose(SideBackend, code) }
	c.initFrames()
	return c
}

// noteClose records the first close frame edge saw or sent; later ones
// (the other side's answer) do not count.
func (c *wsConn) noteClose(side CloseSide, code int) {
	c.reasonMu.Lock()
	if !c.closeSeen {
		c.closeSeen, c.closeBy, c.closeAt = true, side, code
	}
	c.reasonMu.Unlock()
}

// closeWritten records a close frame edge itself wrote to the client.
func (c *wsConn) closeWritten(code int) {
	c.noteClose(SideEdge, code)
	c.s.obs.CloseSent(c.x.routeName(), code)
}

// closedBy says who closed first and with which code (0: no close frame
// was seen, then the side whose stream ended first, edge for its own
// timeouts and shutdown).
func (c *wsConn) closedBy(reason CloseReason) (CloseSide, int) {
	c.reasonMu.Lock()
	defer c.reasonMu.Unlock()
	if c.closeSeen {
		return c.closeBy, c.closeAt
	}
	return reason.side(), 0
}

// start registers the connection and runs it on its own goroutines, so the
// net/http goroutine (with its grown stack) ends now.
func (c *wsConn) start(head, clientBuffered []byte, backendBuffered []byte) {
	// Opened before anything can fail: every path from here ends in finish
	// (or finishReady), whose ConnClosed must follow a ConnOpened.
	c.s.obs.ConnOpened(c.x.routeName(), c.be.ID())
	// The 101 goes out next, on this goroutine or the splice's first run.
	c.x.upgrade = c.s.now().Sub(c.x.start)
	c.s.obs.Upgraded(c.x.routeName(), c.x.upgrade)
	if c.startReady(head, clientBuffered, backendBuffered) {
		return
	}
	if !c.s.reg.add(c) {
		c.closeBoth(ReasonShutdown)
		c.finish()
		return
	}
	go c.run(head, clientBuffered, backendBuffered)
}

// setReason records why the connection ends; the first reason wins.
func (c *wsConn) setReason(r CloseReason) {
	c.reasonMu.Lock()
	if c.reason == "" {
		c.reason = r
	}
	c.reasonMu.Unlock()
}

func (c *wsConn) getReason() CloseReason {
	c.reasonMu.Lock()
	defer c.reasonMu.Unlock()
	return c.reason
}

// closeBoth closes both sockets once; every parked read and write returns.
// A connection whose client was sent a close frame closes lingering
// instead, unless reason calls for an immediate close (forcedClose).
func (c *wsConn) closeBoth(reason CloseReason) {
	c.setReason(reason)
	if !forcedClose(reason) && c.lingerStart() {
		return
	}
	c.closeNow()
}

// closeNow closes both sockets once, lingering or not.
func (c *wsConn) closeNow() {
	if c.rd.on {
		c.closeReady()
		return
	}
	c.closeOnce.Do(func() {
		c.client.Close()
		c.backend.Close()
	})
}

// requestClose asks the backend->client direction to send a close frame
// with code at the next frame boundary. The past read deadline wakes a
// parked wait; the direction re-checks closeCode after re-arming its own
// deadline, so the wake-up cannot be lost.
func (c *wsConn) requestClose(code int, reason CloseReason) {
	if c.closeCode.CompareAndSwap(0, int32(code)) {
		c.setReason(reason)
		if c.rd.on {
			c.kick()
			return
		}
		c.backend.SetReadDeadline(aLongTimeAgo)
	}
}

func (c *wsConn) touch() { c.last.Store(time.Now().UnixNano()) }

// idleDeadline is when the connection becomes idle if nothing moves.
func (c *wsConn) idleDeadline() time.Time {
	if c.pool.IdleTimeout <= 0 {
		return time.Time{}
	}
	return time.Unix(0, c.last.Load()).Add(c.pool.IdleTimeout)
}

func (c *wsConn) idleExpired() bool {
	return c.pool.IdleTimeout > 0 && time.Now().UnixNano()-c.last.Load() >= int64(c.pool.IdleTimeout)
}

// run writes the 101, forwards what both sides had already sent, then
// splices until both directions end.
func (c *wsConn) run(head, clientBuffered, backendBuffered []byte) {
	defer c.finish()
	stop := context.AfterFunc(c.ctx, func() { c.closeBoth(ReasonShutdown) })
	defer stop()

	// The 101 and any frames the backend sent behind it, in one write.
	backendBuffered = backendBuffered[:c.frames.feed(backendBuffered, false)]
	if c.fw != nil {
		clientBuffered = c.clientChunk(clientBuffered)
	}
	wt := c.pool.WriteTimeout
	if wt <= 0 {
		wt = handshakeTimeout(c.pool)
	}
	c.client.SetWriteDeadline(time.Now().Add(wt))
	if _, err := c.client.Write(append(head, backendBuffered...)); err != nil {
		c.closeBoth(writeReason(err, ReasonClientClosed))
		return
	}
	c.out.Add(int64(len(backendBuffered)))
	head, backendBuffered = nil, nil
	if c.frames.tooBig {
		// A frame over the limit came right behind the 101.
		c.backendTooBig()
		c.closeBoth(ReasonBackendFrameTooBig)
		return
	}
	if len(clientBuffered) > 0 {
		c.backend.SetWriteDeadline(time.Now().Add(wt))
		if _, err := c.backend.Write(clientBuffered); err != nil {
			c.closeBoth(writeReason(err, ReasonBackendClosed))
			return
		}
		c.in.Add(int64(len(clientBuffered)))
		clientBuffered = nil
	}
	// net/http may have left deadlines on the client; the handshake set
	// them on the backend.
	c.client.SetDeadline(time.Time{})
	c.backend.SetDeadline(time.Time{})

	errc := make(chan struct{}, 2) // room for both: neither sender blocks
	var fin atomic.Pointer[time.Timer]
	defer func() {
		if t := fin.Load(); t != nil {
			t.Stop()
		}
	}()
	end := func(reason CloseReason, err error) {
		if err != nil {
			c.closeBoth(reason)
			return
		}
		c.setReason(reason)
		// One side finished cleanly and its FIN went on; the other side
		// gets finTimeout to finish too, so a peer that never closes its
		// half cannot pin the connection (HAProxy's "timeout client-fin").
		fin.CompareAndSwap(nil, time.AfterFunc(finTimeout, func() { c.closeBoth(ReasonFinTimeout) }))
	}
	go func() {
		reason, err := c.clientToBackend()
		c.c2bGone.Store(true)
		end(reason, err)
		errc <- struct{}{}
	}()
	reason, err := c.backendToClient()
	if err == nil && c.closeSent {
		// Close handshake done on our side: the server closes TCP first
		// (RFC 6455 §7.1.1).
		err = io.EOF
	}
	end(reason, err)
	<-errc
	// Both directions ended, lingering included.
	c.linger.Store(lingerOver)
	c.closeNow()
}

// finish releases everything the connection held and writes its log line.
func (c *wsConn) finish() {
	if c.cancel != nil {
		c.cancel()
	}
	c.s.reg.remove(c)
	c.be.Release()
	x := c.x
	x.release()
	reason := c.getReason()
	x.reason = string(reason)
	x.in, x.out = c.in.Load(), c.out.Load()
	x.closeSide, x.closeCode = c.closedBy(reason)
	// The access line goes first: whoever waits for ConnClosed then finds it.
	x.logAccess()
	c.s.obs.ConnCloseCode(x.routeName(), x.closeSide, x.closeCode)
	c.s.obs.ConnClosed(x.routeName(), c.be.ID(), x.reason, c.s.now().Sub(x.start), x.in, x.out)
}

// writeReason names a failed write.
func writeReason(err error, closed CloseReason) CloseReason {
	if isTimeout(err) {
		return ReasonWriteTimeout
	}
	return closed
}

// readReason names a failed read.
func readReason(err error, closed CloseReason) CloseReason {
	if errors.Is(err, net.ErrClosed) {
		return ReasonShutdown
	}
	return closed
}

// write writes p to dst under the pool's write timeout. A timed-out write
// poisons a tls.Conn, and the caller closes the connection: that is how a
// half-open client is reaped (traefik#10627).
func (c *wsConn) write(dst net.Conn, p []byte) error {
	if wt := c.pool.WriteTimeout; wt > 0 {
		dst.SetWriteDeadline(time.Now().Add(wt))
	}
	_, err := dst.Write(p)
	return err
}

// clientToBackend copies client bytes to the backend (opaque).
func (c *wsConn) clientToBackend() (CloseReason, error) {
	d := newDirection(c, c.client, false)
	for {
		bp, n, err := d.read()
		if c.linger.Load() == lingerOn {
			// Lingering close: the client's input is read and dropped.
			if bp != nil {
				d.put(bp)
			}
			if c.lingerDiscard(n, err) {
				return "", errLingerDone
			}
			continue
		}
		if err != nil {
			if isTimeout(err) {
				if c.idleExpired() {
					return ReasonIdleTimeout, err
				}
				continue
			}
			if errors.Is(err, io.EOF) {
				// Propagate the half-close; the other direction goes on.
				// The reason is recorded first: the FIN may make the other
				// side end at once.
				c.setReason(ReasonClientClosed)
				c.clientEOF.Store(true)
				closeWrite(c.backend)
				return ReasonClientClosed, nil
			}
			return readReason(err, ReasonClientClosed), err
		}
		c.touch()
		p := (*bp)[:n]
		if c.fw != nil {
			p = c.clientChunk(p)
		}
		if len(p) > 0 {
			err = c.write(c.backend, p)
		}
		d.put(bp)
		if err != nil {
			if c.linger.Load() == lingerOn || (c.closeOut.Load() && !isTimeout(err) && c.lingerStart()) {
				// The backend is gone after the client was sent a close
				// frame (a departing backend): linger, do not reset.
				continue
			}
			return writeReason(err, ReasonBackendClosed), err
		}
		c.in.Add(int64(len(p)))
	}
}

// backendToClient copies backend frames to the client, tracking frame
// boundaries so a requested close frame goes between two frames.
func (c *wsConn) backendToClient() (CloseReason, error) {
	d := newDirection(c, c.backend, true)
	for {
		if code := c.closeCode.Load(); code != 0 && !c.closeSent {
			c.closeNoticed = true
			switch {
			case c.frames.broken:
				// No known boundary: closing is the only safe move.
				return "", errWake
			case c.frames.closeSeen && c.frames.atBoundary():
				// The backend is already closing and its close frame has
				// gone through whole; do not send a second close.
				c.closeSent = true
				c.closeOut.Store(true)
			case c.frames.closeSeen:
				// The backend's close frame is still passing through: let
				// it finish before anything else is decided.
			case c.frames.atBoundary():
				err := c.write(c.client, closeFrame(int(code)))
				c.closeSent = true
				if err != nil {
					return writeReason(err, ReasonClientClosed), err
				}
				c.closeWritten(int(code))
				c.closeOut.Store(true)
			}
			if c.closeSent && c.fw != nil && c.fw.endAfterClose.Load() {
				// A client frame was over the limit and the client has its
				// close: nothing more is exchanged.
				return "", errWake
			}
		}
		if c.fw != nil && c.mayPing() {
			if err := c.write(c.client, pingFrame()); err != nil {
				return writeReason(err, ReasonClientClosed), err
			}
			c.pinged()
		}
		bp, n, err := d.read()
		if err != nil {
			if isTimeout(err) || err == errWake {
				if c.closeCode.Load() != 0 {
					continue
				}
				if c.idleExpired() {
					return ReasonIdleTimeout, err
				}
				if c.fw == nil {
					continue
				}
				if due, timedOut := c.pingCheck(time.Now().UnixNano()); timedOut {
					if c.pingTimeoutClose(func(b []byte) error { return c.write(c.client, b) }) {
						return "", errWake
					}
					return ReasonPingTimeout, err
				} else if due {
					c.fw.pingWanted.Store(true)
				}
				continue
			}
			if c.linger.Load() == lingerOn {
				// Lingering closed the backend: not a shutdown.
				return "", err
			}
			if errors.Is(err, io.EOF) {
				c.setReason(ReasonBackendClosed)
				closeWrite(c.client)
				return ReasonBackendClosed, nil
			}
			return readReason(err, ReasonBackendClosed), err
		}
		c.touch()
		p := (*bp)[:n]
		switch {
		case c.closeSent:
			// After our close frame nothing more goes to the client; the
			// backend's bytes are read and dropped until it closes.
			p = nil
		case c.closeCode.Load() != 0:
			p = p[:c.frames.feed(p, true)]
			if c.frames.tooBig {
				// Whole frames before the one over the limit still go out.
				if len(p) > 0 {
					if err := c.write(c.client, p); err == nil {
						c.out.Add(int64(len(p)))
					}
				}
				d.put(bp)
				return ReasonBackendFrameTooBig, c.backendTooBig()
			}
		case c.fw != nil:
			n, err := c.relayFrames(p, func(b []byte) error { return c.write(c.client, b) })
			d.put(bp)
			c.out.Add(int64(n))
			if errors.Is(err, errBackendFrameTooBig) {
				return ReasonBackendFrameTooBig, err
			}
			if err != nil {
				return writeReason(err, ReasonClientClosed), err
			}
			continue
		default:
			c.frames.feed(p, false)
		}
		if len(p) > 0 {
			err = c.write(c.client, p)
		}
		d.put(bp)
		if err != nil {
			return writeReason(err, ReasonClientClosed), err
		}
		c.out.Add(int64(len(p)))
	}
}

// direction reads one source without parking a buffer on it.
type direction struct {
	c       *wsConn
	src     net.Conn
	raw     syscall.RawConn // nil: no socket reachable, blocking reads
	layered bool            // src may hold bytes above the socket (TLS, PROXY reader)
	pending bool            // a layer may hold bytes: drain before waiting
	wake    bool            // honour close requests (backend->client)
}

func newDirection(c *wsConn, src net.Conn, wake bool) *direction {
	raw, layered := rawConnOf(src)
	if !canPeek {
		raw = nil
	}
	// A layered source may hold bytes read during the handshake (crypto/tls
	// often does): drain once before the first wait.
	return &direction{c: c, src: src, raw: raw, layered: layered, pending: layered, wake: wake}
}

// read returns the next bytes of the source in a pooled buffer the caller
// gives back with put. While the source is idle no buffer is held: the
// wait for readability peeks one byte into the stack.
func (d *direction) read() (*[]byte, int, error) {
	s := d.c.s
	for {
		if d.pending {
			// Drain what the layers already hold: with a deadline in the
			// past only buffered bytes come back, and a read timeout leaves
			// a tls.Conn usable (unlike a write timeout).
			bp := s.getBuf()
			d.src.SetReadDeadline(aLongTimeAgo)
			n, err := d.src.Read(*bp)
			if n > 0 {
				return bp, n, nil
			}
			s.putBuf(bp)
			switch {
			case err == nil:
				continue
			case !isTimeout(err):
				return nil, 0, err
			}
			d.pending = false
		}
		dl := d.c.idleDeadline()
		if d.wake && d.c.fw != nil {
			// The backend->client direction also keeps the heartbeat.
			dl = d.c.pingDeadline(dl)
		}
		lu := d.c.lingerDeadline()
		if !d.wake && !lu.IsZero() && (dl.IsZero() || lu.Before(dl)) {
			dl = lu
		}
		if err := d.src.SetReadDeadline(dl); err != nil {
			return nil, 0, err
		}
		if !d.wake && lu.IsZero() && !d.c.lingerDeadline().IsZero() {
			// Lingering began while the deadline was armed: arm again.
			continue
		}
		if d.wake && !d.c.closeNoticed && d.c.closeCode.Load() != 0 {
			return nil, 0, errWake
		}
		var bp *[]byte
		if d.raw != nil {
			// Wait without a buffer. The callback peeks instead of merely
			// waiting: RawConn.Read clears its readable flag before calling
			// back, and a callback that only waits can miss data that arrived
			// after the last EAGAIN (docs/ARCHITECTURE.md).
			if err := d.raw.Read(peekReady); err != nil {
				return nil, 0, err
			}
			bp = s.getBuf()
		} else {
			bp = s.getSmallBuf()
		}
		// A TLS source blocks here until one whole record has arrived.
		n, err := d.src.Read(*bp)
		d.pending = d.layered
		if n > 0 {
			return bp, n, nil
		}
		d.put(bp)
		if err != nil {
			return nil, 0, err
		}
	}
}

func (d *direction) put(bp *[]byte) {
	if cap(*bp) == smallBufSize {
		d.c.s.small.Put(bp)
		return
	}
	d.c.s.putBuf(bp)
}

func (s *Server) getBuf() *[]byte {
	if v, ok := s.bufs.Get().(*[]byte); ok {
		return v
	}
	b := make([]byte, bufSize)
	return &b
}

func (s *Server) putBuf(bp *[]byte) { s.bufs.Put(bp) }

func (s *Server) getSmallBuf() *[]byte {
	if v, ok := s.small.Get().(*[]byte); ok {
		return v
	}
	b := make([]byte, smallBufSize)
	return &b
}

// rawConnOf finds the socket under c: through *tls.Conn, PROXY-protocol
// connections and anything exposing NetConn(). layered reports that a layer
// above the socket may buffer bytes.
func rawConnOf(c net.Conn) (raw syscall.RawConn, layered bool) {
	for range 8 {
		switch v := c.(type) {
		case *tls.Conn:
			c, layered = v.NetConn(), true
			continue
		case *proxyproto.Conn:
			c, layered = v.Raw(), true
			continue
		case syscall.Conn:
			rc, err := v.SyscallConn()
			if err != nil {
				return nil, layered
			}
			return rc, layered
		case interface{ NetConn() net.Conn }:
			c, layered = v.NetConn(), true
			continue
		}
		return nil, true
	}
	return nil, true
}

// closeWrite half-closes c: TCP FIN, or a TLS close_notify.
func closeWrite(c net.Conn) {
	switch v := c.(type) {
	case interface{ CloseWrite() error }:
		v.CloseWrite()
	case *proxyproto.Conn:
		if tc, ok := v.TCPConn(); ok {
			tc.CloseWrite()
		}
	}
}
