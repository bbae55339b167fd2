package handoff

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ErrStalled is the error of a hand-off whose peer stopped answering for
// Options.Stall.
var ErrStalled = errors.New("handoff: the peer stopped answering")

// aLongTimeAgo is a deadline in the past: every read and write with it
// returns os.ErrDeadlineExceeded at once.
var aLongTimeAgo = time.Unix(1, 0)

// Move sends every one of conns it can to the peer at the other end of
// to, in rounds: a connection that was busy is tried again every
// RetryWait for RetryFor. Up to Window messages (WindowBytes) are in
// flight at once, their answers read in order: adopted, the item is
// forgotten (Forget); refused, it is thawed and stays (left). It returns
// how many moved, the connections that stay here (refused, unmovable,
// still busy at the bound, or thawed when the socket failed), in the
// order they were settled, and the first error.
//
// Besides ctx, the hand-off is bounded by progress: a peer that answers
// nothing for Stall ends it (ErrStalled), however many connections are
// left. When the socket's deadline passes (ctx ended, or the stall) the
// answers already queued on it are still read and acted on; an item then
// in flight unanswered may run in the peer already: it is given up here
// (Forget, counted moved), never resumed, so no connection runs in both
// processes, and so is one whose answer is no answer this release knows,
// with every one still in flight behind it. Every one in flight when the
// socket fails otherwise (the peer holds a connection only once its
// answer is written, and what it wrote is read here first) is thawed.
//
// to must be a SOCK_STREAM Unix socket; it is left open, its deadline
// lifted (in the past if ctx ended).
func Move[C Conn](ctx context.Context, to *net.UnixConn, conns []C, o Options) (moved int, left []C, err error) {
	o = o.withDefaults()
	m := &sender[C]{ctx: ctx, to: to, o: o, clock: clock{to: to, stall: o.Stall}, acks: make([]byte, o.Window)}
	stop := context.AfterFunc(ctx, m.clock.end)
	defer func() {
		stop()
		m.clock.finish()
	}()
	left = m.run(conns)
	return m.moved, left, m.err
}

// flight is one message in flight: its connection, its item and its
// bytes.
type flight[C Conn] struct {
	c    C
	it   Item
	size int
}

// sender is one Move's pipeline: the messages in flight, oldest first,
// and what became of the connections.
type sender[C Conn] struct {
	ctx    context.Context
	to     *net.UnixConn
	o      Options
	clock  clock
	q      []flight[C] // sent, not answered yet, oldest first
	qBytes int         // their messages' bytes
	moved  int
	left   []C   // refused, or thawed when the socket failed
	err    error // the socket failed or stalled: nothing more is sent
	acks   []byte
}

// run moves pending in rounds: connections that were busy or had bytes
// queued are tried again every RetryWait for RetryFor. It returns the
// connections that stay.
func (m *sender[C]) run(pending []C) []C {
	until := time.Now().Add(m.o.RetryFor)
	for round := 0; len(pending) > 0 && (round == 0 || time.Now().Before(until)) && m.ctx.Err() == nil; round++ {
		if round > 0 {
			time.Sleep(m.o.RetryWait)
		}
		var again []C
		for i, c := range pending {
			if m.err != nil {
				m.left = append(m.left, pending[i:]...)
				break
			}
			switch m.move(c) {
			case Busy:
				again = append(again, c)
			case Never, broken:
				m.left = append(m.left, c)
			}
		}
		// Every answer before the pause: what moved is forgotten now.
		m.collect(len(m.q))
		pending = again
	}
	return append(m.left, pending...)
}

// move tries to move c once: freeze, send; its answer comes later
// (collect). The window is made room in first.
func (m *sender[C]) move(c C) Result {
	if len(m.q) >= m.o.Window || m.qBytes >= m.o.WindowBytes {
		m.collect(1)
		if m.err != nil {
			return broken
		}
	}
	it, msg, res := c.Freeze()
	if it == nil {
		return res
	}
	return m.send(flight[C]{c: c, it: it, size: len(msg)}, msg)
}

