//go:build !windows

package upgrade

import (
	"fmt"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// supported: descriptors pass to a new process through exec on every Unix.
const supported = true

// dupConn duplicates c's descriptor, close on exec, as a file of its own.
// Through SyscallConn rather than c.File, which would put the shared
// file description, and so c itself, in blocking mode.
func dupConn(c syscall.Conn, what string) (*os.File, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	var fd int
	var dupErr error
	if err := raw.Control(func(s uintptr) { fd, dupErr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if dupErr != nil {
		return nil, fmt.Errorf("%s: dup: %w", what, dupErr)
	}
	// os.NewFile keeps a non-blocking descriptor as it is; Fd (which
	// exec calls) then leaves it so too.
	return os.NewFile(uintptr(fd), what), nil
}

// inheritFD makes descriptor fd, inherited from the parent, close on
// exec and non-blocking (so a read of it can be interrupted), and returns
// it as a file. An fd that is not open is an error: the parent named more
// descriptors than it passed.
func inheritFD(fd int, what string) (*os.File, error) {
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
		return nil, fmt.Errorf("inherited descriptor %d (%s): %w", fd, what, err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("inherited descriptor %d (%s): %w", fd, what, err)
	}
	return os.NewFile(uintptr(fd), what), nil
}

// handoffPair returns a connected pair of SOCK_STREAM Unix sockets, close
// on exec: this process's end as a connection and the new process's end as
// a file to pass on. proxy's hand-off frames its own messages and reads
// each header apart, with the descriptors sent with it (SCM_RIGHTS): a
// datagram socket would cut a message short.
func handoffPair() (*net.UnixConn, *os.File, error) {
	// SOCK_CLOEXEC is not everywhere (Darwin); under ForkLock, as the
	// standard library does, no fork sees the descriptors before they are
	// marked close on exec.
	syscall.ForkLock.RLock()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err == nil {
		unix.CloseOnExec(fds[0])
		unix.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	mine := os.NewFile(uintptr(fds[0]), HandoffName)
	defer mine.Close()
	theirs := os.NewFile(uintptr(fds[1]), HandoffName)
	c, err := net.FileConn(mine)
	if err != nil {
		_ = theirs.Close()
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	return c.(*net.UnixConn), theirs, nil
}
