package ready

import (
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Sock is one TCP socket of a taken-over connection: a descriptor of our
// own, out of Go's poller, read and written without ever blocking.
//
// Reads are done by the connection's runner only. Writes come from the
// runner and, for a TLS client, from tls.Conn.Close on whichever goroutine
// closes the connection; mu orders them and the close, so no system call
// ever sees a descriptor number after it was closed (and possibly reused).
//
// A held connection keeps two: the descriptor is an int32 (a C int, what
// the kernel hands out) so that it and the four flags share one word and
// a Sock is 80 bytes, not 88 in the 96-byte size class.
type Sock struct {
	mu sync.Mutex
	fd int32 // -1 once closed

	finPending bool // shutdown(SHUT_WR) once q drains

	// Runner-owned: the last read found the receive queue empty, and that
	// may be trusted (no hang-up was reported) until the next readiness.
	empty, trustEmpty bool

	eof bool // a read returned end of file: nothing is left to discard

	q      []byte       // bytes the socket did not take; nil when empty
	werr   error        // first hard write error; sticky
	qSince atomic.Int64 // unix nanos when q became non-empty; 0 = empty
	qLen   atomic.Int64 // len(q), readable without mu

	onClose func() // called once the descriptor is closed; may be nil
}

// NewSock takes fd, a non-blocking stream socket of our own, over.
func NewSock(fd int) *Sock { return &Sock{fd: int32(fd)} }

// sysfd is the descriptor as the system calls take it.
func (s *Sock) sysfd() int { return int(s.fd) }

// DupFD returns a close-on-exec duplicate of the socket under tc.
func DupFD(tc *net.TCPConn) (int, error) {
	rc, err := tc.SyscallConn()
	if err != nil {
		return -1, err
	}
	nfd, derr := -1, error(nil)
	if err := rc.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, os.NewSyscallError("fcntl", derr)
	}
	return nfd, nil
}

// StartDrain prepares a drain after a readiness event: a short read may
// be taken as "empty" unless the peer hung up (then read until EOF).
func (s *Sock) StartDrain(hup bool) {
	s.empty, s.trustEmpty = false, !hup
}

// Read reads without blocking; ErrWouldBlock means nothing is there.
// With edge-triggered epoll a read shorter than p proves the queue was
// empty at that moment: data arriving later raises a new event, so the
// next read is skipped instead of paying a system call for EAGAIN.
func (s *Sock) Read(p []byte) (int, error) {
	if s.empty && s.trustEmpty {
		return 0, ErrWouldBlock
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd < 0 {
		return 0, net.ErrClosed
	}
	for {
		n, err := rawRead(s.sysfd(), p)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			s.empty = true
			return 0, ErrWouldBlock
		case err != nil:
			return 0, os.NewSyscallError("read", err)
		case n == 0 && len(p) > 0:
			s.eof = true
			return 0, io.EOF
		}
		if n < len(p) {
			s.empty = true
		}
		return n, nil
	}
}

// Write sends p or queues what the socket does not take; it fails only
// on a dead socket.
func (s *Sock) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.werr != nil {
		return 0, s.werr
	}
	if s.fd < 0 {
		return 0, net.ErrClosed
	}
	n := len(p)
	if len(s.q) == 0 {
		for len(p) > 0 {
			k, err := rawWrite(s.sysfd(), p)
			if err == unix.EINTR {
				continue
			}
			if err == unix.EAGAIN {
				break
			}
			if err != nil {
				s.werr = os.NewSyscallError("write", err)
				return n - len(p), s.werr
			}
			p = p[k:]
		}
		if len(p) == 0 {
			return n, nil
		}
		s.qSince.Store(time.Now().UnixNano())
	}
	s.q = append(s.q, p...)
	s.qLen.Store(int64(len(s.q)))
	return n, nil
}

// Queued reports that bytes wait for writability.
func (s *Sock) Queued() bool { return s.qSince.Load() != 0 }

// QueuedBytes is the length of the queue.
func (s *Sock) QueuedBytes() int64 { return s.qLen.Load() }

