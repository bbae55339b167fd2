package ready

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Runtime.
type Options struct {
	Logger *slog.Logger
	// Quiet, when set, is called on the sweeper's goroutine once a burst
	// of new connections is over, whatever the traffic of those up: the
	// owner's moment to return memory (trimAfterConns).
	Quiet func()
}

// Runtime is the readiness runtime of one proxy: one poller per
// GOMAXPROCS (each an epoll instance and a goroutine) and one sweeper.
// Run starts them and stops them; in between, Add spreads connections
// over the pollers in turn: a poller runs its connections' TLS and copies
// inline, so one poller would confine all spliced traffic to one core.
type Runtime struct {
	log   *slog.Logger
	quiet func()

	mu      sync.Mutex
	polls   []*poller
	next    uint64 // round-robin over polls
	state   int    // rtNew, rtRunning, rtStopped
	started chan struct{}

	sweepEvery atomic.Int64 // nanoseconds
	adds       atomic.Int64 // connections ever added
	scheduled  atomic.Int64 // connections in the sweeper's schedule after its last tick

	// ticked, when set (tests), is called at the end of every tick with
	// the tick's now.
	ticked func(now int64)
	// clock reads the time that bounds a tick's slices (sweepSlice);
	// tests replace it.
	clock func() int64
}

const (
	rtNew = iota
	rtRunning
	rtStopped
)

// ErrStopped reports a Runtime that is not running: not started yet,
// stopped, or without epoll.
var ErrStopped = errors.New("readiness runtime not running")

// New returns a Runtime; nothing runs until Run.
func New(opts Options) *Runtime {
	rt := &Runtime{log: opts.Logger, quiet: opts.Quiet, started: make(chan struct{})}
	if rt.log == nil {
		rt.log = slog.New(slog.DiscardHandler)
	}
	rt.sweepEvery.Store(int64(maxSweep))
	rt.clock = func() int64 { return time.Now().UnixNano() }
	return rt
}

// Run starts the pollers and the sweeper and returns when ctx ends,
// after stopping them; the owner ends every connection first. It fails
// at once when epoll is unavailable (every connection then takes the
// goroutine splice) or when it ran before.
func (rt *Runtime) Run(ctx context.Context) error {
	rt.mu.Lock()
	if rt.state != rtNew {
		rt.mu.Unlock()
		return errors.New("readiness runtime: Run called twice")
	}
	n := max(1, runtime.GOMAXPROCS(0))
	for range n {
		p, err := newPoller()
		if err != nil {
			for _, q := range rt.polls {
				q.stop()
			}
			rt.polls, rt.state = nil, rtStopped
			rt.mu.Unlock()
			close(rt.started)
			rt.log.Error("readiness splice unavailable", "err", err)
			return err
		}
		rt.polls = append(rt.polls, p)
	}
	for _, p := range rt.polls {
		go p.run(rt.log)
	}
	rt.state = rtRunning
	rt.mu.Unlock()
	close(rt.started)

	sweepCtx, stopSweep := context.WithCancel(ctx)
	defer stopSweep()
	done := make(chan struct{})
	go rt.sweeper(sweepCtx, done)
	<-ctx.Done()
	stopSweep()
	<-done
	rt.mu.Lock()
	polls := rt.polls
	rt.polls, rt.state = nil, rtStopped
	rt.mu.Unlock()
	for _, p := range polls {
		p.stop()
	}
	return nil
}

// Started is closed once Run has started the pollers, or failed to.
func (rt *Runtime) Started() <-chan struct{} { return rt.started }

// Running reports whether connections can be added now.
func (rt *Runtime) Running() bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.state == rtRunning
}

// Add registers c with one of the pollers: both its sockets watched
// edge-triggered. On an error c is not registered (the caller closes it);
// a connection closed meanwhile is left out of the poller.
func (rt *Runtime) Add(c *Conn) error {
	rt.mu.Lock()
	if rt.state != rtRunning {
		rt.mu.Unlock()
		return ErrStopped
	}
	rt.next++
	p := rt.polls[rt.next%uint64(len(rt.polls))]
	rt.mu.Unlock()
	rt.adds.Add(1)
	c.p = p
	id := p.add(c)
	c.id.Store(id)
	p.markDirty(c) // its first visit schedules it
	if c.closed.Load() {
		// Closed meanwhile (drain, shutdown): Close may have run before
		// the id existed.
		p.forget(id)
		return nil
	}
	if err := c.cs.watch(p, id); err != nil {
		return err
	}
	return c.bs.watch(p, id|1)
}

// NoteTimeout lowers the sweep period to a quarter of d, within its
// bounds, so short timeouts are honoured closely.
func (rt *Runtime) NoteTimeout(d time.Duration) {
	if d <= 0 {
		return
	}
	d = min(max(d/4, minSweep), maxSweep)
	for {
		cur := rt.sweepEvery.Load()
		if int64(d) >= cur || rt.sweepEvery.CompareAndSwap(cur, int64(d)) {
			return
		}
	}
}

