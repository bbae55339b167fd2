package proxy

import (
	"context"
	"crypto/rand"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/proxy/internal/wsession"
)

// finTimeout bounds how long one half stays open after the other closed.
const finTimeout = 10 * time.Second

// errEnd ends a direction on the session's word (a close at a boundary
// that ends the connection, lost framing).
var errEnd = errors.New("session ended the connection")

// errBackendFrameTooBig reports a backend frame over Pool.MaxFrameBytes.
var errBackendFrameTooBig = errors.New("backend frame over the pool's MaxFrameBytes")

// wsConn is one live upgraded connection: its sockets, its session (the
// WebSocket policy, internal/wsession) and the state of whichever driver
// splices it (splice.go or splice_ready_linux.go).
type wsConn struct {
	s       *Server
	x       *exchange
	client  net.Conn
	backend *net.TCPConn
	be      *balance.Backend
	pool    *Pool

	ctx    context.Context
	cancel context.CancelFunc

	timer *time.Timer // jittered close request; guarded by the registry lock

	sess wsession.Session

	closeOnce sync.Once
	// c2bGone: the goroutine splice's client reader returned. (Beside
	// closeOnce, whose 12 bytes it pads to 16: no padding in the struct.)
	c2bGone atomic.Bool
	last    atomic.Int64 // unix nanos of the last byte read either way
	in, out atomic.Int64

	rd readyState // readiness-driven splice only
}

