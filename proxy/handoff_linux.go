package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/proxy/internal/handoff"
	"github.com/edgelb/edge/proxy/internal/ready"
	"github.com/edgelb/edge/proxy/internal/wsession"
	"github.com/edgelb/edge/tls/record"
	"golang.org/x/sys/unix"
)

// How long Handoff keeps retrying connections that were busy or had bytes
// queued, and the pause between two rounds: a queue drains as fast as its
// peer reads, and one that does not within the bound gets a 1012 instead.
// The bound is time, not a count of rounds: on a loaded host a run or a
// queue lasts longer than a few milliseconds, and a fixed count closed
// live connections that would have moved a moment later.
const (
	moveRetryFor  = 2 * time.Second
	moveRetryWait = 5 * time.Millisecond
)

// How many messages Handoff keeps in flight (sent, their answers not read
// yet), and how many of their bytes. One at a time, a hand-off costs a
// round trip per connection, and on a loaded host a round trip is the
// other process's scheduling delay: milliseconds, so 9,000 connections
// took 42 to 71 s. With a window the round trips overlap, and the cost is
// the two processes' own work per connection. The window stays well
// within what the kernel holds without blocking either end: each message
// carries 2 descriptors, and the kernel refuses SCM_RIGHTS (ETOOMANYREFS)
// once a user's descriptors in flight, all its processes together, pass
// its RLIMIT_NOFILE (unix(7)): 12 processes handing off at once hold
// 1,536 at most. The messages in flight are charged to this end's send
// buffer and the peer's one-byte answers (about 768 bytes of kernel
// memory each) to the peer's until read here; net.core.wmem_default,
// 208 KiB on most systems, takes 64 of either with room to spare, so
// neither end blocks on a full buffer while the other waits for it.
const (
	handoffWindow      = 64
	handoffWindowBytes = 64 << 10
)

// handoffStall is how long Handoff waits for the peer's next answer
// while messages are in flight (from the last answer, or from a message
// sent when none was): the bound is progress, not the count, so a
// hand-off of many connections to a slow peer goes on as long as the
// peer keeps taking them. Adopt answers within microseconds of reading a
// message; a peer silent this long is stopped, starved or deadlocked,
// and the hand-off ends as when its context ends (errHandoffStalled).
const handoffStall = 10 * time.Second

// errHandoffStalled is the error of a hand-off whose peer stopped
// answering (handoffStall).
var errHandoffStalled = errors.New("handoff: the peer stopped answering")

// moveResult is what one attempt to move a connection came to.
type moveResult int

const (
	moveDone   moveResult = iota // held still, ready to move
	moveSent                     // in flight: its answer decides
	moveRetry                    // busy or queued: try again next round
	moveNever                    // cannot move: it gets a 1012
	moveGone                     // ended meanwhile
	moveBroken                   // the socket to the peer failed: nothing more moves
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
// Up to handoffWindow messages are in flight at once, their answers read
// in order; a peer that answers each message as it reads it (Adopt, this
// release's and the previous ones') needs nothing else. Besides ctx, the
// hand-off is bounded by progress: a peer that answers nothing for
// handoffStall ends it (errHandoffStalled), however many connections are
// left.
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
	s.draining.Store(true)
	s.reg.mu.Lock()
	s.reg.draining, s.reg.window = true, window
	s.reg.code, s.reg.why = CloseServiceRestart, ReasonRestart
	s.reg.mu.Unlock()
	m := &mover{ctx: ctx, to: to, clock: handoffClock{to: to, stall: handoffStall}}
	if s.testHandoffStall > 0 {
		m.clock.stall = s.testHandoffStall
	}
	stop := context.AfterFunc(ctx, m.clock.end)
	defer func() {
		stop()
		m.clock.finish()
	}()
	retryFor := moveRetryFor
	if s.testMoveRetryFor > 0 {
		retryFor = s.testMoveRetryFor
	}
	left := m.run(s.reg.appendAll(nil), retryFor)
	closed = s.restartClose(left, window)
	if s.reg.wait(ctx) != nil {
		for _, c := range s.reg.appendAll(nil) {
			c.closeBoth(ReasonShutdown)
		}
		s.reg.wait(context.Background())
	}
	return m.moved, closed, m.err
}

