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

	"github.com/edgelb/edge/proxy/internal/wsession"
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

// The goroutine splice: two goroutines per connection, one per direction,
// each parked in a read of its source without a buffer. It serves every
// connection the readiness splice cannot take over. What goes where, and
// how the connection ends, is the session's (conn.go); this file only
// reads, writes, waits and carries out the session's actions.
type goDriver struct {
	c *wsConn
	// ctx ends with the Server: the connection is then closed.
	ctx    context.Context
	cancel context.CancelFunc

	once      sync.Once // closes both sockets
	lingering atomic.Bool
	fin       atomic.Pointer[time.Timer]
}

// startGoroutines registers c and splices it on two goroutines of its own.
func (c *wsConn) startGoroutines(head, clientBuffered, backendBuffered []byte) {
	g := &goDriver{c: c}
	g.ctx, g.cancel = context.WithCancel(c.s.ctx)
	c.d = g
	if !c.s.reg.add(c) {
		c.closeBoth(ReasonShutdown)
		g.cancel()
		c.finish(false)
		return
	}
	go g.run(head, clientBuffered, backendBuffered)
}

// run writes the 101, forwards what both sides had already sent, then
// splices until both directions end.
func (g *goDriver) run(head, clientBuffered, backendBuffered []byte) {
	defer g.c.finish(false)
	defer g.cancel()
	stop := context.AfterFunc(g.ctx, func() { g.c.closeBoth(ReasonShutdown) })
	defer stop()
	if g.runStart(head, clientBuffered, backendBuffered) {
		g.splice()
	}
}

