package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/proxy/internal/handoff"
	"github.com/edgelb/edge/proxy/internal/ready"
	"golang.org/x/sys/unix"
)

// Handoff moves every live WebSocket it can to the process at the other
// end of to (SCM_RIGHTS: both socket descriptors and a state record per
// connection, internal/handoff), and closes the others with close code
// 1012 (Service Restart, RFC 6455 §7.4.1 and the IANA registry) spread
// evenly over window, so reconnects come at a bounded rate. It returns
// when every connection has moved or closed, or ctx ends (then what is
// left is closed as Drain does at its deadline). New requests are refused
// from the start, like Drain's. to must be a SOCK_STREAM Unix socket; it
// is left open (closing it ends the peer's Adopt).
//
// The sender is handoff.Move with its default bounds (Server.testHandoff
// may change them): up to handoff.DefaultWindow messages are in flight at
// once, their answers read in order; a peer that answers each message as
// it reads it (Adopt, this release's and the previous ones') needs
// nothing else. Besides ctx, the hand-off is bounded by progress: a peer
// that answers nothing for handoff.DefaultStall ends it
// (handoff.ErrStalled), however many connections are left.
//
// A connection moves only while it is quiescent: plain or TLS 1.3 on
// edge's record layer (TLS 1.2 on crypto/tls cannot move), on the
// readiness-driven splice, its runner held, nothing
// queued on either socket, and not closing, lingering or half-closed.
// Once the peer acknowledged it, both descriptors here are closed without
// shutdown(2) or any write: the peer's duplicates keep the connection,
// and this process forgets it without an access line (Observer.ConnClosed
// with ReasonMoved). When the socket's deadline passes (ctx ended, or
// the stall) the answers already queued on it are still read and acted
// on; a connection then in flight unanswered may run in the peer
// already: it is given up here the same way, never resumed, so no
// connection runs in both processes, and so is one whose answer is no
// answer this release knows, with every one still in flight behind it.
// A refused one, and every one in flight when the socket fails otherwise
// (the peer holds a connection only once its answer is written, and what
// it wrote is read here first), stays here and gets a 1012.
func (s *Server) Handoff(ctx context.Context, to *net.UnixConn, window time.Duration) (moved, closed int, err error) {
	var o handoff.Options
	if h := s.testHandoff; h != nil {
		o = h.sender
	}
	return s.handOver(ctx, window, func(conns []*wsConn) (int, []*wsConn, error) {
		return handoff.Move(ctx, to, conns, o)
	})
}

// Freeze holds c still for Handoff's sender (handoff.Conn): the
// driver's judgement and hold (freeze), c's state record (encode), and
// both sockets out of this process's epoll set, since the peer's
// duplicates keep the open files.
func (c *wsConn) Freeze() (handoff.Item, []byte, handoff.Result) {
	f, res := c.d.freeze()
	if f == nil {
		return nil, nil, res
	}
	msg, err := f.encode()
	if err == nil {
		err = f.rf.Unwatch()
	}
	if err != nil {
		f.Thaw()
		return nil, nil, handoff.Never
	}
	return f, msg, handoff.Held
}

// frozen is a connection held still for a move (ready.Frozen): the
// sender's handoff.Item.
type frozen struct {
	r  *readyState
	rf *ready.Frozen
}

// freeze holds the connection still if it can move now (the goroutine
// splice never can).
func (*goDriver) freeze() (*frozen, handoff.Result) { return nil, handoff.Never }

// freeze holds the connection still if it can move now: plain or TLS 1.3
// on edge's record layer (its keys and sequence numbers travel in the
// record; TLS 1.2 on crypto/tls cannot move), no bytes left in a PROXY
// reader, the runtime's judgement (runner held, nothing queued, no
// failed socket) and the driver's: not closing, lingering or half-closed,
// no close scheduled.
func (r *readyState) freeze() (*frozen, handoff.Result) {
	c := r.c
	switch c.client.(type) {
	case *edgeConn, *ready.RecordConn:
	default:
		return nil, handoff.Never
	}
	if r.ec == nil || len(r.ec.pre) > 0 {
		return nil, handoff.Never
	}
	rf, err := r.rc.Freeze()
	switch {
	case errors.Is(err, ready.ErrBusy):
		return nil, handoff.Busy
	case errors.Is(err, ready.ErrGone):
		return nil, handoff.Gone
	case err != nil:
		return nil, handoff.Never
	}
	if r.leaving() {
		rf.Thaw()
		return nil, handoff.Never
	}
	if c.sess.MidMessage() {
		// A compressed client message under way whose counting inflater
		// is mid-stream (it does not move): the message ends soon or the
		// rounds run out and it gets a 1012.
		rf.Thaw()
		return nil, handoff.Busy
	}
	return &frozen{r: r, rf: rf}, handoff.Held
}

