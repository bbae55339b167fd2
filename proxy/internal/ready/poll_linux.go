package ready

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Sweep periods of the idle and write-timeout sweeper.
const (
	maxSweep = time.Second
	minSweep = 10 * time.Millisecond
)

// PumpBudget bounds the bytes one direction moves per run, so that one
// busy connection cannot hold the poller goroutine from the others: past
// it the driver yields (Conn.Yield) and the connection is run again after
// the current batch of events.
const PumpBudget = 1 << 20

// poller is the Server's epoll instance and the goroutine blocked in
// epoll_wait. Events carry a connection id (low bit: backend side) rather
// than a descriptor number. An id is a slot of the poller's table and
// the registration's number (see add): a slot is reused, an id not for
// 2^32 registrations, so an event that raced with a close finds no
// connection, or one with another id, and is dropped.
type poller struct {
	epfd int
	wake int // eventfd; its id is 0
	// file holds epfd inside Go's own poller: run parks there while no
	// event is ready instead of blocking a thread in epoll_wait. A thread
	// blocked in a plain syscall keeps its P until sysmon takes it back
	// (up to 10 ms when the process is otherwise idle), which with
	// GOMAXPROCS=1 stalls every handshake and accept meanwhile.
	file *os.File
	rc   syscall.RawConn

	// conns is the table of registered connections by slot, free its
	// slots to reuse: about 12 bytes a connection, where a map keyed by
	// id took about 32.
	mu    sync.RWMutex
	conns []*Conn
	free  []uint32
	next  uint32

	// Connections that used up their budget (fairness, see pumpBudget)
	// and still have bytes: run again after the current batch of events.
	pendMu   sync.Mutex
	pend     []*Conn
	stopping atomic.Bool

	// Connections the sweeper visits at its next tick (Conn.ran, Add,
	// forget): one list per poller, so marking one costs an atomic load
	// when it is marked already and this poller's lock otherwise, never
	// a lock shared by every poller.
	dirtyMu sync.Mutex
	dirty   []*Conn

	done chan struct{} // closed when run returns
}

func newPoller() (*poller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, os.NewSyscallError("eventfd", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN} // level-triggered: read in run
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &ev); err != nil {
		unix.Close(wake)
		unix.Close(epfd)
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(wake)
		unix.Close(epfd)
		return nil, os.NewSyscallError("setnonblock", err)
	}
	f := os.NewFile(uintptr(epfd), "epoll")
	rc, err := f.SyscallConn()
	if err != nil {
		unix.Close(wake)
		f.Close()
		return nil, fmt.Errorf("epoll descriptor: %w", err)
	}
	return &poller{epfd: epfd, wake: wake, file: f, rc: rc, done: make(chan struct{})}, nil
}

// add gives c an id, which the caller stores in c.id before its sockets
// are watched; its client socket is watched as id, its backend as id|1.
// The low word is 2*(slot+1), never 0 (the eventfd's id), the high word
// the registration's number.
func (p *poller) add(c *Conn) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var slot uint32
	if n := len(p.free); n > 0 {
		slot = p.free[n-1]
		p.free = p.free[:n-1]
	} else {
		slot = uint32(len(p.conns))
		p.conns = append(p.conns, nil)
	}
	p.conns[slot] = c
	p.next++
	return uint64(p.next)<<32 | uint64(slot+1)<<1
}

// lookup returns the connection of id (either side's), nil if it is
// gone. The lock is held.
func (p *poller) lookup(id uint64) *Conn {
	slot := uint32(id)>>1 - 1
	if slot >= uint32(len(p.conns)) {
		return nil
	}
	if c := p.conns[slot]; c != nil && c.id.Load() == id&^1 {
		return c
	}
	return nil
}

// forget takes the connection of id out of p; the sweeper drops it from
// its schedule at the next tick. An id forgotten already changes nothing.
func (p *poller) forget(id uint64) {
	p.mu.Lock()
	c := p.lookup(id)
	if c != nil {
		slot := uint32(id)>>1 - 1
		p.conns[slot] = nil
		p.free = append(p.free, slot)
	}
	p.mu.Unlock()
	if c != nil {
		p.markDirty(c)
	}
}