// send puts f's message in flight.
func (m *sender[C]) send(f flight[C], msg []byte) Result {
	if len(m.q) == 0 {
		// The stall counts from the oldest message not answered.
		m.clock.progress()
	}
	cfd, bfd := f.it.FDs()
	err := Send(m.to, msg, cfd, bfd)
	if errors.Is(err, unix.ETOOMANYREFS) && len(m.q) > 0 {
		// This user's descriptors in flight passed RLIMIT_NOFILE (other
		// processes hand off too): they leave the kernel's count as the
		// peer reads them. Nothing of this message was sent.
		if m.collect(len(m.q)); m.err != nil {
			f.it.Thaw()
			return broken
		}
		m.clock.progress()
		err = Send(m.to, msg, cfd, bfd)
	}
	switch {
	case errors.Is(err, unix.ETOOMANYREFS):
		f.it.Thaw()
		return Busy
	case err != nil:
		// Not sent, or only a part the peer cannot complete (and so
		// never answers): it stays here. The answers to what went
		// before it are still read: the kernel returns the bytes queued
		// before an error or the end.
		f.it.Thaw()
		m.setErr(err)
		m.collect(len(m.q))
		return broken
	}
	m.q = append(m.q, f)
	m.qBytes += f.size
	return sent
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
func (m *sender[C]) collect(need int) {
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
// each: forgotten when adopted, thawed (and left) when refused. An
// answer it does not know is given up as adopted (the peer may run it)
// and returned as the error.
func (m *sender[C]) answer(acks []byte) (unknown error) {
	for _, b := range acks {
		f := m.q[0]
		m.q, m.qBytes = m.q[1:], m.qBytes-f.size
		switch {
		case b == AckAdopted:
			f.it.Forget()
			m.moved++
		case b == AckRefused:
			f.it.Thaw()
			m.left = append(m.left, f.c)
		default:
			if unknown == nil {
				unknown = fmt.Errorf("handoff: ack byte %#x", b)
			}
			f.it.Forget()
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
func (m *sender[C]) answerQueued() {
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
// here (forgotten) as if moved; at a deadline collect acted on the
// answers already queued first, so only those the peer had not answered
// are. On any other failure of the socket the peer did not answer and so
// does not hold them (an Adopt that stopped closes its duplicates of
// what it read but did not answer, the kernel those of what it never
// read; a peer that died closed them with it): they are thawed.
func (m *sender[C]) fail(err error, givenUp bool) {
	m.setErr(err)
	for _, f := range m.q {
		if givenUp {
			f.it.Forget()
			m.moved++
		} else {
			f.it.Thaw()
			m.left = append(m.left, f.c)
		}
	}
	m.q, m.qBytes = m.q[:0], 0
}

// setErr keeps the hand-off's first error, saying which bound a deadline
// was.
func (m *sender[C]) setErr(err error) {
	switch {
	case m.err != nil:
	case !errors.Is(err, os.ErrDeadlineExceeded):
		m.err = err
	case m.ctx.Err() != nil:
		m.err = fmt.Errorf("handoff: %w (%w)", context.Cause(m.ctx), err)
	default:
		m.err = fmt.Errorf("%w for %v: %w", ErrStalled, m.clock.stall, err)
	}
}

// clock is the hand-off socket's deadline: the stall bound from the last
// progress, until ctx ends, which sets it in the past for good.
type clock struct {
	mu    sync.Mutex
	to    *net.UnixConn
	stall time.Duration
	ended bool
}

// end sets the deadline in the past: every read and write on the socket
// returns os.ErrDeadlineExceeded from now on.
func (k *clock) end() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ended = true
	k.to.SetDeadline(aLongTimeAgo)
}

// progress moves the deadline to a stall from now, unless ctx ended.
func (k *clock) progress() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.ended {
		k.to.SetDeadline(time.Now().Add(k.stall))
	}
}

// finish lifts the stall bound from the socket, which outlives Move;
// after ctx ended it stays in the past.
func (k *clock) finish() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.ended {
		k.to.SetDeadline(time.Time{})
	}
	k.ended = true
}