// leaving reports whether the connection is on its way out: finished,
// lingering, ending, half-closed, closing, or with a close scheduled.
func (r *readyState) leaving() bool {
	c := r.c
	if r.finished || r.lingering.Load() || r.ending || r.c2bDone || r.b2cDone || r.fin != nil || c.sess.Closing() {
		return true
	}
	c.s.reg.mu.Lock()
	defer c.s.reg.mu.Unlock()
	return c.timer != nil
}

// FDs are the client's and the backend's descriptors.
func (f *frozen) FDs() (client, backend int) { return f.rf.FDs() }

// Thaw gives the connection back: a run does whatever was asked for
// meanwhile.
func (f *frozen) Thaw() { f.rf.Thaw() }

// Forget drops a connection the peer took: its descriptors closed
// without a write, and it ends here as moved (wsConn.finish).
func (f *frozen) Forget() {
	f.r.finished = true
	f.rf.Forget()
	f.r.c.finish(true)
}

// Adopt receives connections from from until EOF or ctx ends and resumes
// splicing each one; it returns the count. A record it cannot read is
// refused (its descriptors closed, the sender told) and the next one is
// read. Each connection is counted against its pool (by name, with this
// process's settings), its backend (by ID and address: least-conns and
// max-conns stay right) and its client's limits, and writes its one
// access line here when it ends, with its original start time. A
// message read after the sender closed its end (it gave up what was in
// flight at its deadline, or died) is still adopted, its answer unsent.
// When the pool or backend is not here any more, or the pool now follows
// client frames the old process did not, the connection is still adopted
// and is sent a close 1012 at its next frame boundary.
func (s *Server) Adopt(ctx context.Context, from *net.UnixConn) (adopted int, err error) {
	stop := context.AfterFunc(ctx, func() { from.SetDeadline(aLongTimeAgo) })
	defer stop()
	// The runtime runs what is adopted (Run, started by the owner).
	select {
	case <-s.rt.Started():
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	var sh adoptShared
	var ackErr error // the first answer that could not be written
	for {
		m, err := handoff.Receive(from)
		if errors.Is(err, io.EOF) {
			return adopted, ackErr
		}
		if err != nil {
			if ctx.Err() != nil {
				return adopted, ctx.Err()
			}
			return adopted, err
		}
		fds := m.FDs
		c, why, perr := s.adoptPrepare(&m, &sh)
		if perr != nil {
			s.log.Warn("hand-off: connection refused", "err", perr)
			m.Close()
		}
		if ackErr == nil {
			ackErr = handoff.WriteAck(from, perr == nil)
		}
		if ackErr != nil && (ctx.Err() != nil || errors.Is(ackErr, os.ErrDeadlineExceeded)) {
			// This end stopped (ctx): the sender did not hear the
			// answer, sees the socket close and keeps the connection, so
			// ours closes without a write.
			if c != nil {
				for _, fd := range fds {
					unix.Close(fd)
				}
			}
			return adopted, ackErr
		}
		// Any other answer that cannot be written means the sender's end
		// is closed: it gave up everything still in flight as moved (its
		// deadline, in handoff.Move) or it died, and either way this
		// process holds the only descriptors left. So the connection is
		// kept, and so is every message still queued behind it, until
		// EOF: closing them would end each with neither a 1012 nor a
		// process to run it.
		if c != nil {
			s.adoptStart(c, why)
			adopted++
		}
	}
}

// adoptShared is what the connections one Adopt takes share rather than
// each holding its own: the listener options of each name and the
// stand-ins of a pool or backend that is not here any more. Without it a
// hand-off of 10,000 connections whose pool was renamed compiled 10,000
// pools and as many balance pools, and every adopted connection kept
// options of its own. The maps hold one entry per name a record carries
// (the old process's listeners, pools and backends); past adoptSharedMax
// entries a map is not grown (a broken sender's names), and such a
// connection gets its own, as before.
type adoptShared struct {
	listeners map[string]*ListenerOptions
	pools     map[string]*pool
	backends  map[standInKey]*balance.Backend
}

// standInKey names a stand-in backend.
type standInKey struct{ pool, id, addr string }

// adoptSharedMax bounds each map of adoptShared.
const adoptSharedMax = 1024

// listener is the shared ListenerOptions named name (only the name: an
// adopted connection's listener is the old process's, and only its access
// line names it).
func (sh *adoptShared) listener(name string) *ListenerOptions {
	if lo := sh.listeners[name]; lo != nil {
		return lo
	}
	lo := &ListenerOptions{Name: name}
	if len(sh.listeners) < adoptSharedMax {
		if sh.listeners == nil {
			sh.listeners = map[string]*ListenerOptions{}
		}
		sh.listeners[name] = lo
	}
	return lo
}

// adoptPrepare builds the connection of one message; nothing is counted
// yet. why, when not empty, is the reason of the 1012 it gets at once.
func (s *Server) adoptPrepare(m *handoff.Message, sh *adoptShared) (*readyState, CloseReason, error) {
	if len(m.FDs) != handoff.FDs {
		return nil, "", fmt.Errorf("%d descriptors, want %d", len(m.FDs), handoff.FDs)
	}
	st, err := handoff.Decode(m.Bytes)
	if err != nil {
		return nil, "", err
	}
	rs, err := recordStateOf(st)
	if err != nil {
		return nil, "", err
	}
	if err := streamSockets(m.FDs); err != nil {
		return nil, "", err
	}
	pool, be, why := s.adoptTarget(st, sh)
	if be == nil {
		return nil, "", fmt.Errorf("pool %q: no stand-in for backend %q", st.Pool, st.BackendID)
	}
	c, restart, err := s.resumed(st, sh.listener(st.Listener), pool, be)
	if err != nil {
		return nil, "", err
	}
	if restart {
		why = ReasonRestart
	}
	r := newReadyState(c, m.FDs[0], m.FDs[1])
	ec := &edgeConn{}
	ec.keepRemote(peerOf(m.FDs[0]))
	ec.own(r.cs)
	c.client = ec
	r.ec = ec
	if rs != nil {
		rc := ready.NewRecordConn(r.cs, rs, st.TLS13.Pending, ec, &s.bufs)
		c.client = rc
		r.rc.SetRecord(rc)
	}
	m.FDs = nil
	return r, why, nil
}

// streamSockets checks that every descriptor received is a stream socket
// and makes it non-blocking, as the readiness runtime needs.
func streamSockets(fds []int) error {
	for _, fd := range fds {
		if t, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || t != unix.SOCK_STREAM {
			return fmt.Errorf("descriptor %d is no stream socket", fd)
		}
		if err := unix.SetNonblock(fd, true); err != nil {
			return fmt.Errorf("descriptor %d: %w", fd, err)
		}
	}
	return nil
}

// adoptTarget finds the pool and backend a record names. A pool or a
// backend (same ID and address) no longer here gets a stand-in that only
// counts, and ReasonBackendGone: the connection is closed 1012 like one
// whose backend left its pool. The stand-ins are shared among the
// connections of one Adopt (adoptShared).
func (s *Server) adoptTarget(st *handoff.State, sh *adoptShared) (*pool, *balance.Backend, CloseReason) {
	var p *pool
	for _, q := range s.routes.Load().pools {
		if q.name == st.Pool {
			p = q
			break
		}
	}
	if p != nil {
		if b := p.balancer.Snapshot().ByID(st.BackendID); b != nil && b.Addr() == st.BackendAddr {
			return p, b, ""
		}
	} else {
		p = sh.standIn(s, st.Pool)
	}
	key := standInKey{st.Pool, st.BackendID, st.BackendAddr}
	if b := sh.backends[key]; b != nil {
		return p, b, ReasonBackendGone
	}
	bp, err := balance.NewPool(balance.PoolOptions{Name: st.Pool})
	if err != nil || bp.Update([]balance.Member{{ID: st.BackendID, Addr: st.BackendAddr}}) != nil {
		return p, nil, ReasonBackendGone
	}
	b := bp.Snapshot().ByID(st.BackendID)
	if len(sh.backends) < adoptSharedMax {
		if sh.backends == nil {
			sh.backends = map[standInKey]*balance.Backend{}
		}
		sh.backends[key] = b
	}
	return p, b, ReasonBackendGone
}

// standIn is the shared stand-in of the pool named name (Server.standIn).
func (sh *adoptShared) standIn(s *Server, name string) *pool {
	if p := sh.pools[name]; p != nil {
		return p
	}
	p := s.standIn(name)
	if len(sh.pools) < adoptSharedMax {
		if sh.pools == nil {
			sh.pools = map[string]*pool{}
		}
		sh.pools[name] = p
	}
	return p
}

// adoptStart counts an adopted connection and resumes its splice: both
// directions run once at once, since bytes that arrived during the move
// raise no new edge in this process's epoll.
func (s *Server) adoptStart(r *readyState, why CloseReason) {
	c, x := r.c, r.c.x
	c.be.Acquire()
	x.admit(true)
	// Counted against its subject, never refused (it is live): finish
	// gives the count back as for any connection.
	s.holdAdopted(c)
	s.obs.ConnOpened(x.routeName(), c.be.ID())
	if !s.rt.Running() || !s.reg.add(c) {
		c.closeBoth(ReasonShutdown)
		r.finishReady()
		return
	}
	s.noteTimeouts(c.pool)
	if why != "" {
		c.sess.Request(CloseServiceRestart, why)
	}
	r.register()
}

// peerOf is the peer address of a socket, for logs.
func peerOf(fd int) net.Addr {
	switch sa, _ := unix.Getpeername(fd); v := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(v.Addr[:]).To16(), Port: v.Port}
	case *unix.SockaddrInet6:
		return &net.TCPAddr{IP: net.IP(v.Addr[:]), Port: v.Port}
	}
	return &net.TCPAddr{}
}
