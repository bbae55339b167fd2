package proxy

import (
	"crypto/rand"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/edgelb/edge/auth"
	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/proxy/internal/handoff"
	"github.com/edgelb/edge/proxy/internal/wsession"
)

// errBackendFrameTooBig reports a backend frame over Pool.MaxFrameBytes.
var errBackendFrameTooBig = errors.New("backend frame over the pool's MaxFrameBytes")

// wsConn is one live upgraded connection: its exchange, its sockets, its
// session (the WebSocket policy and the decisions about its end,
// internal/wsession), its counters and the driver that splices it
// (splice.go or splice_ready_linux.go).
type wsConn struct {
	s       *Server
	x       *exchange
	client  net.Conn
	backend *net.TCPConn
	be      *balance.Backend
	pool    *pool

	timer *time.Timer // jittered close request; guarded by the registry lock
	reg   int32       // 1 + its index in the registry's list; 0: not in it; guarded likewise

	sess    wsession.Session
	in, out atomic.Int64

	d driver // nil until start picks one

	// who is the mark of the token the connection was opened with (nil:
	// none), what a revocation is matched against (SetRevoked).
	who *auth.Mark
}

// driver is the splice that runs a connection. It reads the sockets its
// own way and hands the bytes to the bridge below; it carries out the
// session's decisions (act) and holds no WebSocket policy of its own.
type driver interface {
	// sendClient and sendBackend write p to one side: under the pool's
	// write timeout on the goroutine splice (a timed-out write poisons a
	// tls.Conn and the connection is closed: that is how a half-open
	// client is reaped, traefik#10627); queued, never blocking, on the
	// readiness splice.
	sendClient(p []byte) error
	sendBackend(p []byte) error
	// wake makes the backend reader look at the session (BackendControl)
	// without losing the wake-up.
	wake()
	// halfClose shuts side's write half down and gives the other half
	// wsession.FinTimeout to end.
	halfClose(side CloseSide)
	// linger begins the lingering close (RFC 6455 §7.1.1; the session
	// keeps its state, wsession/session.go).
	linger()
	// endFlushed ends the connection once what is queued to the client
	// went out.
	endFlushed()
	// closeNow closes both sockets once, lingering or not.
	closeNow()
	// freeze holds the connection still for a move to another process
	// (handoff_linux.go), or says why it cannot move now.
	freeze() (*frozen, handoff.Result)
}

func newWSConn(s *Server, x *exchange, client net.Conn, bc *backendConn) *wsConn {
	c := &wsConn{s: s, x: x, client: client, backend: bc.conn, be: bc.backend, pool: x.pool}
	c.sess.Init(&x.pool.ws, time.Now().UnixNano())
	if bc.foreign {
		c.sess.ForeignExtension()
	}
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
	c.clientKeepAlive()
	if c.startReady(head, clientBuffered, backendBuffered) {
		return
	}
	c.startGoroutines(head, clientBuffered, backendBuffered)
}

// act carries out a decision of the session: the one switch on it.
func (c *wsConn) act(a wsession.Action) {
	switch a.Kind {
	case wsession.Ping, wsession.Close:
		c.d.wake()
	case wsession.HalfClose:
		c.d.halfClose(a.Side)
	case wsession.Linger:
		c.d.linger()
	case wsession.End:
		if a.Flush {
			c.d.endFlushed()
			return
		}
		c.d.closeNow()
	}
}

// closeBoth ends the connection for reason: lingering when the client was
// sent a close frame (the session decides, Finish), at once otherwise or
// when edge shuts down.
func (c *wsConn) closeBoth(reason CloseReason) {
	c.act(c.sess.Finish(reason, reason == ReasonShutdown, time.Now().UnixNano()))
}

// stop ends the connection now, lingering included, keeping the reason
// already recorded.
func (c *wsConn) stop() {
	c.act(c.sess.Finish(reasonKeep, true, time.Now().UnixNano()))
}

// requestClose asks for a close frame with code to the client at the next
// backend->client frame boundary, and wakes whoever reads the backend.
func (c *wsConn) requestClose(code int, reason CloseReason) {
	if c.sess.Request(code, reason) {
		c.d.wake()
	}
}

