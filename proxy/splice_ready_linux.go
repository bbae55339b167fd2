package proxy

import (
	"errors"
	"io"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/edgelb/edge/proxy/internal/ready"
	"github.com/edgelb/edge/proxy/internal/wsession"
)

// The readiness-driven splice: the driver of a connection the readiness
// runtime (internal/ready) runs. The runtime owns the sockets, the
// pollers, the runner state and the sweeper; this driver decides what a
// run moves (the pumps below) and carries out the session's actions.
type readyState struct {
	c      *wsConn
	rc     *ready.Conn
	cs, bs *ready.Sock
	ec     *edgeConn // the accepted conn (addresses, PROXY bytes)

	lingering atomic.Bool // the runner discards what the client sends
	// ctlWanted: the session has a control frame for the client (a ping,
	// a close); the next run offers it at the backend->client frame
	// boundary without reading the backend, which has nothing to say
	// unless epoll said so (a read would only return EAGAIN: one wasted
	// system call per ping, 3,333 a second at 100,000 connections).
	ctlWanted atomic.Bool

	// Runner-owned.
	c2bDone, b2cDone bool // EOF seen and passed on
	ending           bool // close once the queues are flushed
	finished         bool
	moved            bool // this run moved data (restIfStill)
	fin              *time.Timer
}

// startReady takes the connection over for the readiness-driven splice. It
// reports false, with nothing changed, when the connection cannot be taken
// over (not accepted through WrapListener, the runtime not running, no
// descriptor left): the caller then splices with two goroutines.
func (c *wsConn) startReady(head, clientBuffered, backendBuffered []byte) bool {
	if !readinessOn {
		return false
	}
	ec := edgeConnOf(c.client)
	if ec == nil || !c.s.rt.Running() {
		return false
	}
	// The Go conns are closed by the takeover: deadlines net/http or the
	// backend handshake left on them no longer matter.
	cfd, bfd, err := takeover(ec, c.backend)
	if err != nil {
		c.s.log.Debug("readiness splice: keeping goroutines", "err", err)
		return false
	}
	r := newReadyState(c, cfd, bfd)
	ec.own(r.cs)
	r.ec = ec
	clientBuffered, _ = r.ownRecords(ec, clientBuffered)
	c.backend = nil
	if !c.s.reg.add(c) {
		c.closeBoth(ReasonShutdown)
		r.finishReady()
		return true
	}
	c.s.noteTimeouts(c.pool)
	if !r.readyStart(head, clientBuffered, backendBuffered) {
		r.rc.Run()
		return true
	}
	r.register()
	return true
}

// newReadyState makes r c's driver over the client's and the backend's
// descriptors; the runtime's Conn starts held by the caller.
func newReadyState(c *wsConn, cfd, bfd int) *readyState {
	r := &readyState{c: c}
	r.rc = ready.NewConn(r, cfd, bfd)
	r.cs, r.bs = r.rc.Sock(ready.Client), r.rc.Sock(ready.Backend)
	c.d = r
	return r
}

// register adds the connection to the runtime and runs both directions
// once: crypto/tls (the upgrade request's record may have carried a
// frame) and the sockets may already hold bytes that epoll will not
// report. The caller holds the runner state.
func (r *readyState) register() {
	if err := r.c.s.rt.Add(r.rc); err != nil {
		r.c.closeBoth(ReasonShutdown)
	}
	r.rc.MarkReadable(ready.Client)
	r.rc.MarkReadable(ready.Backend)
	r.rc.Run()
}

// readyStart writes the 101 and any frames the backend sent behind it,
// then what the client sent behind its request; neither write blocks. It
// reports whether the splice goes on.
func (r *readyState) readyStart(head, clientBuffered, backendBuffered []byte) bool {
	c := r.c
	out, n, tooBig := c.head(head, backendBuffered)
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
		k, _, ok := c.forward(clientBuffered)
		if !ok {
			return false
		}
		c.in.Add(int64(k))
	}
	return true
}

// Step is one run (ready.Handler): flush what the sockets did not take,
// drain the directions that may have bytes and whose destination has no
// queue (backpressure), and end the connection when both are done.
func (r *readyState) Step() {
	switch {
	case r.finished:
		return
	case r.rc.Closed():
		r.finishReady()
		return
	case r.lingering.Load():
		r.lingerStep()
	default:
		r.moved = false
		last := r.c.sess.LastActivity()
		r.flushQueues()
		r.pumps()
		r.restIfStill(last)
	}
	if r.rc.Closed() {
		r.finishReady()
	}
}

