package ready

import (
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Runner states of a connection.
const (
	runIdle  = iota // nobody runs the connection
	runBusy         // one goroutine runs it
	runAgain        // one goroutine runs it and must run it once more
	runMoved        // handed to another process (Frozen.Forget): nobody runs it again
)

// Side names one socket of a connection.
type Side uint8

// Sides.
const (
	Client Side = iota
	Backend
)

// Handler is the driver of one connection: what a run and a sweep do.
// The runtime calls Step with the runner state held, so there is one run
// at a time per connection and writes are never reordered.
type Handler interface {
	// Step is one run: flush, drain what may be readable, end.
	Step()
	// Sweep is one visit of the sweeper at now (unix nanos), on the
	// sweeper's goroutine. It returns when the connection next needs a
	// visit (unix nanos; 0: not until it runs again): the earliest of its
	// deadlines. Earlier than needed costs one visit, later misses a
	// deadline; anything that runs the connection (a readiness event, a
	// Kick, a close) has it visited at the next tick anyway, which asks
	// again.
	Sweep(now int64) (next int64)
	// Panicked is told, inside the recovery, that Step or Sweep panicked
	// with v: it logs it, and closes and finishes the connection.
	Panicked(v any)
}

// Conn is the runtime's part of one connection: its two sockets, its
// place in a poller, the readiness both sockets reported and the runner
// state. Whoever wins the runner state (a poller goroutine, the sweeper, a
// timer, a closing goroutine) runs the connection; everyone else just
// asks for one more run, so no wake-up is lost.
type Conn struct {
	h      Handler
	cs, bs *Sock
	p      *poller
	id     atomic.Uint64 // poller id; 0 until registered

	state              atomic.Int32
	c2bReady, b2cReady atomic.Bool // the source may hold bytes: drain it
	cHup, bHup         atomic.Bool // hang-up or error reported: read to EOF
	closed             atomic.Bool

	rec *RecordConn // the client's record layer, when edge owns it

	// The sweeper's: dirty says the connection waits in its poller's list
	// for the next tick (it ran, was added or closed); slot is its place
	// in the sweeper's schedule (schedule.set).
	dirty atomic.Bool
	slot  int32

	yield bool // runner-owned: a pump used up its budget with bytes left
}

// connSocks is a Conn and its two sockets in one allocation of 256
// bytes, exactly its size class: they live and die together, and a held
// connection's objects left alone in spans that a burst of handshakes
// filled with garbage keep those spans partly used long after it.
type connSocks struct {
	c      Conn
	cs, bs Sock
}

// NewConn returns the runtime state of a connection over the
// descriptors client and backend (taken over as NewSock takes one), run
// by h; Sock returns the sockets it made. It starts held (the caller's
// first Run releases it), with both directions marked readable: bytes
// buffered before the takeover raise no edge.
func NewConn(h Handler, client, backend int) *Conn {
	a := &connSocks{}
	a.cs.fd, a.bs.fd = int32(client), int32(backend)
	c := &a.c
	c.h, c.cs, c.bs = h, &a.cs, &a.bs
	c.state.Store(runBusy)
	c.c2bReady.Store(true)
	c.b2cReady.Store(true)
	return c
}

// Sock returns the socket of side.
func (c *Conn) Sock(side Side) *Sock {
	if side == Backend {
		return c.bs
	}
	return c.cs
}

// SetRecord tells the runtime the client's records are edge's (Freeze
// locks and checks the record state too).
func (c *Conn) SetRecord(r *RecordConn) { c.rec = r }

// Record is the client's record layer; nil: none.
func (c *Conn) Record() *RecordConn { return c.rec }

// TakeReadable reports, once, that side may hold bytes. Runner only.
func (c *Conn) TakeReadable(side Side) bool {
	if side == Backend {
		return c.b2cReady.Swap(false)
	}
	return c.c2bReady.Swap(false)
}

// Readable reports that side is marked readable, without taking it.
func (c *Conn) Readable(side Side) bool {
	if side == Backend {
		return c.b2cReady.Load()
	}
	return c.c2bReady.Load()
}

// MarkReadable asks the next run to drain side.
func (c *Conn) MarkReadable(side Side) {
	if side == Backend {
		c.b2cReady.Store(true)
	} else {
		c.c2bReady.Store(true)
	}
}

// StartDrain readies side's socket for a drain after readiness: a short
// read is trusted as "empty" unless the peer hung up. Runner only.
func (c *Conn) StartDrain(side Side) {
	if side == Backend {
		c.bs.StartDrain(c.bHup.Load())
	} else {
		c.cs.StartDrain(c.cHup.Load())
	}
}

// Yield marks side readable and has the connection run again after the
// poller's current batch, when a pump used up PumpBudget. Runner only.
func (c *Conn) Yield(side Side) {
	c.MarkReadable(side)
	c.yield = true
}

// event handles one epoll event for the client or backend socket.
func (c *Conn) event(backend bool, ev uint32) {
	hup := ev&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0
	readable := hup || ev&unix.EPOLLIN != 0
	ready, hupFlag := &c.c2bReady, &c.cHup
	if backend {
		ready, hupFlag = &c.b2cReady, &c.bHup
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
		c.Kick()
	}
}

// Kick runs the connection on this goroutine, or asks the goroutine that
// is running it for one more run.
func (c *Conn) Kick() {
	for {
		switch c.state.Load() {
		case runIdle:
			if c.state.CompareAndSwap(runIdle, runBusy) {
				c.Run()
				return
			}
		case runBusy:
			if c.state.CompareAndSwap(runBusy, runAgain) {
				return
			}
		default:
			return
		}
	}
}

// Run runs steps until nobody asked for another; the caller holds the
// runner state (NewConn's, a Kick's, a Frozen's Thaw).
func (c *Conn) Run() {
	defer func() {
		// A panic here would otherwise take down the poller goroutine (and
		// with it every connection), or leave this one busy forever with
		// its descriptors and registry entry held.
		if v := recover(); v != nil {
			c.h.Panicked(v)
			c.state.Store(runIdle)
			c.ran()
		}
	}()
	for {
		c.h.Step()
		if c.rec != nil && !c.closed.Load() {
			c.rec.afterRun()
		}
		yield := c.yield
		c.yield = false
		if c.state.CompareAndSwap(runBusy, runIdle) {
			if yield && c.p != nil {
				c.p.again(c)
			}
			c.ran()
			return
		}
		c.state.Store(runBusy)
	}
}

// ran has the sweeper visit c at its next tick: a run may have moved any
// of its deadlines (a queue, a ping written, the record layer hot again).
// A connection not added yet has no poller; Add marks it.
func (c *Conn) ran() {
	if c.p != nil {
		c.p.markDirty(c)
	}
}

// schedSlot is c's place in the sweeper's schedule (schedItem).
func (c *Conn) schedSlot() *int32 { return &c.slot }

// Hold takes the runner state when nobody runs the connection, as a
// poller does; the caller then runs it (Run).
func (c *Conn) Hold() bool { return c.state.CompareAndSwap(runIdle, runBusy) }

// Yielding reports that the run under way used up a pump's budget.
// Runner only.
func (c *Conn) Yielding() bool { return c.yield }

// Close marks the connection closed and takes it out of its poller; it
// reports whether this call did (the caller then closes the sockets and
// kicks, so the runner finishes it).
func (c *Conn) Close() bool {
	if !c.closed.CompareAndSwap(false, true) {
		return false
	}
	if id := c.id.Load(); id != 0 {
		c.p.forget(id)
	}
	return true
}

// Closed reports a closed connection.
func (c *Conn) Closed() bool { return c.closed.Load() }

// Rest has the runner drop the client's record ciphers (their key
// schedules, one a direction), for a connection the driver found quiet; the next record
// rebuilds them. No-op without edge's record layer or when already done.
func (c *Conn) Rest() {
	if c.rec != nil && c.rec.hot.CompareAndSwap(true, false) {
		c.rec.rest.Store(true)
		c.Kick()
	}
}

// RestNow has the runner drop the client's record ciphers at the end of
// the run it is in, as Rest would, but without a run of its own: for a
// run that moved no data. A record read in part keeps them: the rest of
// it is on its way, and would rebuild them at once. Runner only.
func (c *Conn) RestNow() {
	if c.rec != nil {
		c.rec.restNow()
	}
}

// Hot reports a client on edge's record layer whose ciphers may be built:
// Rest would drop them.
func (c *Conn) Hot() bool { return c.rec != nil && c.rec.hot.Load() }

// Resting reports whether a client on edge's record layer dropped its
// ciphers and nothing rebuilt them: for tests.
func (c *Conn) Resting() bool { return c.rec != nil && c.rec.resting() }