// touch records a byte read either way (the idle timeout's clock).
func (c *wsConn) touch() { c.sess.Touch(time.Now().UnixNano()) }

// tick asks the session what the clock calls for now (queuedSince: the
// driver's oldest unsent bytes, 0 for none) and carries it out.
func (c *wsConn) tick(now, queuedSince int64) wsession.Action {
	a := c.sess.Tick(now, queuedSince)
	c.act(a)
	return a
}

// eof reports a clean end of side's stream and carries out what follows.
func (c *wsConn) eof(side CloseSide) wsession.Action {
	a := c.sess.EOF(side)
	c.act(a)
	return a
}

// writeFailed reports a failed write to side and carries out what follows.
func (c *wsConn) writeFailed(side CloseSide, err error) wsession.Action {
	a := c.sess.WriteFailed(side, err, time.Now().UnixNano())
	c.act(a)
	return a
}

// discard accounts for n client bytes dropped while lingering and
// reports whether lingering ended (then the sockets are closed).
func (c *wsConn) discard(n int) bool {
	a := c.sess.Discard(n)
	c.act(a)
	return a.Kind == wsession.End
}

// deadline is when side's reader must look at the session again; zero:
// no bound.
func (c *wsConn) deadline(side CloseSide) time.Time {
	if d := c.sess.Deadline(side); d != 0 {
		return time.Unix(0, d)
	}
	return time.Time{}
}