// mover is one Handoff's pipeline: the messages in flight, oldest first,
// and what became of the connections.
type mover struct {
	ctx    context.Context
	to     *net.UnixConn
	clock  handoffClock
	q      []*frozen // sent, not answered yet, oldest first
	qBytes int       // their messages' bytes
	moved  int
	left   []*wsConn // refused, or thawed when the socket failed: 1012
	err    error     // the socket failed or stalled: nothing more is sent
	acks   [handoffWindow]byte
}

// run moves pending in rounds: connections that were busy or had bytes
// queued are tried again every moveRetryWait for retryFor. It returns
// the connections that get a 1012.
func (m *mover) run(pending []*wsConn, retryFor time.Duration) []*wsConn {
	until := time.Now().Add(retryFor)
	for round := 0; len(pending) > 0 && (round == 0 || time.Now().Before(until)) && m.ctx.Err() == nil; round++ {
		if round > 0 {
			time.Sleep(moveRetryWait)
		}
		var again []*wsConn
		for i, c := range pending {
			if m.err != nil {
				m.left = append(m.left, pending[i:]...)
				break
			}
			switch m.move(c) {
			case moveRetry:
				again = append(again, c)
			case moveNever, moveBroken:
				m.left = append(m.left, c)
			}
		}
		// Every answer before the pause: what moved is forgotten now.
		m.collect(len(m.q))
		pending = again
	}
	return append(m.left, pending...)
}

// move tries to move c once: freeze, encode, send; its answer comes
// later (collect). The window is made room in first.
func (m *mover) move(c *wsConn) moveResult {
	if len(m.q) >= handoffWindow || m.qBytes >= handoffWindowBytes {
		m.collect(1)
		if m.err != nil {
			return moveBroken
		}
	}
	f, res := c.d.freeze()
	if f == nil {
		return res
	}
	msg, err := f.encode()
	if err != nil {
		f.thaw()
		return moveNever
	}
	// Out of this process's epoll first: the peer's duplicates keep the
	// files open.
	if f.rf.Unwatch() != nil {
		f.thaw()
		return moveNever
	}
	return m.send(f, msg)
}

// send puts f's message in flight.
func (m *mover) send(f *frozen, msg []byte) moveResult {
	if len(m.q) == 0 {
		// The stall counts from the oldest message not answered.
		m.clock.progress()
	}
	cfd, bfd := f.rf.FDs()
	err := handoff.Send(m.to, msg, cfd, bfd)
	if errors.Is(err, unix.ETOOMANYREFS) && len(m.q) > 0 {
		// This user's descriptors in flight passed RLIMIT_NOFILE (other
		// processes hand off too): they leave the kernel's count as the
		// peer reads them. Nothing of this message was sent.
		if m.collect(len(m.q)); m.err != nil {
			f.thaw()
			return moveBroken
		}
		m.clock.progress()
		err = handoff.Send(m.to, msg, cfd, bfd)
	}
	switch {
	case errors.Is(err, unix.ETOOMANYREFS):
		f.thaw()
		return moveRetry
	case err != nil:
		// Not sent, or only a part the peer cannot complete (and so
		// never answers): it stays here. The answers to what went
		// before it are still read: the kernel returns the bytes queued
		// before an error or the end.
		f.thaw()
		m.setErr(err)
		m.collect(len(m.q))
		return moveBroken
	}
	f.size = len(msg)
	m.q = append(m.q, f)
	m.qBytes += f.size
	return moveSent
}