// Watched counts the sockets the pollers watch, from /proc/self/fdinfo
// of their epoll descriptors (each also watches its eventfd, not
// counted): a socket handed to another process stays watched unless it
// was taken out.
func (rt *Runtime) Watched() (int, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	n := 0
	for _, p := range rt.polls {
		b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", p.epfd))
		if err != nil {
			return 0, err
		}
		n += bytes.Count(b, []byte("\ntfd:")) - 1
	}
	return n, nil
}

// sweeper visits connections when something about them may be due
// (Handler.Sweep: idle, write and ping timeouts, lingering, the record
// layer's rest, a rate pause's end): one coarse timer per runtime is
// cheaper than one per connection, and activity is a timestamp the data
// path keeps anyway. Each tick costs what is due, not what is held: a
// connection is visited when the time its last visit returned has come
// (a schedule, sched.go) or when it ran, was added or closed since the
// last tick (its poller's dirty list), and that visit reschedules it.
// Deadlines are met at the first tick at or after them, as when every
// connection was visited at every tick.
func (rt *Runtime) sweeper(ctx context.Context, done chan struct{}) {
	defer close(done)
	t := time.NewTimer(time.Duration(rt.sweepEvery.Load()))
	defer t.Stop()
	var buf []*Conn
	var sched schedule[*Conn]
	var tr trimmer
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now().UnixNano()
		// Returning memory after connection churn (docs/ARCHITECTURE.md,
		// trim_linux.go): every handshake leaves garbage the collector
		// keeps as headroom. Once a burst is over the owner is told, and
		// may force one collection.
		if tr.due(now, rt.adds.Load()) {
			if rt.quiet != nil {
				rt.quiet()
			}
			tr.done(time.Now().UnixNano())
		}
		buf = rt.tick(ctx, &sched, buf, now)
		if rt.ticked != nil {
			rt.ticked(now)
		}
		t.Reset(time.Duration(rt.sweepEvery.Load()))
	}
}

// tick is one tick of the sweeper at now: the connections marked since
// the last one, then those whose time has come. buf is scratch space,
// returned for the next tick. The tick runs in slices (slicer): however
// much is due at once, it gives way to the pollers between them.
func (rt *Runtime) tick(ctx context.Context, sched *schedule[*Conn], buf []*Conn, now int64) []*Conn {
	rt.mu.Lock()
	polls := rt.polls
	rt.mu.Unlock()
	sl := slicer{ctx: ctx, clock: rt.clock, start: rt.clock()}
	for _, p := range polls {
		buf = p.takeDirty(buf[:0])
		for _, c := range buf {
			// Cleared before the visit: a run meanwhile marks it again.
			c.dirty.Store(false)
			rt.visit(sched, c, now)
			sl.next()
		}
		clear(buf)
	}
	for {
		c, ok := sched.due(now)
		if !ok {
			break
		}
		rt.visit(sched, c, now)
		sl.next()
	}
	rt.scheduled.Store(int64(sched.len()))
	return buf
}

// Slices of a tick. A visit that sends a ping costs a write, and the
// pings of every connection set up in one second of a burst come due in
// the same tick, one ping interval later: hundreds of writes in one
// visit of the sweeper. No poller sharing the sweeper's P ran meanwhile,
// and every message that arrived waited for the tick (bench/box.sh, one
// process holding 9,000: docs/BENCHMARKS.md, "one process holding 9,000,
// the sweeper's slices", has the p99 of the active echoes without and
// with the slices, and HAProxy's in the same setup). After
// sweepSlice of visits the sweeper sleeps for sweepPause, which with
// nothing else runnable parks the P in the network poller: the pollers'
// events of the slice are served before the next one. The schedule is
// the sweeper's alone, and a run that marks a connection during the
// pause only has it visited again at the next tick.
const (
	sweepSlice = time.Millisecond
	sweepPause = 50 * time.Microsecond
)

// slicer is a tick's position in its current slice.
type slicer struct {
	ctx   context.Context
	clock func() int64
	start int64
}

// next is called after each visit: once the slice is used up it pauses
// (not past ctx) and starts the next one.
func (s *slicer) next() {
	if s.clock()-s.start < int64(sweepSlice) {
		return
	}
	t := time.NewTimer(sweepPause)
	select {
	case <-s.ctx.Done():
	case <-t.C:
	}
	t.Stop()
	s.start = s.clock()
}

// visit sweeps c at now and reschedules it at the time Sweep returns, no
// earlier than the next tick (so a tick ends); a closed connection, or
// one that needs nothing until it runs again, leaves the schedule.
func (rt *Runtime) visit(sched *schedule[*Conn], c *Conn, now int64) {
	if c.closed.Load() {
		sched.remove(c)
		return
	}
	next := rt.sweep(c, now)
	if next == 0 || c.closed.Load() {
		sched.remove(c)
		return
	}
	sched.set(c, max(next, now+1))
}

// sweep is one visit of c; a panic in it closes c alone (next: 0).
func (rt *Runtime) sweep(c *Conn, now int64) (next int64) {
	defer func() {
		if v := recover(); v != nil {
			c.h.Panicked(v)
			next = 0
		}
	}()
	return c.h.Sweep(now)
}
