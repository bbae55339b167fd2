package ready

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/testkit"
	"golang.org/x/sys/unix"
)

// sweepHandler is a connection's driver for the sweeper's tests: it
// counts runs and visits, and says when it is next due (next, on the
// sweeper's goroutine).
type sweepHandler struct {
	c      *Conn
	next   func(h *sweepHandler, now int64) int64
	onStep func(h *sweepHandler)

	steps, visits, panics atomic.Int64
	lastVisit             atomic.Int64 // the now of the last visit
}

func (h *sweepHandler) Step() {
	h.steps.Add(1)
	if h.onStep != nil {
		h.onStep(h)
	}
}

func (h *sweepHandler) Sweep(now int64) int64 {
	h.visits.Add(1)
	h.lastVisit.Store(now)
	return h.next(h, now)
}

func (h *sweepHandler) Panicked(any) {
	h.panics.Add(1)
	h.c.Close()
}

// tickLog follows the sweeper's ticks (Runtime.ticked).
type tickLog struct {
	mu   sync.Mutex
	nows []int64
	ch   chan struct{}
}

func (l *tickLog) tick(now int64) {
	l.mu.Lock()
	l.nows = append(l.nows, now)
	l.mu.Unlock()
	select {
	case l.ch <- struct{}{}:
	default:
	}
}

func (l *tickLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.nows)
}

// wait returns once k ticks have begun and ended after the call.
func (l *tickLog) wait(t *testing.T, k int) {
	t.Helper()
	target := l.count() + k + 1 // the tick under way may have begun before
	for l.count() < target {
		select {
		case <-l.ch:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d ticks in 30 s, waiting for %d", l.count(), target)
		}
	}
}

// firstAtOrAfter is the now of the first tick at or after at; 0: none yet.
func (l *tickLog) firstAtOrAfter(at int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range l.nows {
		if n >= at {
			return n
		}
	}
	return 0
}

// sweepRuntime runs a Runtime ticking at its shortest period, its ticks
// logged.
func sweepRuntime(t *testing.T) (*Runtime, *tickLog) {
	t.Helper()
	return sweepRuntimeWith(t, New(Options{}))
}

// sweepRuntimeWith runs rt (its test hooks set) as sweepRuntime does.
func sweepRuntimeWith(t *testing.T, rt *Runtime) (*Runtime, *tickLog) {
	t.Helper()
	log := &tickLog{ch: make(chan struct{}, 1)}
	rt.ticked = log.tick
	rt.NoteTimeout(minSweep)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	<-rt.Started()
	if !rt.Running() {
		t.Skip("no epoll here")
	}
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return rt, log
}

// sweepConn adds a connection driven by h over two socket pairs, run once
// as the proxy's register does; it returns the client's peer descriptor.
func sweepConn(t *testing.T, rt *Runtime, h *sweepHandler) int {
	t.Helper()
	own, peers := socketPairs(t)
	h.c = NewConn(h, own[0], own[1])
	socks := [2]*Sock{h.c.Sock(Client), h.c.Sock(Backend)}
	if err := rt.Add(h.c); err != nil {
		t.Fatal(err)
	}
	h.c.Run()
	t.Cleanup(func() {
		if h.c.Close() {
			socks[0].Close()
			socks[1].Close()
		}
		unix.Close(peers[0])
		unix.Close(peers[1])
	})
	return peers[0]
}

// TestSweepSkipsIdleConn: a connection with nothing due for an hour is
// visited when it is added and after each of its runs, not at every tick.
func TestSweepSkipsIdleConn(t *testing.T) {
	rt, log := sweepRuntime(t)
	h := &sweepHandler{next: func(_ *sweepHandler, now int64) int64 { return now + int64(time.Hour) }}
	sweepConn(t, rt, h)
	log.wait(t, 20)
	// Each visit follows the Add or a run (the sockets' first writability
	// is one or two): never more than one a run, whatever the ticks.
	if v, s := h.visits.Load(), h.steps.Load(); v < 1 || v > s+1 {
		t.Fatalf("%d visits for %d runs in 20 ticks, want 1 to %d", v, s, s+1)
	}
	if n := rt.scheduled.Load(); n != 1 {
		t.Fatalf("%d connections scheduled, want 1", n)
	}
}

// TestSweepVisitsWhenDue: a connection due at a time is visited at the
// first tick at or after it.
func TestSweepVisitsWhenDue(t *testing.T) {
	rt, log := sweepRuntime(t)
	var dueAt, hitAt atomic.Int64
	h := &sweepHandler{next: func(_ *sweepHandler, now int64) int64 {
		if dueAt.Load() == 0 {
			dueAt.Store(now + int64(5*minSweep))
		}
		if now >= dueAt.Load() {
			hitAt.CompareAndSwap(0, now)
			return 0
		}
		return dueAt.Load()
	}}
	sweepConn(t, rt, h)
	testkit.WaitFor(t, "the visit at the connection's time", func() bool { return hitAt.Load() != 0 })
	if first := log.firstAtOrAfter(dueAt.Load()); hitAt.Load() != first {
		t.Fatalf("visited at %d, want the first tick at or after %d: %d", hitAt.Load(), dueAt.Load(), first)
	}
}

