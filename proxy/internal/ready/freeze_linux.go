package ready

import (
	"errors"

	"golang.org/x/sys/unix"
)

// Why Freeze refused.
var (
	// ErrBusy: a run is in progress, or bytes wait on a socket: try again.
	ErrBusy = errors.New("ready: connection busy")
	// ErrGone: the connection closed.
	ErrGone = errors.New("ready: connection closed")
	// ErrStuck: a socket failed, or the record layer did: it cannot move.
	ErrStuck = errors.New("ready: connection cannot move")
)

// Frozen is a connection held still, to be moved to another process: its
// runner state taken (no run in progress and none starts), the client's
// record state and both sockets locked (so a close from another
// goroutine, the sweeper or a timer, waits and then finds the descriptors
// gone), nothing queued on either socket. It ends in Thaw or Forget.
type Frozen struct {
	c         *Conn
	unwatched bool
}

// Freeze holds c still; see Frozen. ErrBusy means try again later.
func (c *Conn) Freeze() (*Frozen, error) {
	if !c.state.CompareAndSwap(runIdle, runBusy) {
		if c.closed.Load() {
			return nil, ErrGone
		}
		return nil, ErrBusy
	}
	// The record state before the sockets, as its writes take them.
	if c.rec != nil {
		c.rec.mu.Lock()
	}
	c.cs.mu.Lock()
	c.bs.mu.Lock()
	f := &Frozen{c: c}
	cs, bs := c.cs, c.bs
	var err error
	switch {
	case c.closed.Load() || cs.fd < 0 || bs.fd < 0:
		err = ErrGone
	case cs.werr != nil || bs.werr != nil || c.rec != nil && !c.rec.healthy():
		err = ErrStuck
	case len(cs.q) > 0 || len(bs.q) > 0 || cs.finPending || bs.finPending:
		err = ErrBusy
	}
	if err != nil {
		f.Thaw()
		return nil, err
	}
	return f, nil
}

// FDs are the client's and the backend's descriptors.
func (f *Frozen) FDs() (client, backend int) { return f.c.cs.sysfd(), f.c.bs.sysfd() }

// RecordState is the client's record state (record.State.MarshalBinary)
// and the start of a record already read; nil without edge's record layer.
func (f *Frozen) RecordState() (st, tail []byte, err error) {
	if f.c.rec == nil {
		return nil, nil, nil
	}
	return f.c.rec.state()
}

// Unwatch takes both sockets out of the poller's epoll set: a socket handed
// to another process keeps its file open there, and an epoll registration
// lives as long as the open file, not the descriptor (epoll(7), Q6).
func (f *Frozen) Unwatch() error {
	c := f.c
	f.unwatched = true
	if err := c.p.unwatch(c.cs.sysfd()); err != nil {
		return err
	}
	return c.p.unwatch(c.bs.sysfd())
}

// Thaw gives the connection back: re-watched when Unwatch ran (EEXIST for
// a socket never taken out is fine), both directions marked readable
// (bytes may have arrived meanwhile; the edge is not reported again), and
// one run, which does whatever was asked for meanwhile.
func (f *Frozen) Thaw() {
	c := f.c
	if f.unwatched && c.p != nil {
		id := c.id.Load()
		c.p.watch(c.cs.sysfd(), id)
		c.p.watch(c.bs.sysfd(), id|1)
	}
	c.c2bReady.Store(true)
	c.b2cReady.Store(true)
	f.unlock()
	c.Run()
}

// Forget drops a connection the other process took: both descriptors are
// closed without shutdown(2) or a write (close(2) of one duplicate leaves
// the connection to the other), its open-socket count is given back, and
// nobody runs it again.
func (f *Frozen) Forget() {
	c := f.c
	unix.Close(c.cs.sysfd())
	unix.Close(c.bs.sysfd())
	c.cs.fd, c.bs.fd = -1, -1
	c.closed.Store(true)
	if id := c.id.Load(); id != 0 {
		c.p.forget(id)
	}
	c.state.Store(runMoved)
	onClose := c.cs.onClose
	f.unlock()
	if onClose != nil {
		onClose()
	}
}

func (f *Frozen) unlock() {
	c := f.c
	c.bs.mu.Unlock()
	c.cs.mu.Unlock()
	if c.rec != nil {
		c.rec.mu.Unlock()
	}
}
