package proxy

import (
	"net"
	"time"
)

// TCP keep-alive on a WebSocket's two sockets.
//
// Keep-alive finds a peer that vanished without a reset, and keeps a path
// through a NAT or a load balancer that forgets idle flows warm. The
// listener sets Go's defaults, which accepted sockets inherit (a probe
// after 15 s without a packet from the peer, then every 15 s while
// unanswered; cmd/edge/internal/sockets), and so did dialBackend. An answered probe
// restarts the idle clock, so an idle socket is probed every 15 s. Beside
// a heartbeat every 30 s that is a second packet each way per ping, and
// for a client on a mobile network a second wake-up of its radio; at
// 100,000 held connections, 10,000 probes a second and as many ACKs. (On
// loopback their CPU does not show: docs/BENCHMARKS.md.)
//
// A pool that pings its clients and ends one that stops answering
// (PingInterval and PingTimeout, wsession) probes its clients itself: an
// answered ping is a packet from the client at least every ping interval.
// Its client sockets are first probed by TCP only after a ping interval
// and a ping timeout without one (clientKeepAliveIdle), so while the
// heartbeat runs the kernel never probes; when it cannot run (a backend
// stalled mid-frame, which holds the ping back, or a process after an
// upgrade whose pool no longer pings) the kernel still finds a vanished
// client. Its backend sockets are probed after a ping interval of silence
// rather than 15 s (backendKeepAliveIdle), at most two minutes, which
// keeps the path warm through load balancers that forget a flow after
// four (Azure's default) or 350 s (AWS's); the clients' pongs, which
// reached the backend at that cadence before edge kept them
// (wsession/pong.go), did no more. Every other socket keeps the defaults.

// defaultKeepAliveIdle is Go's keep-alive idle and interval, the
// listener's and dialBackend's.
const defaultKeepAliveIdle = 15 * time.Second

// maxBackendKeepAliveIdle bounds backendKeepAliveIdle, and maxKeepAliveIdle
// any idle: TCP_KEEPIDLE takes at most 32,767 s (tcp(7)).
const (
	maxBackendKeepAliveIdle = 2 * time.Minute
	maxKeepAliveIdle        = 32767 * time.Second
)

// reapsSilentClients reports whether the pool ends a client that stops
// answering its pings: both a ping interval and a ping timeout are set.
func (p *pool) reapsSilentClients() bool {
	return p.ws.PingInterval > 0 && p.ws.PingTimeout > 0
}

// clientKeepAliveIdle is how long a client socket of p may go without a
// packet from the client before TCP probes it: a ping interval and a ping
// timeout for a pool that reaps silent clients, 0 (the listener's) else.
func (p *pool) clientKeepAliveIdle() time.Duration {
	if !p.reapsSilentClients() {
		return 0
	}
	return min(p.ws.PingInterval+p.ws.PingTimeout, maxKeepAliveIdle)
}

// backendKeepAliveIdle is how long a backend socket of p may be silent
// before its first keep-alive probe: the ping interval, between 15 s and
// two minutes, for a pool that reaps silent clients, else 15 s.
func (p *pool) backendKeepAliveIdle() time.Duration {
	if !p.reapsSilentClients() {
		return defaultKeepAliveIdle
	}
	return min(max(p.ws.PingInterval, defaultKeepAliveIdle), maxBackendKeepAliveIdle)
}

// clientKeepAlive sets the client socket's keep-alive idle for a pool
// that reaps silent clients (clientKeepAliveIdle). The option belongs to
// the socket, so the descriptor the readiness splice duplicates, and a
// new process the socket is handed to, keep it. A socket that refuses
// keeps the listener's probes, which cost only the packets above.
func (c *wsConn) clientKeepAlive() {
	idle := c.pool.clientKeepAliveIdle()
	if idle == 0 {
		return
	}
	if tc := tcpOf(c.client); tc != nil {
		// Negative: the interval and count stay the listener's.
		tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: idle, Interval: -1, Count: -1})
	}
}
