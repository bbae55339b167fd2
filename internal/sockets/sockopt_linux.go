package sockets

import "golang.org/x/sys/unix"

// Keep-alive probing of client connections, Go's defaults: the first probe
// after 15 s of silence, then every 15 s, 9 unanswered probes drop it.
const (
	keepAliveIdle     = 15
	keepAliveInterval = 15
	keepAliveCount    = 9
)

// acceptedKeepAlive leaves accepted sockets alone: Linux copies keep-alive
// from the listening socket to every accepted one (tcp_create_openreq_child
// arms the timer of the clone), which saves four setsockopt calls per
// connection over Go setting it on each accepted socket.
const acceptedKeepAlive = -1

func listenerOptions() []sockopt {
	return []sockopt{
		{"SO_REUSEPORT", unix.SOL_SOCKET, unix.SO_REUSEPORT, 1},
		{"SO_KEEPALIVE", unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
		{"TCP_KEEPIDLE", unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, keepAliveIdle},
		{"TCP_KEEPINTVL", unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, keepAliveInterval},
		{"TCP_KEEPCNT", unix.IPPROTO_TCP, unix.TCP_KEEPCNT, keepAliveCount},
	}
}

// setsockoptInt sets one integer option of the listening socket.
func setsockoptInt(fd uintptr, level, opt, v int) error {
	return unix.SetsockoptInt(int(fd), level, opt, v)
}