func newWSConn(s *Server, x *exchange, client net.Conn, bc *backendConn) *wsConn {
	c := &wsConn{s: s, x: x, client: client, backend: bc.conn, be: bc.backend, pool: x.pool}
	c.ctx, c.cancel = context.WithCancel(s.ctx)
	c.touch()
	c.sess.Init(&x.pool.settings().ws, time.Now().UnixNano())
	if bc.deflate {
		c.sess.DeflateOn()
		x.deflate = deflatePassed
		if _, counted := c.sess.Deflate(); counted {
			x.deflate = deflateCounted
		}
	}
	return c
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
	if c.x.deflate != deflateNone {
		c.s.obs.Deflate(c.x.routeName(), c.x.deflate)
	}
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
func (c *wsConn) setReason(r CloseReason) { c.sess.SetReason(r) }

// closeBoth closes both sockets once; every parked read and write returns.
// A connection whose client was sent a close frame closes lingering
// instead, unless reason calls for an immediate close.
func (c *wsConn) closeBoth(reason CloseReason) {
	c.setReason(reason)
	if !reason.Forced() && c.lingerStart() {
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

// requestClose asks for a close frame with code to the client at the next
// backend->client frame boundary, and wakes whoever reads the backend.
func (c *wsConn) requestClose(code int, reason CloseReason) {
	if c.sess.Request(code, reason) {
		c.wakeBackendReader()
	}
}

// wakeBackendReader makes the backend reader look at the session: a run
// of the readiness splice, or a past read deadline for the goroutine
// splice, which re-checks the session after re-arming its own deadline,
// so the wake-up cannot be lost.
func (c *wsConn) wakeBackendReader() {
	if c.rd.on {
		c.kick()
		return
	}
	c.backend.SetReadDeadline(aLongTimeAgo)
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

// finish releases everything the connection held and writes its log line.
func (c *wsConn) finish() {
	if c.cancel != nil {
		c.cancel()
	}
	c.s.reg.remove(c)
	c.be.Release()
	x := c.x
	x.release()
	reason := c.sess.Reason()
	x.reason = string(reason)
	x.in, x.out = c.in.Load(), c.out.Load()
	x.closeSide, x.closeCode = c.sess.ClosedBy(reason)
	if _, counted := c.sess.Deflate(); counted {
		w, z := c.sess.Inflated()
		x.zWire, x.zInflated = w, z
		x.deflate = deflateCounted
	}
	// The access line goes first: whoever waits for ConnClosed then finds it.
	x.logAccess()
	if x.deflate == deflateCounted {
		c.s.obs.Inflated(x.routeName(), int64(x.zWire), int64(x.zInflated))
	}
	c.s.obs.ConnCloseCode(x.routeName(), x.closeSide, x.closeCode)
	c.s.obs.ConnClosed(x.routeName(), c.be.ID(), x.reason, c.s.now().Sub(x.start), x.in, x.out)
}

// The bridge between a driver and the session. Both drivers read their
// sockets their own way and hand the bytes here; the session decides,
// these carry it out through the driver's writes (sendClient,
// sendBackend), so neither driver holds any WebSocket policy.

// outcome is how a direction ends: ok false means it goes on.
type outcome struct {
	end    bool
	reason CloseReason
	err    error
	flush  bool // end once what is queued to the client went out
}

// sendClient writes p to the client: under the pool's write timeout on
// the goroutine splice (a timed-out write poisons a tls.Conn and the
// connection is closed: that is how a half-open client is reaped,
// traefik#10627); queued, never blocking, on the readiness splice.
func (c *wsConn) sendClient(p []byte) error {
	if !c.rd.on {
		return c.write(c.client, p)
	}
	_, err := c.client.Write(p)
	return err
}

// sendBackend writes p to the backend, like sendClient.
func (c *wsConn) sendBackend(p []byte) error {
	if !c.rd.on {
		return c.write(c.backend, p)
	}
	_, err := c.rd.bs.write(p)
	return err
}

// write writes p to dst under the pool's write timeout.
func (c *wsConn) write(dst net.Conn, p []byte) error {
	if wt := c.pool.WriteTimeout; wt > 0 {
		dst.SetWriteDeadline(time.Now().Add(wt))
	}
	_, err := dst.Write(p)
	return err
}

// control writes the control frame the session wants at this point of
// the backend->client stream, if any.
func (c *wsConn) control(ctl wsession.Control) outcome {
	if ctl.Frame != nil {
		if err := c.sendClient(ctl.Frame); err != nil {
			return outcome{end: true, reason: writeReason(err, ReasonClientClosed), err: err}
		}
		c.sess.ControlWritten(ctl, time.Now().UnixNano())
		if ctl.Code != 0 {
			c.s.obs.CloseSent(c.x.routeName(), ctl.Code)
		} else {
			c.s.obs.PingSent(c.x.routeName())
		}
	}
	if ctl.End {
		return outcome{end: true, reason: reasonKeep, err: errEnd, flush: ctl.Flush}
	}
	return outcome{}
}

// relay carries backend bytes p to the client as the session says:
// forwarded, with control frames between two frames, dropped after a
// close, or the end at a frame over the limit.
func (c *wsConn) relay(p []byte) outcome {
	for len(p) > 0 {
		n, v := c.sess.FromBackend(p)
		if v == wsession.Drop {
			return outcome{}
		}
		if n > 0 {
			// Whole frames before one over the limit still go out.
			if err := c.sendClient(p[:n]); err != nil {
				return outcome{end: true, reason: writeReason(err, ReasonClientClosed), err: err}
			}
			c.out.Add(int64(n))
		}
		if v == wsession.TooBig {
			return outcome{end: true, reason: ReasonBackendFrameTooBig, err: c.backendTooBig()}
		}
		p = p[n:]
		if o := c.control(c.sess.BackendControl()); o.end {
			return o
		}
	}
	return outcome{}
}

// forward carries client bytes p to the backend as the session says, and
// reports how many went and the write error.
func (c *wsConn) forward(p []byte) (int, error) {
	v := c.sess.FromClient(p, time.Now().UnixNano())
	if v.Wake {
		c.wakeBackendReader()
		if c.sess.Reason() == ReasonRateLimited {
			c.s.obs.RateLimited(c.pool.Name, RateClose)
		}
	}
	if v.Pause != 0 {
		c.s.obs.RateLimited(c.pool.Name, RateSlow)
	}
	p = p[:v.N]
	if len(p) > 0 {
		if err := c.sendBackend(p); err != nil {
			return 0, err
		}
	}
	if v.CloseBackend {
		var k [4]byte
		rand.Read(k[:])
		mc := c.sess.MaskedClose(k)
		if err := c.sendBackend(mc); err != nil {
			return len(p), err
		}
		return len(p) + len(mc), nil
	}
	return len(p), nil
}

// head renders the 101 and the frames the backend sent behind it, and
// reports whether a frame over the limit follows them.
func (c *wsConn) head(head, backendBuffered []byte) ([]byte, int, bool) {
	n, tooBig := c.sess.Head(backendBuffered)
	return append(head, backendBuffered[:n]...), n, tooBig
}

// backendTooBig logs a backend frame over MaxFrameBytes and returns the
// error that ends the connection: nothing bounds a backend either
// (base/base#2655), and there is no boundary left to send a close at.
func (c *wsConn) backendTooBig() error {
	c.s.log.Warn("backend frame over the limit; closing the connection",
		"pool", c.pool.Name, "backend", c.be.ID(), "max_frame_bytes", c.pool.MaxFrameBytes)
	return errBackendFrameTooBig
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
