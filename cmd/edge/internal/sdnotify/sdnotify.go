package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// Notifier tells the service manager about edge's state over the sd_notify
// datagram protocol (sd_notify(3)): READY=1 once the listeners accept,
// RELOADING=1 then READY=1 around a reload, STOPPING=1 when the drain
// starts. With Type=notify, systemd then knows when a start or a reload has
// finished instead of guessing from the PID. Without NOTIFY_SOCKET (not run
// by systemd) it does nothing.
type Notifier struct {
	addr *net.UnixAddr // nil: not under a service manager
	path string        // NOTIFY_SOCKET as given, for a process an upgrade starts
}

// FromEnv reads the socket from the environment and unsets it, so nothing
// edge starts talks to the manager in edge's name. Without NOTIFY_SOCKET, or
// with one that is neither a path nor an abstract socket, the Notifier
// sends nothing.
func FromEnv() *Notifier {
	given := os.Getenv("NOTIFY_SOCKET")
	os.Unsetenv("NOTIFY_SOCKET")
	path := given
	if path == "" || (path[0] != '/' && path[0] != '@') {
		return &Notifier{}
	}
	if path[0] == '@' {
		// An abstract socket: the leading @ stands for a NUL byte.
		path = "\x00" + path[1:]
	}
	return &Notifier{addr: &net.UnixAddr{Name: path, Net: "unixgram"}, path: given}
}

// send writes one state message, its lines joined by newlines. Errors are
// returned for the caller to log; the manager going away never stops edge.
func (n *Notifier) send(lines ...string) error {
	if n == nil || n.addr == nil {
		return nil
	}
	c, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sd_notify %s: %w", n.addr.Name, err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(strings.Join(lines, "\n"))); err != nil {
		return fmt.Errorf("sd_notify %s: %w", n.addr.Name, err)
	}
	return nil
}

// Ready says that edge serves, with a status line for `systemctl status`.
func (n *Notifier) Ready(status string) error {
	// One line: a refused reload's error lists every problem.
	return n.send("READY=1", "STATUS="+strings.ReplaceAll(status, "\n", "; "))
}

// ReadyAsMain is Ready from a process an upgrade started: MAINPID= makes
// it the unit's main process (sd_notify(3)), in the same message as
// READY=1 so that the manager never sees one without the other. The unit
// needs NotifyAccess=all, since the sender is not yet the main process.
func (n *Notifier) ReadyAsMain(pid int, status string) error {
	return n.send(fmt.Sprintf("MAINPID=%d", pid), "READY=1", "STATUS="+strings.ReplaceAll(status, "\n", "; "))
}

// Socket is NOTIFY_SOCKET as edge found it, for a process an upgrade
// starts; "" without a manager.
func (n *Notifier) Socket() string {
	if n == nil {
		return ""
	}
	return n.path
}

// Reloading says a reload has started. systemd wants the monotonic clock
// with it (sd_notify(3), RELOADING=1), to tell this reload from a later one.
// The clock is read only under a manager (clock_linux.go).
func (n *Notifier) Reloading() error {
	if n == nil || n.addr == nil {
		return nil
	}
	usec, err := monotonicMicros()
	if errors.Is(err, errors.ErrUnsupported) {
		// Not Linux, so not systemd: a manager speaking the protocol
		// elsewhere does not ask for the clock (clock_other.go).
		return n.send("RELOADING=1")
	}
	if err != nil {
		return fmt.Errorf("sd_notify: monotonic clock: %w", err)
	}
	return n.send("RELOADING=1", fmt.Sprintf("MONOTONIC_USEC=%d", usec))
}

// Stopping says the drain has started.
func (n *Notifier) Stopping() error {
	return n.send("STOPPING=1", "STATUS=draining")
}