// markDirty has the sweeper visit c at its next tick, once however often
// it is asked before then.
func (p *poller) markDirty(c *Conn) {
	if c.dirty.Load() || !c.dirty.CompareAndSwap(false, true) {
		return
	}
	p.dirtyMu.Lock()
	p.dirty = append(p.dirty, c)
	p.dirtyMu.Unlock()
}

// takeDirty appends the connections marked since the last call to buf.
// The sweeper clears each one's mark before it visits it, so a run during
// the visit marks it again.
func (p *poller) takeDirty(buf []*Conn) []*Conn {
	p.dirtyMu.Lock()
	buf = append(buf, p.dirty...)
	clear(p.dirty)
	if cap(p.dirty) > 1024 && len(p.dirty) < cap(p.dirty)/4 {
		p.dirty = nil // a burst is over: give its array back
	} else {
		p.dirty = p.dirty[:0]
	}
	p.dirtyMu.Unlock()
	return buf
}

// watch registers fd edge-triggered: one event per change, drained by the
// runner until the socket would block.
func (p *poller) watch(fd int, id uint64) error {
	ev := unix.EpollEvent{
		Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET,
		Fd:     int32(uint32(id)),
		Pad:    int32(uint32(id >> 32)),
	}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("epoll_ctl add fd %d: %w", fd, err)
	}
	return nil
}

// unwatch removes fd from p's epoll set. A socket handed to another
// process needs it: its file stays open there, and an epoll registration
// lives as long as the open file, not the descriptor (epoll(7), Q6).
func (p *poller) unwatch(fd int) error {
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, fd, nil); err != nil {
		return fmt.Errorf("epoll_ctl del fd %d: %w", fd, err)
	}
	return nil
}

// run waits for events and runs the connections they concern inline: all
// socket work is non-blocking, so a batch costs only the work it carries.
func (p *poller) run(log *slog.Logger) {
	defer close(p.done)
	evs := make([]unix.EpollEvent, 128)
	var pend []*Conn
	// Collect ready events without blocking; when there are none, park in
	// Go's poller until the epoll descriptor becomes readable. The callback
	// looks before it waits, so no event is missed. It and what it sets are
	// made once, not on every wake-up (four allocations each).
	var n int
	var err error
	yielded := false
	poll := func(uintptr) bool {
		for {
			n, err = rawEpollPoll(p.epfd, evs)
			if err == unix.EINTR {
				continue
			}
			if err != nil || n > 0 || yielded {
				return err != nil || n > 0
			}
			// Under load the next event is usually microseconds away:
			// let other goroutines run once and look again before paying
			// for a park and a netpoll wake-up.
			yielded = true
			runtime.Gosched()
		}
	}
	for {
		n, err, yielded = 0, nil, false
		rerr := p.rc.Read(poll)
		if err == nil {
			err = rerr
		}
		if err != nil {
			// Only a closed epoll descriptor gets here, and Close stops
			// the poller after every connection ended.
			log.Error("epoll_wait failed; readiness splice stopped", "err", err)
			return
		}
		for i := range evs[:n] {
			id := uint64(uint32(evs[i].Fd)) | uint64(uint32(evs[i].Pad))<<32
			if id == 0 {
				var b [8]byte
				unix.Read(p.wake, b[:])
				if p.stopping.Load() {
					return
				}
				continue
			}
			p.mu.RLock()
			c := p.lookup(id)
			p.mu.RUnlock()
			if c != nil {
				c.event(id&1 == 1, evs[i].Events)
			}
		}
		p.pendMu.Lock()
		pend, p.pend = p.pend, pend[:0]
		p.pendMu.Unlock()
		for i, c := range pend {
			c.Kick()
			pend[i] = nil
		}
	}
}

// again runs c once more after the current batch of events.
func (p *poller) again(c *Conn) {
	p.pendMu.Lock()
	first := len(p.pend) == 0
	p.pend = append(p.pend, c)
	p.pendMu.Unlock()
	if first {
		p.signal()
	}
}

// signal wakes run (the eventfd's id is 0).
func (p *poller) signal() {
	one := [8]byte{1}
	unix.Write(p.wake, one[:])
}

// stop ends run and releases the descriptors.
func (p *poller) stop() {
	p.stopping.Store(true)
	p.signal()
	<-p.done
	unix.Close(p.wake)
	p.file.Close()
}