// collect reads answers until need more came (or none is in flight),
// taking in each read as many as have come (never more than are in
// flight, so never a byte the peer did not answer with), and acts on
// each (answer). A socket that fails first settles everything still in
// flight (fail); at its deadline the answers already queued are acted on
// first (answerQueued). An answer this release does not know (another
// release's peer) leaves unknown whether the peer holds that connection,
// and the peer, alive, may adopt every one still in flight: the answers
// read with it are still acted on, and it and the rest are given up as
// at a deadline.
func (m *mover) collect(need int) {
	for need > 0 && len(m.q) > 0 {
		n, err := m.to.Read(m.acks[:len(m.q)])
		if n > 0 {
			m.clock.progress()
		}
		need -= n
		unknown := m.answer(m.acks[:n])
		switch {
		case unknown != nil:
			m.fail(unknown, true)
			return
		case errors.Is(err, os.ErrDeadlineExceeded):
			m.answerQueued()
			m.fail(fmt.Errorf("handoff: ack: %w", err), true)
			return
		case err != nil:
			m.fail(fmt.Errorf("handoff: ack: %w", err), false)
			return
		}
	}
}

// answer acts on acks, the answers to the oldest messages in flight, one
// each: forgotten when adopted, thawed (and left to a 1012) when
// refused. An answer it does not know is given up as adopted (the peer
// may run it) and returned as the error.
func (m *mover) answer(acks []byte) (unknown error) {
	for _, b := range acks {
		f := m.q[0]
		m.q, m.qBytes = m.q[1:], m.qBytes-f.size
		switch {
		case b == handoff.AckAdopted:
			f.forget()
			m.moved++
		case b == handoff.AckRefused:
			f.thaw()
			m.left = append(m.left, f.r.c)
		default:
			if unknown == nil {
				unknown = fmt.Errorf("handoff: ack byte %#x", b)
			}
			f.forget()
			m.moved++
		}
	}
	return unknown
}

// answerQueued acts on the answers already queued on the socket once its
// deadline passed, without waiting for more. Go's Read returns
// os.ErrDeadlineExceeded then without reading, however many answers
// wait: given up as moved, a refused connection would be closed here
// without a write while the peer closed its duplicates, and its client
// would lose it without the 1012 (RFC 6455 §7.4.1) a refused one gets.
// So the bytes are read past the deadline (Control does not check it)
// with MSG_DONTWAIT, never more than are in flight. After an answer it
// does not know, nothing more is read: what follows may not be answers.
func (m *mover) answerQueued() {
	rc, err := m.to.SyscallConn()
	if err != nil {
		return
	}
	for len(m.q) > 0 {
		n, rerr := 0, error(nil)
		err := rc.Control(func(fd uintptr) {
			n, _, rerr = unix.Recvfrom(int(fd), m.acks[:len(m.q)], unix.MSG_DONTWAIT)
		})
		if err != nil || rerr != nil || n <= 0 || m.answer(m.acks[:n]) != nil {
			return
		}
	}
}

// fail ends the hand-off on err and settles every message in flight
// without reading more. With givenUp (a deadline: ctx ended, or the peer
// stalled; or an answer not understood) the peer may be splicing them
// already: two processes must never both run one, so each is given up
// here (closed without a write) as if moved; at a deadline collect acted
// on the answers already queued first, so only those the peer had not
// answered are. On any other failure of the socket the peer did not
// answer and so does not hold them (an Adopt that stopped closes its
// duplicates of what it read but did not answer, the kernel those of
// what it never read; a peer that died closed them with it): they are
// thawed.
func (m *mover) fail(err error, givenUp bool) {
	m.setErr(err)
	for _, f := range m.q {
		if givenUp {
			f.forget()
			m.moved++
		} else {
			f.thaw()
			m.left = append(m.left, f.r.c)
		}
	}
	m.q, m.qBytes = m.q[:0], 0
}