// Panicked closes and finishes a connection whose run or sweep panicked
// (ready.Handler), which would otherwise hold its descriptors and
// registry entry for ever.
func (r *readyState) Panicked(v any) {
	r.c.s.log.Error("splice panicked; closing the connection", "panic", v, "stack", string(debug.Stack()))
	r.c.closeBoth(ReasonError)
	if !r.finished {
		r.finishReady()
	}
}

// restIfStill drops the client's record ciphers at the end of a run that
// moved no data (nothing read from the backend or forwarded to it,
// nothing flushed) on a connection quiet for restAfter before it (last:
// its last activity when the run began). On a held connection those are
// the runs of its heartbeat: edge's ping written, and the pong answering
// it consumed (wsession/pong.go), which touches the connection, hence the
// activity taken before the run. Left to the sweeper, the ping's run was
// followed by a run of the rest's own, and the pong's ciphers were kept
// restAfter for a visit and a run that dropped them: about 6,700 runs a
// second at 100,000 connections pinged every 30 s. A connection the
// backend streams to is never quiet, so its pings leave its ciphers
// built; a record read in part keeps them too (ready.Conn.RestNow).
func (r *readyState) restIfStill(last int64) {
	if !r.moved && !r.rc.Closed() && time.Now().UnixNano()-last >= int64(restAfter) {
		r.rc.RestNow()
	}
}

// flushQueues writes what the sockets did not take before.
func (r *readyState) flushQueues() {
	if r.bs.Queued() || r.cs.Queued() {
		r.moved = true
	}
	if r.bs.Queued() {
		if err := r.bs.Flush(); err != nil {
			r.c.writeFailed(SideBackend, err)
		}
	}
	if r.cs.Queued() {
		if err := r.cs.Flush(); err != nil {
			r.c.writeFailed(SideClient, err)
		}
	}
}

// pumps drains each direction that may have bytes and whose destination
// has no queue, and ends the connection once both are done. A control
// frame the session wants (wake) runs the backend->client pump too, where
// control frames go out, but reads the backend only if it is readable.
func (r *readyState) pumps() {
	rc := r.rc
	if r.clientPumpable() && rc.TakeReadable(ready.Client) {
		r.pumpClientToBackend()
	}
	if !rc.Closed() && !r.b2cDone && !r.cs.Queued() {
		readable := rc.TakeReadable(ready.Backend)
		if r.ctlWanted.Swap(false) || readable {
			r.pumpBackendToClient(readable)
		}
	}
	if !rc.Closed() && (r.ending || r.c2bDone && r.b2cDone) && !r.cs.Queued() && !r.bs.Queued() {
		r.c.closeBoth(reasonKeep)
	}
}

// clientQueueCap bounds what reading from the client may queue towards the
// client itself. Reading a TLS client makes crypto/tls answer a KeyUpdate
// that requests one with a KeyUpdate of its own (RFC 8446 §4.6.3), written
// to the client: a client that floods KeyUpdates and never reads would
// grow that queue as fast as it sends. Past the cap the client is not
// read until it takes its bytes. Traffic from the backend never gets
// near it (that direction pauses as soon as the client's queue is not
// empty, one buffer at most), so well-behaved clients never meet it.
const clientQueueCap = 64 << 10

// clientPumpable reports whether the client->backend direction may run:
// open, the backend's queue empty, the client's own under its cap
// (clientQueueCap), and the client not paused for its rate (RateSlow:
// its readiness stays pending and the sweeper runs it once the bucket
// has room).
func (r *readyState) clientPumpable() bool {
	if r.rc.Closed() || r.c2bDone || r.bs.Queued() || r.cs.QueuedBytes() > clientQueueCap {
		return false
	}
	at := r.c.sess.ReadableAt()
	return at == 0 || at <= time.Now().UnixNano()
}

