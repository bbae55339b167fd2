package sockets

import (
	"context"
	"fmt"
	"net"
	"syscall"
)

// Listen binds addr (TCP) with SO_REUSEPORT, so several edge processes can
// share a port on one box and a new process can bind before the old one
// has finished draining. Further options of the listening socket, and
// whether Go sets keep-alive on each accepted socket, depend on the system
// (sockopt_*.go).
func Listen(addr string) (net.Listener, error) {
	lc := net.ListenConfig{
		KeepAlive: acceptedKeepAlive,
		Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				for _, o := range listenerOptions() {
					if serr = setsockoptInt(fd, o.level, o.opt, o.v); serr != nil {
						serr = fmt.Errorf("listener %s: setsockopt %s: %w", addr, o.name, serr)
						return
					}
				}
			})
			if err != nil {
				return err
			}
			return serr
		},
	}
	return lc.Listen(context.Background(), "tcp", addr)
}

// sockopt is one integer option of the listening socket.
type sockopt struct {
	name          string
	level, opt, v int
}