// setErr keeps the hand-off's first error, saying which bound a deadline
// was.
func (m *mover) setErr(err error) {
	switch {
	case m.err != nil:
	case !errors.Is(err, os.ErrDeadlineExceeded):
		m.err = err
	case m.ctx.Err() != nil:
		m.err = fmt.Errorf("handoff: %w (%w)", context.Cause(m.ctx), err)
	default:
		m.err = fmt.Errorf("%w for %v: %w", errHandoffStalled, m.clock.stall, err)
	}
}

// handoffClock is the hand-off socket's deadline: the stall bound from
// the last progress, until ctx ends, which sets it in the past for good.
type handoffClock struct {
	mu    sync.Mutex
	to    *net.UnixConn
	stall time.Duration
	ended bool
}

// end sets the deadline in the past: every read and write on the socket
// returns os.ErrDeadlineExceeded from now on.
func (k *handoffClock) end() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ended = true
	k.to.SetDeadline(aLongTimeAgo)
}

// progress moves the deadline to a stall from now, unless ctx ended.
func (k *handoffClock) progress() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.ended {
		k.to.SetDeadline(time.Now().Add(k.stall))
	}
}

// finish lifts the stall bound from the socket, which outlives Handoff;
// after ctx ended it stays in the past.
func (k *handoffClock) finish() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.ended {
		k.to.SetDeadline(time.Time{})
	}
	k.ended = true
}

// frozen is a connection held still for a move (ready.Frozen) and what
// goes with it.
type frozen struct {
	r    *readyState
	rf   *ready.Frozen
	size int // its message's bytes, while in flight
}

// freeze holds the connection still if it can move now (the goroutine
// splice never can).
func (*goDriver) freeze() (*frozen, moveResult) { return nil, moveNever }

