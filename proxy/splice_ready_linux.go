package proxy

import (
	"context"
	"errors"
	"io"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/edgelb/edge/proxy/internal/wsession"
	"golang.org/x/sys/unix"
)

// Runner states of a readiness-driven connection.
const (
	runIdle  = iota // nobody runs the connection
	runBusy         // one goroutine runs it
	runAgain        // one goroutine runs it and must run it once more
	runMoved        // handed to another process (Handoff): nobody runs it again
)

// readyState is the part of a wsConn that only the readiness-driven splice
// uses. Whoever wins the runner state (the poller goroutine, the sweeper, a
// drain timer, the closing goroutine) runs the connection; everyone else
// just asks for one more run, so there is one drain at a time per
// connection, writes are never reordered and no wake-up is lost.
type readyState struct {
	c      *wsConn
	cs, bs *sock
	p      *poller
	id     atomic.Uint64 // poller id; 0 until registered

	state              atomic.Int32
	c2bReady, b2cReady atomic.Bool // the source may hold bytes: drain it
	cHup, bHup         atomic.Bool // hang-up or error reported: read to EOF
	closed             atomic.Bool
	lingering          atomic.Bool // the runner discards what the client sends

	// TLS 1.3 clients whose records the splice owns (tlsrecord_linux.go):
	// hot while the record state may hold ciphers, rest asks the runner
	// to drop them.
	rec       *recConn
	hot, rest atomic.Bool

	// Runner-owned.
	c2bDone, b2cDone bool // EOF seen and passed on
	ending           bool // close once the queues are flushed
	finished         bool
	yield            bool // a pump used up its budget with bytes left
	fin              *time.Timer
}