// TestSweepHonoursDeadlineFromRun: a run that creates a deadline (a
// queued write's write timeout, the rest after a message) has the
// connection visited by then, though it needed nothing before.
func TestSweepHonoursDeadlineFromRun(t *testing.T) {
	rt, log := sweepRuntime(t)
	var armed, deadline, hitAt atomic.Int64
	h := &sweepHandler{
		onStep: func(*sweepHandler) {
			if at := armed.Swap(0); at != 0 {
				deadline.Store(at)
			}
		},
		next: func(_ *sweepHandler, now int64) int64 {
			at := deadline.Load()
			if at != 0 && now >= at {
				hitAt.CompareAndSwap(0, now)
				return 0
			}
			return at
		},
	}
	peer := sweepConn(t, rt, h)
	log.wait(t, 3)
	if n := rt.scheduled.Load(); n != 0 {
		t.Fatalf("%d connections scheduled with nothing due, want 0", n)
	}
	armed.Store(time.Now().UnixNano() + int64(3*minSweep))
	if _, err := unix.Write(peer, []byte{1}); err != nil { // a readiness event: a run
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the visit at the deadline the run set", func() bool { return hitAt.Load() != 0 })
	if at := deadline.Load(); hitAt.Load() < at {
		t.Fatalf("visited at %d, before the deadline %d", hitAt.Load(), at)
	}
}

// TestSweepPanicClosesOne: a visit that panics closes that connection
// alone; it leaves the schedule, and the others are still visited when
// due.
func TestSweepPanicClosesOne(t *testing.T) {
	rt, log := sweepRuntime(t)
	bad := &sweepHandler{next: func(*sweepHandler, int64) int64 { panic("sweep") }}
	good := &sweepHandler{next: func(_ *sweepHandler, now int64) int64 { return now + int64(2*minSweep) }}
	sweepConn(t, rt, bad)
	sweepConn(t, rt, good)
	testkit.WaitFor(t, "the panicking connection to close", func() bool { return bad.c.Closed() })
	log.wait(t, 2)
	v := good.visits.Load()
	log.wait(t, 10)
	if good.visits.Load() <= v {
		t.Fatal("the other connection was not visited after the panic")
	}
	if n, p := bad.visits.Load(), bad.panics.Load(); n != 1 || p != 1 {
		t.Fatalf("panicking connection: %d visits, %d panics; want 1, 1", n, p)
	}
	if n := rt.scheduled.Load(); n != 1 {
		t.Fatalf("%d connections scheduled, want 1", n)
	}
}

// TestSweepDropsClosed: a closed connection leaves the schedule at the
// next tick, though it was due only in an hour (it would hold its memory
// until then), and is never visited again.
func TestSweepDropsClosed(t *testing.T) {
	rt, log := sweepRuntime(t)
	h := &sweepHandler{next: func(_ *sweepHandler, now int64) int64 { return now + int64(time.Hour) }}
	sweepConn(t, rt, h)
	testkit.WaitFor(t, "a first visit", func() bool { return h.visits.Load() > 0 })
	h.c.Close()
	log.wait(t, 1)
	v := h.visits.Load()
	log.wait(t, 5)
	if h.visits.Load() != v {
		t.Fatalf("visited %d times after its close", h.visits.Load()-v)
	}
	if n := rt.scheduled.Load(); n != 0 {
		t.Fatalf("%d connections scheduled, want 0", n)
	}
}

// TestSweepGivesWayInLongTick: a tick with more due than one slice lets
// the pollers run the connections that became ready during it (a message
// does not wait behind a burst of pings), and still visits every due
// connection in that tick. One P, as each box process has, and a clock
// on which every visit uses up a slice: without the pauses the tick ends
// before the poller runs again.
func TestSweepGivesWayInLongTick(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	rt := New(Options{})
	var fake atomic.Int64
	rt.clock = func() int64 { return fake.Add(int64(sweepSlice)) }
	rt, log := sweepRuntimeWith(t, rt)

	ready := &sweepHandler{next: func(*sweepHandler, int64) int64 { return 0 }}
	peer := sweepConn(t, rt, ready)
	testkit.WaitFor(t, "the ready connection's first visit", func() bool { return ready.visits.Load() > 0 })

	// Each due connection is due at every tick. In the tick after armed,
	// the first of them visited makes the ready connection readable and
	// the last reports whether it ran meanwhile.
	const due = 20
	var armed atomic.Bool
	var inTick, base atomic.Int64
	ranInTick := make(chan bool, 1)
	hs := make([]*sweepHandler, due)
	for i := range hs {
		hs[i] = &sweepHandler{next: func(_ *sweepHandler, now int64) int64 {
			if armed.CompareAndSwap(true, false) {
				base.Store(ready.steps.Load())
				inTick.Store(1)
				if _, err := unix.Write(peer, []byte{1}); err != nil {
					t.Error(err)
				}
			} else if inTick.Load() != 0 && inTick.Add(1) == due {
				ranInTick <- ready.steps.Load() > base.Load()
				inTick.Store(0)
			}
			return now + 1
		}}
	}
	for _, h := range hs {
		sweepConn(t, rt, h)
	}
	log.wait(t, 2)
	v := make([]int64, due)
	for i, h := range hs {
		v[i] = h.visits.Load()
	}
	armed.Store(true)
	select {
	case ran := <-ranInTick:
		if !ran {
			t.Fatal("the connection made ready in a long tick did not run before the tick ended")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no tick in 30 s")
	}
	log.wait(t, 1)
	for i, h := range hs {
		if h.visits.Load() <= v[i] {
			t.Fatalf("due connection %d was not visited in the long tick", i)
		}
	}
}

// socketPairs makes two non-blocking stream socket pairs, one for each
// side of a Conn: own are the ends a Conn takes, peer the other ends,
// which the caller closes.
func socketPairs(t *testing.T) (own, peer [2]int) {
	t.Helper()
	for i := range own {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		own[i], peer[i] = fds[0], fds[1]
	}
	return own, peer
}