// finish releases everything the connection held and writes its log
// line: the one end of a connection here. One that moved to another
// process (Handoff; its descriptors closed without a write) writes no
// access line, close code or fault here, since the process it moved to
// writes them when it ends there; the Observer sees it close as
// ReasonMoved, so every ConnOpened keeps its ConnClosed.
func (c *wsConn) finish(moved bool) {
	c.s.reg.remove(c)
	c.be.Release()
	x := c.x
	x.release()
	c.s.giveSubject(c.pool, c.who)
	name := ""
	if c.who != nil && c.pool.auth != nil && c.pool.auth.LogSubject {
		name = c.s.subjects.nameOf(c.pool.name, c.who.Subject)
		c.s.subjects.nameGive(c.pool.name, c.who.Subject)
	}
	if moved {
		c.s.obs.ConnClosed(x.routeName(), c.be.ID(), string(ReasonMoved), c.s.now().Sub(x.start), c.in.Load(), c.out.Load())
		return
	}
	reason := c.sess.Reason()
	x.reason = string(reason)
	x.in, x.out = c.in.Load(), c.out.Load()
	x.closeSide, x.closeCode = c.sess.ClosedBy(reason)
	if _, counted := c.sess.Deflate(); counted {
		w, z := c.sess.Inflated()
		x.zWire, x.zInflated = w, z
		x.deflate = deflateCounted
	}
	c.logFault()
	// The access line goes first: whoever waits for ConnClosed then finds it.
	x.logAccessAs(c.who, name)
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

// controlDue writes the control frame the session wants at this point
// of the backend->client stream, if any, and reports whether the
// direction ends (the session's decision carried out).
func (c *wsConn) controlDue() bool { return c.control(c.sess.BackendControl()) }

// control writes ctl's frame, if any, and carries out what follows it;
// it reports whether the direction ends.
func (c *wsConn) control(ctl wsession.Control) bool {
	if ctl.Frame != nil {
		if err := c.d.sendClient(ctl.Frame); err != nil {
			c.writeFailed(SideClient, err)
			return true
		}
		c.sess.ControlWritten(ctl, time.Now().UnixNano())
		if ctl.Code != 0 {
			c.s.obs.CloseSent(c.x.routeName(), ctl.Code)
		} else {
			c.s.obs.PingSent(c.x.routeName())
		}
	}
	if !ctl.End {
		return false
	}
	if ctl.Flush {
		c.act(wsession.Action{Kind: wsession.End, Flush: true})
	} else {
		c.closeBoth(ctl.Reason)
	}
	return true
}

// relay carries backend bytes p to the client as the session says:
// forwarded, with control frames between two frames, dropped after a
// close, or the end at a frame over the limit. It reports whether the
// direction ends.
func (c *wsConn) relay(p []byte) bool {
	for len(p) > 0 {
		n, v := c.sess.FromBackend(p)
		if v == wsession.Drop {
			return false
		}
		if n > 0 {
			// Whole frames before one over the limit still go out.
			if err := c.d.sendClient(p[:n]); err != nil {
				c.writeFailed(SideClient, err)
				return true
			}
			c.out.Add(int64(n))
		}
		if v == wsession.TooBig {
			c.backendTooBig()
			c.closeBoth(ReasonBackendFrameTooBig)
			return true
		}
		p = p[n:]
		if c.controlDue() {
			return true
		}
	}
	return false
}

// forward carries client bytes p to the backend as the session says, and
// reports how many were handled (forwarded, or pongs edge consumed); ok
// false: a write failed and the session's decision about it (a) was
// carried out.
func (c *wsConn) forward(p []byte) (n int, a wsession.Action, ok bool) {
	now := time.Now().UnixNano()
	paused := false
	for {
		v := c.sess.FromClient(p, now)
		if v.Wake {
			c.d.wake()
			if c.sess.Reason() == ReasonRateLimited {
				c.s.obs.RateLimited(c.pool.name, RateClose)
			}
		}
		if v.Pause != 0 && !paused {
			paused = true
			c.s.obs.RateLimited(c.pool.name, RateSlow)
		}
		if v.N > 0 {
			if err := c.d.sendBackend(p[:v.N]); err != nil {
				return n, c.writeFailed(SideBackend, err), false
			}
			n += v.N
		}
		if v.CloseBackend {
			var k [4]byte
			rand.Read(k[:])
			mc := c.sess.MaskedClose(k)
			if err := c.d.sendBackend(mc); err != nil {
				return n, c.writeFailed(SideBackend, err), false
			}
			return n + len(mc), a, true
		}
		// A pong answering edge's ping ends here (wsession/pong.go); the
		// bytes behind it are judged next.
		n += v.Drop
		if p = p[v.N+v.Drop:]; v.Drop == 0 || len(p) == 0 {
			return n, a, true
		}
	}
}

// head renders the 101 and the frames the backend sent behind it, and
// reports whether a frame over the limit follows them.
func (c *wsConn) head(head, backendBuffered []byte) ([]byte, int, bool) {
	n, tooBig := c.sess.Head(backendBuffered)
	return append(head, backendBuffered[:n]...), n, tooBig
}

// logFault logs the rule of RFC 6455 or RFC 7692 a frame broke, when one
// did (wsession/strict.go): a backend's as a warning (the operator's to
// mend), a client's at debug level (any client can send one, and each
// costs it its connection).
func (c *wsConn) logFault() {
	f, fromClient := c.sess.Fault()
	switch {
	case f == "":
	case fromClient:
		c.s.log.Debug("client frame broke the WebSocket framing rules; refused with close 1002",
			"pool", c.pool.name, "client", c.x.id.client.String(), "rule", f)
	default:
		c.s.log.Warn("backend frame broke the WebSocket framing rules; refused, the client closed with 1014",
			"pool", c.pool.name, "backend", c.be.ID(), "rule", f)
	}
}

// backendTooBig logs a backend frame over MaxFrameBytes and returns the
// error that ends the connection: nothing bounds a backend either
// (base/base#2655), and there is no boundary left to send a close at.
// Behind the 101 the frame may instead have broken a rule (Session.Head),
// which logFault logs.
func (c *wsConn) backendTooBig() error {
	if f, _ := c.sess.Fault(); f != "" {
		return errBackendFrameTooBig
	}
	c.s.log.Warn("backend frame over the limit; closing the connection",
		"pool", c.pool.name, "backend", c.be.ID(), "max_frame_bytes", c.pool.ws.MaxFrameBytes)
	return errBackendFrameTooBig
}

// readReason names a failed read.
func readReason(err error, closed CloseReason) CloseReason {
	if errors.Is(err, net.ErrClosed) {
		return ReasonShutdown
	}
	return closed
}