// runStart writes the 101 and any frames the backend sent behind it in one
// write, then what the client sent behind its request; it reports whether
// the splice goes on.
func (g *goDriver) runStart(head, clientBuffered, backendBuffered []byte) bool {
	c := g.c
	wt := c.pool.writeTimeout
	out, n, tooBig := c.head(head, backendBuffered)
	c.client.SetWriteDeadline(time.Now().Add(wt))
	if _, err := c.client.Write(out); err != nil {
		c.writeFailed(SideClient, err)
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
		k, _, ok := c.forward(clientBuffered)
		if !ok {
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
func (g *goDriver) splice() {
	defer func() {
		if t := g.fin.Load(); t != nil {
			t.Stop()
		}
	}()
	done := make(chan struct{})
	go func() {
		g.clientToBackend()
		close(done)
	}()
	g.backendToClient()
	<-done
	// Both directions ended, lingering included.
	g.c.stop()
}

// clientToBackend copies client bytes to the backend.
func (g *goDriver) clientToBackend() {
	c := g.c
	d := newDirection(c, c.client, SideClient)
	for {
		bp, n, err := d.read()
		if g.lingering.Load() {
			// Lingering close: the client's input is read and dropped.
			if bp != nil {
				d.put(bp)
			}
			if g.discard(n, err) {
				return
			}
			continue
		}
		if err != nil {
			if g.readFailed(SideClient, err) {
				return
			}
			continue
		}
		c.touch()
		k, a, ok := c.forward((*bp)[:n])
		d.put(bp)
		if !ok {
			if a.Kind == wsession.End {
				return
			}
			// The backend is gone after the client was sent a close
			// frame (a departing backend): lingering, not a reset.
			continue
		}
		c.in.Add(int64(k))
		g.ratePause()
	}
}

// ratePause waits, on the goroutine splice, until a client over its rate
// under RateSlow may be read again: not reading pushes back through TCP.
// The connection's end (its context) ends the wait.
func (g *goDriver) ratePause() {
	at := g.c.sess.ReadableAt()
	d := time.Until(time.Unix(0, at))
	if at == 0 || d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-g.ctx.Done():
	}
}

// discard handles a read while lingering and reports whether lingering
// is over: past LingerBytes, the client's end, an error, or the clock.
func (g *goDriver) discard(n int, err error) bool {
	c := g.c
	switch {
	case c.discard(n):
		return true
	case err == nil:
		return false
	case !isTimeout(err):
		return true
	}
	return c.tick(time.Now().UnixNano(), 0).Kind == wsession.End
}

// readFailed handles a read of side that returned an error and reports
// whether the direction ends: a passed read deadline (a close request,
// the idle timeout, the heartbeat, lingering's bound) asks the session's
// clock; anything else is the stream's end.
func (g *goDriver) readFailed(side CloseSide, err error) bool {
	if isTimeout(err) {
		return g.c.tick(time.Now().UnixNano(), 0).Kind == wsession.End
	}
	g.readEnd(side, err)
	return true
}

// readEnd handles a read of side that failed or reached its end.
func (g *goDriver) readEnd(side CloseSide, err error) {
	closed := ReasonClientClosed
	if side == SideBackend {
		if g.lingering.Load() {
			// Lingering closed the backend: not a shutdown.
			return
		}
		closed = ReasonBackendClosed
	}
	if errors.Is(err, io.EOF) {
		// Propagate the half-close; the other direction goes on.
		g.c.eof(side)
		return
	}
	g.c.closeBoth(readReason(err, closed))
}

// backendToClient copies backend frames to the client; the session puts
// control frames between two frames.
func (g *goDriver) backendToClient() {
	c := g.c
	d := newDirection(c, c.backend, SideBackend)
	for {
		if c.controlDue() {
			return
		}
		bp, n, err := d.read()
		if err != nil {
			if g.readFailed(SideBackend, err) {
				return
			}
			continue
		}
		c.touch()
		end := c.relay((*bp)[:n])
		d.put(bp)
		if end {
			return
		}
	}
}

// sendClient writes p to the client under the pool's write timeout.
func (g *goDriver) sendClient(p []byte) error { return g.write(g.c.client, p) }

// sendBackend writes p to the backend under the pool's write timeout.
func (g *goDriver) sendBackend(p []byte) error { return g.write(g.c.backend, p) }

// write writes p to dst under the pool's write timeout (its effective
// value: the readiness splice's session applies the same one to a queue).
func (g *goDriver) write(dst net.Conn, p []byte) error {
	dst.SetWriteDeadline(time.Now().Add(g.c.pool.writeTimeout))
	_, err := dst.Write(p)
	return err
}

// wake gives the backend reader a read deadline in the past; it looks at
// the session again after re-arming its own deadline (direction.arm), so
// the wake-up cannot be lost.
func (g *goDriver) wake() { g.c.backend.SetReadDeadline(aLongTimeAgo) }

// halfClose passes a clean end of stream on to side, and gives the other
// half wsession.FinTimeout to finish too.
func (g *goDriver) halfClose(side CloseSide) {
	if side == SideBackend {
		closeWrite(g.c.backend)
	} else {
		closeWrite(g.c.client)
	}
	if g.fin.Load() != nil {
		return
	}
	t := time.AfterFunc(wsession.FinTimeout, func() { g.c.closeBoth(ReasonFinTimeout) })
	if !g.fin.CompareAndSwap(nil, t) {
		t.Stop()
	}
}

// linger begins a lingering close: the backend->client goroutine returns
// once the backend is closed, the client's write half shuts down, and the
// client reader drops what it reads until the session ends it.
func (g *goDriver) linger() {
	c := g.c
	g.lingering.Store(true)
	c.backend.Close()
	closeWrite(c.client)
	// Wakes a parked client read at the bound; the reader re-checks the
	// deadline after arming its own, so the wake-up is not lost.
	c.client.SetReadDeadline(c.deadline(SideClient))
}

// endFlushed ends at once: writes here are never queued.
func (g *goDriver) endFlushed() { g.c.closeBoth(reasonKeep) }

// closeNow closes both sockets once; every parked read and write returns.
func (g *goDriver) closeNow() {
	g.once.Do(func() {
		g.c.client.Close()
		g.c.backend.Close()
	})
}

// direction reads one source without parking a buffer on it.
type direction struct {
	c       *wsConn
	src     net.Conn
	raw     syscall.RawConn // nil: no socket reachable, blocking reads
	layered bool            // src may hold bytes above the socket (TLS, PROXY reader)
	pending bool            // a layer may hold bytes: drain before waiting
	side    CloseSide       // whose reader: the session's deadline for it
}

func newDirection(c *wsConn, src net.Conn, side CloseSide) *direction {
	raw, layered := rawConnOf(src)
	if !canPeek {
		raw = nil
	}
	// A layered source may hold bytes read during the handshake (crypto/tls
	// often does): drain once before the first wait.
	return &direction{c: c, src: src, raw: raw, layered: layered, pending: layered, side: side}
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

// arm sets the read deadline for the next wait: when the session must be
// asked again (Deadline: the idle timeout, the heartbeat or a close
// request for the backend reader, the end of a lingering close for the
// client reader). again: the session's deadline moved earlier while
// arming (lingering began, a close was requested): arm again.
func (d *direction) arm() (again bool, err error) {
	dl := d.c.deadline(d.side)
	if err := d.src.SetReadDeadline(dl); err != nil {
		return false, err
	}
	if nd := d.c.deadline(d.side); !nd.IsZero() && (dl.IsZero() || nd.Before(dl)) {
		return true, nil
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

// bufPool lends the splice's buffers of bufSize (ready.Buffers).
type bufPool struct{ p sync.Pool }

// GetBuf borrows a buffer.
func (b *bufPool) GetBuf() *[]byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return v
	}
	p := make([]byte, bufSize)
	return &p
}

// PutBuf gives a buffer back.
func (b *bufPool) PutBuf(bp *[]byte) { b.p.Put(bp) }

func (s *Server) getBuf() *[]byte { return s.bufs.GetBuf() }

func (s *Server) putBuf(bp *[]byte) { s.bufs.PutBuf(bp) }

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
