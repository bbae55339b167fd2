package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pires/go-proxyproto"
)

// Buffer sizes. A busy direction borrows an 18 KiB buffer (one whole TLS
// record with its header and tag, record.MaxRecord, for the record layer)
// and gives it back as soon as its source would block, so an idle
// connection holds no copy buffer at all: memory per idle connection is the
// headline figure. Sources that expose no socket fall back to a small buffer
// held across a blocking read.
const (
	bufSize      = 18 << 10
	smallBufSize = 2 << 10
)

// aLongTimeAgo is a read deadline in the past: a read with it returns only
// what a layer above the socket (crypto/tls, a PROXY-protocol reader)
// already holds, and a parked wait returns at once.
var aLongTimeAgo = time.Unix(1, 0)

// errWake reports a close request noticed before parking.
var errWake = errors.New("close requested")

// The goroutine splice: two goroutines per connection, one per direction,
// each parked in a read of its source without a buffer. It serves every
// connection the readiness splice cannot take over. What goes where is
// the session's (conn.go); this file only reads, writes and waits.

// run writes the 101, forwards what both sides had already sent, then
// splices until both directions end.
func (c *wsConn) run(head, clientBuffered, backendBuffered []byte) {
	defer c.finish()
	stop := context.AfterFunc(c.ctx, func() { c.closeBoth(ReasonShutdown) })
	defer stop()
	if c.runStart(head, clientBuffered, backendBuffered) {
		c.splice()
	}
}

// runStart writes the 101 and any frames the backend sent behind it in one
// write, then what the client sent behind its request; it reports whether
// the splice goes on.
func (c *wsConn) runStart(head, clientBuffered, backendBuffered []byte) bool {
	wt := c.pool.settings().writeTimeout
	out, n, tooBig := c.head(head, backendBuffered)
	c.client.SetWriteDeadline(time.Now().Add(wt))
	if _, err := c.client.Write(out); err != nil {
		c.closeBoth(writeReason(err, ReasonClientClosed))
		return false
	}
	c.out.Add(int64(n))
	if tooBig {
		// A frame over the limit came right behind the 101.
		c.backendTooBig()
		c.closeBoth(ReasonBackendFrameTooBig)
		return false
	}
	if len(clientBuffered) > 0 {
		c.backend.SetWriteDeadline(time.Now().Add(wt))
		k, err := c.forward(clientBuffered)
		if err != nil {
			c.closeBoth(writeReason(err, ReasonBackendClosed))
			return false
		}
		c.in.Add(int64(k))
	}
	// net/http may have left deadlines on the client; the handshake set
	// them on the backend.
	c.client.SetDeadline(time.Time{})
	c.backend.SetDeadline(time.Time{})
	return true
}

// splice runs both directions until both ended, lingering included.
func (c *wsConn) splice() {
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
	if err == nil && c.sess.CloseSent() {
		// Close handshake done on our side: the server closes TCP first
		// (RFC 6455 §7.1.1).
		err = io.EOF
	}
	end(reason, err)
	<-errc
	// Both directions ended, lingering included.
	c.sess.LingerEnd()
	c.closeNow()
}

// clientToBackend copies client bytes to the backend.
func (c *wsConn) clientToBackend() (CloseReason, error) {
	d := newDirection(c, c.client, false)
	for {
		bp, n, err := d.read()
		if c.sess.Lingering() {
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
			if isTimeout(err) && !c.idleExpired() {
				continue
			}
			return c.clientReadEnd(err)
		}
		c.touch()
		k, err := c.forward((*bp)[:n])
		d.put(bp)
		if err != nil {
			if c.sess.Lingering() || (c.sess.CloseOut() && !isTimeout(err) && c.lingerStart()) {
				// The backend is gone after the client was sent a close
				// frame (a departing backend): linger, do not reset.
				continue
			}
			return writeReason(err, ReasonBackendClosed), err
		}
		c.in.Add(int64(k))
		c.ratePause()
	}
}

// ratePause waits, on the goroutine splice, until a client over its rate
// under RateSlow may be read again: not reading pushes back through TCP.
// The connection's end (its context) ends the wait.
func (c *wsConn) ratePause() {
	at := c.sess.ReadableAt()
	d := time.Until(time.Unix(0, at))
	if at == 0 || d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.ctx.Done():
	}
}

// clientReadEnd names the end of the client's stream.
func (c *wsConn) clientReadEnd(err error) (CloseReason, error) {
	switch {
	case isTimeout(err):
		return ReasonIdleTimeout, err
	case errors.Is(err, io.EOF):
		// Propagate the half-close; the other direction goes on. The
		// reason is recorded first: the FIN may make the other side end
		// at once.
		c.setReason(ReasonClientClosed)
		c.sess.ClientEOF()
		closeWrite(c.backend)
		return ReasonClientClosed, nil
	}
	return readReason(err, ReasonClientClosed), err
}