// pumpClientToBackend copies client bytes to the backend (opaque) until
// the client would block, the backend's queue asks for a pause, or the
// client's own queue is over clientQueueCap.
func (r *readyState) pumpClientToBackend() {
	c := r.c
	r.rc.StartDrain(ready.Client)
	bp := c.s.getBuf()
	defer c.s.putBuf(bp)
	moved := 0
	for {
		if moved >= ready.PumpBudget {
			r.rc.Yield(ready.Client)
			return
		}
		// A tls.Conn may return bytes together with an error (a
		// close_notify read ahead, or would-block while reading ahead):
		// forward the bytes first.
		n, err := c.client.Read(*bp)
		if n > 0 {
			c.touch()
			k, _, ok := c.forward((*bp)[:n])
			if !ok {
				return
			}
			c.in.Add(int64(k))
			moved += n
			if at := c.sess.ReadableAt(); at != 0 && at > time.Now().UnixNano() {
				// Over its rate (RateSlow): not read until the sweeper
				// finds the bucket refilled, so TCP pushes back.
				r.rc.MarkReadable(ready.Client)
				return
			}
		} else if err == nil {
			// edge's record layer read records without application
			// data (recConn.Read): up to a buffer of KeyUpdates, each
			// a key derivation, or of empty records. That ends the
			// run's budget: counted as nothing, a client sending only
			// those would hold the poller for as long as it sends.
			moved = ready.PumpBudget
		}
		switch {
		case err == nil:
		case errors.Is(err, ready.ErrWouldBlock):
			return
		case errors.Is(err, io.EOF):
			// Propagate the half-close; the other direction goes on.
			r.c2bDone = true
			c.eof(SideClient)
			return
		default:
			c.closeBoth(readReason(err, ReasonClientClosed))
			return
		}
		if r.bs.Queued() || r.cs.QueuedBytes() > clientQueueCap {
			r.rc.MarkReadable(ready.Client)
			return
		}
	}
}

// pumpBackendToClient copies backend frames to the client; the session
// puts control frames between two frames. Unless readable, it only
// offers the session's control frame: mid-frame, that waits for the
// backend's next bytes, whose event runs the pump again.
func (r *readyState) pumpBackendToClient(readable bool) {
	c := r.c
	if readable {
		r.rc.StartDrain(ready.Backend)
	}
	var bp *[]byte
	defer func() {
		if bp != nil {
			c.s.putBuf(bp)
		}
	}()
	moved := 0
	for {
		if c.controlDue() || !readable {
			return
		}
		if r.cs.Queued() {
			r.rc.MarkReadable(ready.Backend)
			return
		}
		if moved >= ready.PumpBudget {
			r.rc.Yield(ready.Backend)
			return
		}
		if bp == nil {
			bp = c.s.getBuf()
		}
		n, err := r.bs.Read(*bp)
		if err != nil {
			r.backendReadEnd(err)
			return
		}
		c.touch()
		moved += n
		r.moved = true
		if c.relay((*bp)[:n]) {
			return
		}
	}
}

// backendReadEnd handles a backend read that returned no bytes.
func (r *readyState) backendReadEnd(err error) {
	switch {
	case errors.Is(err, ready.ErrWouldBlock):
	case errors.Is(err, io.EOF):
		r.b2cDone = true
		r.c.eof(SideBackend)
	default:
		r.c.closeBoth(readReason(err, ReasonBackendClosed))
	}
}

// The driver's side of the session's actions (conn.go's act).

func (r *readyState) sendClient(p []byte) error {
	_, err := r.c.client.Write(p)
	return err
}

func (r *readyState) sendBackend(p []byte) error {
	r.moved = true
	_, err := r.bs.Write(p)
	return err
}

// wake has the runner pump the backend->client direction, where the
// session's control frames go out.
func (r *readyState) wake() {
	r.ctlWanted.Store(true)
	r.rc.Kick()
}

// halfClose passes a clean end of stream on to side (after its queue)
// and gives the other half wsession.FinTimeout.
func (r *readyState) halfClose(side CloseSide) {
	if side == SideBackend {
		r.bs.CloseWrite()
	} else {
		closeWrite(r.c.client)
	}
	r.armFin()
}

// endFlushed ends the connection once the queues are out (pumps).
func (r *readyState) endFlushed() {
	r.ending = true
	r.armFin()
}

// armFin gives the other half wsession.FinTimeout to finish once one half
// closed cleanly (HAProxy's "timeout client-fin"). Runner only.
func (r *readyState) armFin() {
	if r.fin == nil {
		r.fin = time.AfterFunc(wsession.FinTimeout, func() { r.c.closeBoth(ReasonFinTimeout) })
	}
}