// startReady takes the connection over for the readiness-driven splice. It
// reports false, with nothing changed, when the connection cannot be taken
// over (not accepted through WrapListener, no epoll, no descriptor left):
// the caller then splices with two goroutines.
func (c *wsConn) startReady(head, clientBuffered, backendBuffered []byte) bool {
	if !readinessOn {
		return false
	}
	ec := edgeConnOf(c.client)
	if ec == nil {
		return false
	}
	p := c.s.getPoller()
	if p == nil {
		return false
	}
	// The Go conns are closed by the takeover: deadlines net/http or the
	// backend handshake left on them no longer matter.
	cs, bs, err := takeover(ec, c.backend)
	if err != nil {
		c.s.log.Debug("readiness splice: keeping goroutines", "err", err)
		return false
	}
	r := &readyState{c: c, cs: cs, bs: bs, p: p}
	c.d = r
	clientBuffered, _ = r.ownRecords(ec, clientBuffered)
	c.backend = nil
	r.state.Store(runBusy)
	if !c.s.reg.add(c) {
		c.closeBoth(ReasonShutdown)
		r.finishReady()
		return true
	}
	c.s.noteTimeouts(c.pool)
	c.s.readyAdds.Add(1)

	if !r.readyStart(head, clientBuffered, backendBuffered) {
		r.runReady()
		return true
	}

	id := p.add(r)
	r.id.Store(id)
	if r.closed.Load() {
		// Closed meanwhile (drain, shutdown): closeBoth may have run
		// before the id existed.
		p.forget(id)
	} else if err := cs.watch(p, id); err != nil {
		c.closeBoth(ReasonShutdown)
	} else if err := bs.watch(p, id|1); err != nil {
		c.closeBoth(ReasonShutdown)
	}
	// crypto/tls (the upgrade request's record may have carried a frame)
	// and the sockets may already hold bytes that epoll will not report:
	// drain both directions once now.
	r.c2bReady.Store(true)
	r.b2cReady.Store(true)
	r.runReady()
	return true
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

// readyEvent handles one epoll event for the client or backend socket.
func (r *readyState) readyEvent(backend bool, ev uint32) {
	hup := ev&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0
	readable := hup || ev&unix.EPOLLIN != 0
	ready, hupFlag := &r.c2bReady, &r.cHup
	if backend {
		ready, hupFlag = &r.b2cReady, &r.bHup
	}
	kick := false
	if hup {
		hupFlag.Store(true)
	}
	if readable {
		ready.Store(true)
		kick = true
	}
	if ev&unix.EPOLLOUT != 0 {
		// Always run on writability: a runner on another goroutine may be
		// between a write's EAGAIN and marking its queue, and an
		// edge-triggered EPOLLOUT dropped here would never come again. A
		// step with nothing queued costs two atomic loads.
		kick = true
	}
	if kick {
		r.kick()
	}
}

// kick runs the connection on this goroutine, or asks the goroutine that
// is running it for one more run.
func (r *readyState) kick() {
	for {
		switch r.state.Load() {
		case runIdle:
			if r.state.CompareAndSwap(runIdle, runBusy) {
				r.runReady()
				return
			}
		case runBusy:
			if r.state.CompareAndSwap(runBusy, runAgain) {
				return
			}
		default:
			return
		}
	}
}

// runReady runs steps until nobody asked for another; the caller holds the
// runner state (runBusy).
func (r *readyState) runReady() {
	c := r.c
	defer func() {
		// A panic here would otherwise take down the poller goroutine (and
		// with it every connection), or leave this one busy forever with
		// its descriptors and registry entry held.
		if v := recover(); v != nil {
			c.s.log.Error("splice panicked; closing the connection", "panic", v, "stack", string(debug.Stack()))
			c.closeBoth(ReasonError)
			if !r.finished {
				r.finishReady()
			}
			r.state.Store(runIdle)
		}
	}()
	for {
		r.step()
		yield := r.yield
		r.yield = false
		if r.state.CompareAndSwap(runBusy, runIdle) {
			if yield {
				r.p.again(r)
			}
			return
		}
		r.state.Store(runBusy)
	}
}

// step flushes what the sockets did not take, drains the directions that
// may have bytes and whose destination has no queue (backpressure), and
// ends the connection when both directions are done.
func (r *readyState) step() {
	switch {
	case r.finished:
		return
	case r.closed.Load():
		r.finishReady()
		return
	case r.lingering.Load():
		r.lingerStep()
	default:
		r.flushQueues()
		r.pumps()
	}
	if r.closed.Load() {
		r.finishReady()
		return
	}
	if r.rec != nil {
		if r.rest.Swap(false) {
			r.rec.idle()
		} else {
			r.hot.Store(true)
		}
	}
}

// flushQueues writes what the sockets did not take before.
func (r *readyState) flushQueues() {
	if r.bs.queued() {
		if err := r.bs.flush(); err != nil {
			r.c.writeFailed(SideBackend, err)
		}
	}
	if r.cs.queued() {
		if err := r.cs.flush(); err != nil {
			r.c.writeFailed(SideClient, err)
		}
	}
}

// pumps drains each direction that may have bytes and whose destination
// has no queue, and ends the connection once both are done.
// A control frame the session wants (wake) marks the backend readable, so
// the backend->client pump runs for it like for bytes.
func (r *readyState) pumps() {
	c := r.c
	// A client paused for its rate (RateSlow) keeps its readiness pending;
	// the sweeper runs it once the bucket has room.
	at := c.sess.ReadableAt()
	paused := at != 0 && at > time.Now().UnixNano()
	if !r.closed.Load() && !r.c2bDone && !paused && !r.bs.queued() && r.cs.queuedBytes() <= clientQueueCap && r.c2bReady.Swap(false) {
		r.pumpClientToBackend()
	}
	if !r.closed.Load() && !r.b2cDone && !r.cs.queued() && r.b2cReady.Swap(false) {
		r.pumpBackendToClient()
	}
	if !r.closed.Load() && (r.ending || r.c2bDone && r.b2cDone) && !r.cs.queued() && !r.bs.queued() {
		r.c.closeBoth(reasonKeep)
	}
}

// trimmer decides when the sweeper returns memory (see trimAfterConns).
type trimmer struct {
	adds, trimmedAdds int64
	act               uint64
	quietSince        int64 // unix nanos of the last change of adds or act
	lastTrim          int64
}

// due reports, at now, with adds connections ever started and act batches
// of events ever handled, whether a trim is due.
func (t *trimmer) due(now, adds int64, act uint64) bool {
	if adds != t.adds || act != t.act {
		t.adds, t.act, t.quietSince = adds, act, now
		return false
	}
	return adds-t.trimmedAdds >= trimAfterConns && now-t.quietSince >= int64(trimQuiet) && now-t.lastTrim >= int64(trimEvery)
}

// done records a trim at now.
func (t *trimmer) done(now int64) { t.trimmedAdds, t.lastTrim = t.adds, now }

// clientQueueCap bounds what reading from the client may queue towards the
// client itself. Reading a TLS client makes crypto/tls answer a KeyUpdate
// that requests one with a KeyUpdate of its own (RFC 8446 §4.6.3), written
// to the client: a client that floods KeyUpdates and never reads would
// grow that queue as fast as it sends. Past the cap the client is not
// read until it takes its bytes. Traffic from the backend never gets
// near it (that direction pauses as soon as the client's queue is not
// empty, one buffer at most), so well-behaved clients never meet it.
const clientQueueCap = 64 << 10

// pumpClientToBackend copies client bytes to the backend (opaque) until
// the client would block, the backend's queue asks for a pause, or the
// client's own queue is over clientQueueCap.
func (r *readyState) pumpClientToBackend() {
	c := r.c
	r.cs.startDrain(r.cHup.Load())
	bp := c.s.getBuf()
	defer c.s.putBuf(bp)
	moved := 0
	for {
		if moved >= pumpBudget {
			r.c2bReady.Store(true)
			r.yield = true
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
				r.c2bReady.Store(true)
				return
			}
		} else if err == nil {
			// edge's record layer read records without application
			// data (recConn.Read): up to a buffer of KeyUpdates, each
			// a key derivation, or of empty records. That ends the
			// run's budget: counted as nothing, a client sending only
			// those would hold the poller for as long as it sends.
			moved = pumpBudget
		}
		switch {
		case err == nil:
		case errors.Is(err, errWouldBlock):
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
		if r.bs.queued() || r.cs.queuedBytes() > clientQueueCap {
			r.c2bReady.Store(true)
			return
		}
	}
}

// pumpBackendToClient copies backend frames to the client; the session
// puts control frames between two frames.
func (r *readyState) pumpBackendToClient() {
	c := r.c
	r.bs.startDrain(r.bHup.Load())
	var bp *[]byte
	defer func() {
		if bp != nil {
			c.s.putBuf(bp)
		}
	}()
	moved := 0
	for {
		if c.controlDue() {
			return
		}
		if r.cs.queued() {
			r.b2cReady.Store(true)
			return
		}
		if moved >= pumpBudget {
			r.b2cReady.Store(true)
			r.yield = true
			return
		}
		if bp == nil {
			bp = c.s.getBuf()
		}
		n, err := r.bs.read(*bp)
		if err != nil {
			r.backendReadEnd(err)
			return
		}
		c.touch()
		moved += n
		if c.relay((*bp)[:n]) {
			return
		}
	}
}

// backendReadEnd handles a backend read that returned no bytes.
func (r *readyState) backendReadEnd(err error) {
	switch {
	case errors.Is(err, errWouldBlock):
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
	_, err := r.bs.write(p)
	return err
}

// wake has the runner pump the backend->client direction, where the
// session's control frames go out.
func (r *readyState) wake() {
	r.b2cReady.Store(true)
	r.kick()
}

// halfClose passes a clean end of stream on to side (after its queue)
// and gives the other half wsession.FinTimeout.
func (r *readyState) halfClose(side CloseSide) {
	if side == SideBackend {
		r.bs.closeWrite()
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

// closeReady closes both sockets once, from any goroutine, and has the
// runner finish the connection.
func (r *readyState) closeNow() {
	if !r.closed.CompareAndSwap(false, true) {
		return
	}
	if id := r.id.Load(); id != 0 {
		r.p.forget(id)
	}
	r.c.client.Close() // a tls.Conn tries a close_notify first; never blocks
	r.bs.close()
	r.kick()
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
	r.c.finish()
}

// noteTimeouts lowers the sweep period to a quarter of the pool's idle,
// write and ping timeouts, so short timeouts are honoured closely.
func (s *Server) noteTimeouts(p *Pool) {
	// A client paused for its rate resumes at the next sweep: a quarter
	// of 400 ms bounds the pause's overshoot at 100 ms.
	rate := time.Duration(0)
	if p.RateSlow && (p.RateMessages > 0 || p.RateBytes > 0) {
		rate = 400 * time.Millisecond
	}
	for _, d := range []time.Duration{p.IdleTimeout, p.settings().writeTimeout, p.PingInterval, p.PingTimeout, p.settings().ws.LingerTimeout, rate} {
		if d <= 0 {
			continue
		}
		d = min(max(d/4, minSweep), maxSweep)
		for {
			cur := s.sweepEvery.Load()
			if int64(d) >= cur || s.sweepEvery.CompareAndSwap(cur, int64(d)) {
				break
			}
		}
	}
}

// sweeper closes idle connections and connections whose queue has not
// drained within the write timeout (a half-open client that never reads,
// traefik#10627). One coarse timer per Server is cheaper than one per
// connection; activity is a timestamp the data path stores anyway.
func (s *Server) sweeper(ctx context.Context, done chan struct{}) {
	defer close(done)
	t := time.NewTimer(time.Duration(s.sweepEvery.Load()))
	defer t.Stop()
	var buf []*wsConn
	var tr trimmer
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now().UnixNano()
		// Returning memory after connection churn (docs/ARCHITECTURE.md): every
		// handshake leaves garbage the collector keeps as headroom, so RSS
		// after a burst of connections is about twice the live heap. Once
		// a burst is over and nothing moves, one forced collection gives
		// that back; while traffic flows the runtime's own scavenger does,
		// more slowly, without a pause.
		if tr.due(now, s.readyAdds.Load(), s.activity()) {
			debug.FreeOSMemory()
			tr.done(time.Now().UnixNano())
		}
		buf = s.reg.appendAll(buf[:0])
		for _, c := range buf {
			if r, ok := c.d.(*readyState); ok {
				r.sweep(now)
			}
		}
		clear(buf)
		t.Reset(time.Duration(s.sweepEvery.Load()))
	}
}

// restAfter is how long a TLS client whose records the splice owns must
// be quiet before its ciphers (key schedules, about 0.8 KiB a direction)
// are dropped; the next record rebuilds them, which costs about as much
// as sealing a few small records.
const restAfter = time.Second

// sweep is one sweeper visit of a readiness-driven connection at now:
// the session's clock (idle, lingering, a queue a peer does not take,
// the heartbeat), then the record layer's rest.
func (r *readyState) sweep(now int64) {
	c := r.c
	if c.tick(now, r.queuedSince()).Kind == wsession.End || r.lingering.Load() {
		return
	}
	if r.rec != nil && now-c.sess.LastActivity() >= int64(restAfter) && r.hot.CompareAndSwap(true, false) {
		r.rest.Store(true)
		r.kick()
	}
	if at := c.sess.ReadableAt(); at != 0 && now >= at && r.c2bReady.Load() {
		r.kick() // a client paused for its rate may be read again
	}
}

// queuedSince is since when the older of the two queues holds bytes; 0:
// neither does.
func (r *readyState) queuedSince() int64 {
	a, b := r.cs.qSince.Load(), r.bs.qSince.Load()
	if a == 0 || b != 0 && b < a {
		return b
	}
	return a
}

// lingerReady begins a lingering close (linger.go) on the readiness
// splice: the backend socket closes now, the client's write half after
// its queue (the close frame, a TLS close_notify), and the runner then
// discards what the client sends; the sweeper ends it at LingerTimeout.
// No goroutine and no buffer is held meanwhile.
func (r *readyState) linger() {
	r.lingering.Store(true)
	r.bs.close()
	closeWrite(r.c.client)
	// The client may have sent bytes that epoll reported before.
	r.c2bReady.Store(true)
	r.kick()
}

// lingerStep is a run of a lingering connection: flush the client's
// queue, read and drop what the client sent, and end at its end of file,
// an error, or past LingerBytes.
func (r *readyState) lingerStep() {
	c := r.c
	if r.cs.queued() {
		if err := r.cs.flush(); err != nil {
			c.stop()
			return
		}
	}
	if !r.c2bReady.Swap(false) {
		return
	}
	r.cs.startDrain(r.cHup.Load())
	bp := c.s.getBuf()
	defer c.s.putBuf(bp)
	moved := 0
	for {
		if moved >= pumpBudget {
			r.c2bReady.Store(true)
			r.yield = true
			return
		}
		n, err := r.cs.read(*bp)
		moved += n
		if errors.Is(err, errWouldBlock) {
			return
		}
		if c.discard(n) || err != nil {
			c.stop()
			return
		}
	}
}