// backendToClient copies backend frames to the client; the session puts
// control frames between two frames.
func (c *wsConn) backendToClient() (CloseReason, error) {
	d := newDirection(c, c.backend, true)
	for {
		if o := c.control(c.sess.BackendControl()); o.end {
			return o.reason, o.err
		}
		bp, n, err := d.read()
		if err != nil {
			if o := c.backendReadError(err); o.end {
				return o.reason, o.err
			}
			continue
		}
		c.touch()
		o := c.relay((*bp)[:n])
		d.put(bp)
		if o.end {
			return o.reason, o.err
		}
	}
}

// backendReadError handles a failed or woken backend read: a close
// request, the idle timeout and the heartbeat wake it; anything else ends
// the direction.
func (c *wsConn) backendReadError(err error) outcome {
	if isTimeout(err) || err == errWake {
		switch {
		case c.sess.Requested():
			return outcome{}
		case c.idleExpired():
			return outcome{end: true, reason: ReasonIdleTimeout, err: err}
		}
		return c.heartbeat(err)
	}
	switch {
	case c.sess.Lingering():
		// Lingering closed the backend: not a shutdown.
		return outcome{end: true, err: err}
	case errors.Is(err, io.EOF):
		c.setReason(ReasonBackendClosed)
		closeWrite(c.client)
		return outcome{end: true, reason: ReasonBackendClosed}
	}
	return outcome{end: true, reason: readReason(err, ReasonBackendClosed), err: err}
}

// heartbeat asks the session what the ping interval and timeout call for
// now: a ping at the next boundary, or a close 1011 after a missed ping
// (closed at once when no boundary is known).
func (c *wsConn) heartbeat(err error) outcome {
	due, timedOut := c.sess.PingCheck(time.Now().UnixNano())
	if timedOut {
		ctl, ok := c.sess.PingTimeoutClose()
		if !ok {
			return outcome{end: true, reason: ReasonPingTimeout, err: err}
		}
		return c.control(ctl)
	}
	if due {
		c.sess.WantPing()
	}
	return outcome{}
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
			if bp, n, err := d.drainLayers(); bp != nil || err != nil {
				return bp, n, err
			}
		}
		again, err := d.arm()
		if err != nil {
			return nil, 0, err
		}
		if again {
			continue
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

// drainLayers returns what the layers above the socket already hold:
// with a deadline in the past only buffered bytes come back, and a read
// timeout leaves a tls.Conn usable (unlike a write timeout). Nothing and
// no error: the layers are drained.
func (d *direction) drainLayers() (*[]byte, int, error) {
	s := d.c.s
	for {
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
		return nil, 0, nil
	}
}

// arm sets the read deadline for the next wait: the idle timeout, the
// heartbeat (backend->client), the end of a lingering close
// (client->backend). again: something changed while arming, look again;
// errWake: a close request came first.
func (d *direction) arm() (again bool, err error) {
	c := d.c
	dl := c.idleDeadline()
	if d.wake {
		// The backend->client direction also keeps the heartbeat.
		if nd := c.sess.PingDeadline(); nd != 0 {
			if t := time.Unix(0, nd); dl.IsZero() || t.Before(dl) {
				dl = t
			}
		}
	}
	lu := c.lingerDeadline()
	if !d.wake && !lu.IsZero() && (dl.IsZero() || lu.Before(dl)) {
		dl = lu
	}
	if err := d.src.SetReadDeadline(dl); err != nil {
		return false, err
	}
	if !d.wake && lu.IsZero() && !c.lingerDeadline().IsZero() {
		// Lingering began while the deadline was armed: arm again.
		return true, nil
	}
	if d.wake && c.sess.CloseUnnoticed() {
		return false, errWake
	}
	return false, nil
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

// closeWrite half-closes c: a TLS close_notify first where there is TLS,
// then the TCP FIN.
func closeWrite(c net.Conn) {
	switch v := c.(type) {
	case *tls.Conn:
		// close_notify (tls.Conn.CloseWrite sends nothing more), then the
		// FIN of the socket under it, as for a plain connection.
		v.CloseWrite()
		closeWrite(v.NetConn())
	case interface{ CloseWrite() error }:
		v.CloseWrite()
	case *proxyproto.Conn:
		if tc, ok := v.TCPConn(); ok {
			tc.CloseWrite()
		}
	}
}
