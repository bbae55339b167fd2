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

// deferAccept is TCP_DEFER_ACCEPT's bound, in seconds: accept returns a
// connection once its client has sent something (every protocol edge
// serves speaks first: the ClientHello, the request, the PROXY header), so
// the handshake's first read finds the ClientHello instead of an EAGAIN,
// a wait in the poller and a second read. A client silent for longer is
// accepted after it all the same (the kernel completes the connection at
// the next retransmission of its SYN-ACK), and then the handshake and
// header timeouts apply as before. nginx's "deferred" and HAProxy's
// "defer-accept" set the same option.
const deferAccept = 1

func listenerOptions() []sockopt {
	return []sockopt{
		{"SO_REUSEPORT", unix.SOL_SOCKET, unix.SO_REUSEPORT, 1},
		{"TCP_DEFER_ACCEPT", unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, deferAccept},
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