// closeNow closes both sockets once, from any goroutine, and has the
// runner finish the connection.
func (r *readyState) closeNow() {
	if !r.rc.Close() {
		return
	}
	r.c.client.Close() // a tls.Conn tries a close_notify first; never blocks
	r.bs.Close()
	r.rc.Kick()
}

// finishReady ends the connection on its runner.
func (r *readyState) finishReady() {
	if r.finished {
		return
	}
	r.finished = true
	if r.fin != nil {
		r.fin.Stop()
	}
	r.c.finish(false)
}

// noteTimeouts lowers the runtime's sweep period to a quarter of the
// pool's idle, write, ping and linger timeouts and its rate pause, so
// short timeouts are honoured closely.
func (s *Server) noteTimeouts(p *pool) {
	for _, d := range p.timeouts {
		s.rt.NoteTimeout(d)
	}
}

// restAfter is how long a TLS client whose records the splice owns must
// be quiet before its ciphers (key schedules, one a direction; what that
// saves is in docs/BENCHMARKS.md, "the full box again") are dropped; the next record rebuilds them, which costs about as much
// as sealing a few small records.
const restAfter = time.Second

// Sweep is one sweeper visit (ready.Handler) at now: the session's clock
// (idle, lingering, a queue a peer does not take, the heartbeat), then
// the record layer's rest and the end of a rate pause. It returns the
// earliest of the deadlines left (Session.NextTick, the rest, the pause's
// end); whatever moves one earlier runs the connection, which has it
// visited again at the next tick.
func (r *readyState) Sweep(now int64) int64 {
	c := r.c
	if c.tick(now, r.queuedSince()).Kind == wsession.End || r.rc.Closed() {
		return 0
	}
	next := c.sess.NextTick(r.queuedSince())
	if r.lingering.Load() {
		return next
	}
	rest := int64(restAfter)
	if d := c.s.testRestAfter.Load(); d != 0 {
		rest = d
	}
	if last := c.sess.LastActivity(); now-last >= rest {
		r.rc.Rest()
	} else if r.rc.Hot() {
		next = earliest(next, last+rest)
	}
	if at := c.sess.ReadableAt(); at != 0 && now >= at && r.rc.Readable(ready.Client) {
		r.rc.Kick() // a client paused for its rate may be read again
	} else if at > now {
		next = earliest(next, at)
	}
	return next
}

// earliest is the earlier of two unix nano times, 0 being none.
func earliest(a, b int64) int64 {
	if a == 0 || b != 0 && b < a {
		return b
	}
	return a
}

// queuedSince is since when the older of the two queues holds bytes; 0:
// neither does.
func (r *readyState) queuedSince() int64 {
	a, b := r.cs.QueuedSince(), r.bs.QueuedSince()
	if a == 0 || b != 0 && b < a {
		return b
	}
	return a
}

// linger begins a lingering close (wsession/session.go) on the readiness
// splice: the backend socket closes now, the client's write half after
// its queue (the close frame, a TLS close_notify), and the runner then
// discards what the client sends; the sweeper ends it at LingerTimeout.
// No goroutine and no buffer is held meanwhile.
func (r *readyState) linger() {
	r.lingering.Store(true)
	r.bs.Close()
	closeWrite(r.c.client)
	// The client may have sent bytes that epoll reported before.
	r.rc.MarkReadable(ready.Client)
	r.rc.Kick()
}

// lingerStep is a run of a lingering connection: flush the client's
// queue, read and drop what the client sent, and end at its end of file,
// an error, or past LingerBytes.
func (r *readyState) lingerStep() {
	c := r.c
	if r.cs.Queued() {
		if err := r.cs.Flush(); err != nil {
			c.stop()
			return
		}
	}
	if !r.rc.TakeReadable(ready.Client) {
		return
	}
	r.rc.StartDrain(ready.Client)
	bp := c.s.getBuf()
	defer c.s.putBuf(bp)
	moved := 0
	for {
		if moved >= ready.PumpBudget {
			r.rc.Yield(ready.Client)
			return
		}
		n, err := r.cs.Read(*bp)
		moved += n
		if errors.Is(err, ready.ErrWouldBlock) {
			return
		}
		if c.discard(n) || err != nil {
			c.stop()
			return
		}
	}
}