// Flush writes the queue; once it is empty the queue is dropped and a
// pending FIN goes out.
func (s *Sock) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.werr != nil {
		return s.werr
	}
	if s.fd < 0 {
		return net.ErrClosed
	}
	progressed := false
	for len(s.q) > 0 {
		k, err := rawWrite(s.sysfd(), s.q)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			if progressed {
				// The write timeout is about a peer that stopped
				// reading, not a slow one: progress restarts the clock.
				s.qSince.Store(time.Now().UnixNano())
			}
			return nil
		}
		if err != nil {
			s.werr = os.NewSyscallError("write", err)
			return s.werr
		}
		s.q = s.q[k:]
		s.qLen.Store(int64(len(s.q)))
		progressed = progressed || k > 0
	}
	s.q = nil
	s.qSince.Store(0)
	if s.finPending {
		s.finPending = false
		unix.Shutdown(s.sysfd(), unix.SHUT_WR)
	}
	return nil
}

// CloseWrite sends a FIN after the queued bytes.
func (s *Sock) CloseWrite() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd < 0 {
		return net.ErrClosed
	}
	if len(s.q) > 0 {
		s.finPending = true
		return nil
	}
	if err := unix.Shutdown(s.sysfd(), unix.SHUT_WR); err != nil {
		return os.NewSyscallError("shutdown", err)
	}
	return nil
}

// LocalAddr asks the socket for its address; an idle connection does not
// keep one.
func (s *Sock) LocalAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd < 0 {
		return &net.TCPAddr{}
	}
	switch sa, _ := unix.Getsockname(s.sysfd()); v := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(v.Addr[:]).To16(), Port: v.Port}
	case *unix.SockaddrInet6:
		return &net.TCPAddr{IP: net.IP(v.Addr[:]), Port: v.Port}
	}
	return &net.TCPAddr{}
}

// watch adds the descriptor to p's epoll set under id.
func (s *Sock) watch(p *poller, id uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd < 0 {
		return net.ErrClosed
	}
	return p.watch(s.sysfd(), id)
}

// Close closes the descriptor. The descriptor is the only reference to
// its socket (the takeover closed Go's original), so close(2) also takes it
// out of the epoll set (epoll(7): a file leaves every interest list when
// its last descriptor is closed) without an EPOLL_CTL_DEL of its own, and
// events carry ids that are never reused, so an event already fetched for
// this socket cannot reach a connection that reuses the number.
func (s *Sock) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd < 0 {
		return net.ErrClosed
	}
	if len(s.q) > 0 && s.werr == nil {
		// One last non-blocking try, so a queued close frame or TLS
		// close_notify still reaches a peer that is reading.
		unix.Write(s.sysfd(), s.q)
	}
	// Unread bytes in the receive buffer make close(2) send a reset,
	// which can destroy what was just sent (a close frame 1001 during a
	// drain) before the peer read it: discard what is there, bounded, so
	// the close is an orderly FIN.
	// After end of file nothing can be left, and the read is skipped.
	var sink [4096]byte
	for i := 0; i < 16 && !s.eof; i++ {
		n, err := unix.Read(s.sysfd(), sink[:])
		if n <= 0 || err != nil {
			break
		}
	}
	err := unix.Close(s.sysfd())
	s.fd = -1
	if s.onClose != nil {
		s.onClose()
	}
	s.q = nil
	s.qSince.Store(0)
	s.qLen.Store(0)
	if err != nil {
		return os.NewSyscallError("close", err)
	}
	return nil
}

// OnClose has f called once the descriptor is closed (the accept cap's
// count of open sockets).
func (s *Sock) OnClose(f func()) { s.onClose = f }

// QueuedSince is the unix nanos since when the queue holds bytes; 0: empty.
func (s *Sock) QueuedSince() int64 { return s.qSince.Load() }

// Unread is how many bytes wait in the socket's receive queue (-1 when
// it cannot say): for tests.
func (s *Sock) Unread() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := unix.IoctlGetInt(s.sysfd(), unix.SIOCINQ)
	if err != nil {
		return -1
	}
	return n
}
