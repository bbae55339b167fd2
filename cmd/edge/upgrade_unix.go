//go:build !windows

package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// notifyUpgrade delivers SIGUSR2, the upgrade signal of HAProxy and nginx,
// on c. Registered before anything else so that an early SIGUSR2 is
// refused instead of killing the process (its default action).
func notifyUpgrade(c chan<- os.Signal) { signal.Notify(c, syscall.SIGUSR2) }

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
	mine := os.NewFile(uintptr(fds[0]), handoffName)
	defer mine.Close()
	theirs := os.NewFile(uintptr(fds[1]), handoffName)
	c, err := net.FileConn(mine)
	if err != nil {
		_ = theirs.Close()
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	return c.(*net.UnixConn), theirs, nil
}