// freeze holds the connection still if it can move now: plain or TLS 1.3
// on edge's record layer (its keys and sequence numbers travel in the
// record; TLS 1.2 on crypto/tls cannot move), no bytes left in a PROXY
// reader, the runtime's judgement (runner held, nothing queued, no
// failed socket) and the driver's: not closing, lingering or half-closed,
// no close scheduled.
func (r *readyState) freeze() (*frozen, moveResult) {
	c := r.c
	switch c.client.(type) {
	case *edgeConn, *ready.RecordConn:
	default:
		return nil, moveNever
	}
	if r.ec == nil || len(r.ec.pre) > 0 {
		return nil, moveNever
	}
	rf, err := r.rc.Freeze()
	switch {
	case errors.Is(err, ready.ErrBusy):
		return nil, moveRetry
	case errors.Is(err, ready.ErrGone):
		return nil, moveGone
	case err != nil:
		return nil, moveNever
	}
	if r.leaving() {
		rf.Thaw()
		return nil, moveNever
	}
	if c.sess.MidMessage() {
		// A compressed client message under way whose counting inflater
		// is mid-stream (it does not move): the message ends soon or the
		// rounds run out and it gets a 1012.
		rf.Thaw()
		return nil, moveRetry
	}
	return &frozen{r: r, rf: rf}, moveDone
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

// thaw gives the connection back: a run does whatever was asked for
// meanwhile.
func (f *frozen) thaw() { f.rf.Thaw() }

// encode is the connection's state record; a TLS 1.3 client's record
// state (keys, IVs, sequence numbers, a KeyUpdate answer owed) and the
// start of a record it already read go with it.
func (f *frozen) encode() ([]byte, error) {
	st := f.r.c.handoffState()
	rec, tail, err := f.rf.RecordState()
	if err != nil {
		return nil, err
	}
	if rec != nil {
		st.TLS13 = &handoff.TLS13{Record: rec, Pending: tail}
	}
	return handoff.Encode(st)
}

// forget drops a connection the peer took: its descriptors closed
// without a write, its counts given back here (the peer counts it now),
// with no access line; the Observer sees it close as ReasonMoved, so
// every ConnOpened keeps its ConnClosed.
func (f *frozen) forget() {
	f.r.finished = true
	f.rf.Forget()
	f.r.c.forgetMoved()
}

// handoffState is c's state record, without the TLS section.
func (c *wsConn) handoffState() *handoff.State {
	x := c.x
	sess, _ := c.sess.MarshalBinary()
	st := &handoff.State{
		Pool: c.pool.name, BackendID: c.be.ID(), BackendAddr: c.be.Addr(),
		Method: x.method, Host: x.host, Path: x.path, RequestID: x.requestID(), TLS: x.tls,
		Client: x.id.client, Peer: x.id.peer,
		Start: x.start.UnixNano(), Upgrade: int64(x.upgrade),
		In: c.in.Load(), Out: c.out.Load(), Last: c.sess.LastActivity(),
		Session: sess,
	}
	if x.lo != nil {
		st.Listener = x.lo.Name
	}
	return st
}

// forgetMoved gives back what c held here, for a connection that moved.
func (c *wsConn) forgetMoved() {
	s, x := c.s, c.x
	s.reg.remove(c)
	c.be.Release()
	x.release()
	s.obs.ConnClosed(x.routeName(), c.be.ID(), string(ReasonMoved), s.now().Sub(x.start), c.in.Load(), c.out.Load())
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
// When the
// pool or backend is not here any more, or the pool now follows client
// frames the old process did not, the connection is still adopted and is
// sent a close 1012 at its next frame boundary.
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
		// deadline, Handoff's fail) or it died, and either way this
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
	x := &exchange{s: s, lo: sh.listener(st.Listener), start: time.Unix(0, st.Start), pool: pool,
		id: identity{peer: st.Peer, client: st.Client}, backend: st.BackendID, status: 101, ws: true,
		method: st.Method, host: st.Host, path: st.Path, tls: st.TLS, reqID: st.RequestID, upgrade: time.Duration(st.Upgrade)}
	x.detach()
	c := &wsConn{s: s, x: x, be: be, pool: pool}
	restart, err := c.resumeSession(st.Session)
	if err != nil {
		return nil, "", err
	}
	if restart {
		why = ReasonRestart
	}
	if neg, counted := c.sess.Deflate(); counted {
		x.deflate = deflateCounted
	} else if neg {
		x.deflate = deflatePassed
	}
	c.sess.Touch(st.Last)
	c.in.Store(st.In)
	c.out.Store(st.Out)
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

// recordStateOf is the TLS 1.3 record state a record carries (nil for a
// plain connection); a TLS connection without one cannot be resumed.
func recordStateOf(st *handoff.State) (*record.State, error) {
	if st.TLS13 == nil {
		if st.TLS != "" {
			return nil, errors.New("a TLS connection without its record state")
		}
		return nil, nil
	}
	rs := new(record.State)
	if err := rs.UnmarshalBinary(st.TLS13.Record); err != nil {
		return nil, fmt.Errorf("TLS 1.3 record state: %w", err)
	}
	return rs, nil
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

// resumeSession restores the session a record carries under this
// process's settings of c's pool. restart: the pool follows client frames
// now and this stream's position is unknown, so it is resumed without
// client limits, to be closed 1012.
func (c *wsConn) resumeSession(b []byte) (restart bool, err error) {
	cfg := &c.pool.ws
	c.sess.Init(cfg, time.Now().UnixNano())
	err = c.sess.UnmarshalBinary(b)
	if errors.Is(err, wsession.ErrIncompatible) {
		own := *cfg
		own.MaxFrameBytes, own.MaxMessageBytes, own.Rate = 0, 0, wsession.Rate{}
		c.sess = wsession.Session{}
		c.sess.Init(&own, time.Now().UnixNano())
		err, restart = c.sess.UnmarshalBinary(b), true
	}
	if err != nil {
		return false, err
	}
	if r := c.sess.Reason(); r != reasonKeep && !slices.Contains(CloseReasons(), r) {
		return false, fmt.Errorf("session: unknown close reason %q", r)
	}
	return restart, nil
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
	x.admitted = true
	c.pool.use.Add(1)
	s.inflight.Add(1)
	c.pool.limiter.Hold(x.id.client)
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
