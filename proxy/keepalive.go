package proxy

import (
	"crypto/tls"
	"time"
)

// TCP keep-alive on a WebSocket's two sockets.
//
// Keep-alive finds a peer that vanished without a reset, and keeps a path
// through a NAT or a load balancer that forgets idle flows warm. The
// listener sets Go's defaults, which accepted sockets inherit (15 s of
// silence, then a probe every 15 s; internal/sockets), and so did
// dialBackend. Each probe is a transmit and the peer's ACK a receive,
// charged to whatever runs when its timer fires: at 100,000 held
// connections those defaults were 10,000 probes a second and as many
// ACKs, as many packets as the heartbeat itself.
//
// A pool that pings its clients and ends one that stops answering
// (PingInterval and PingTimeout, wsession) needs no probe of the client:
// its pings find a vanished client within the ping timeout and keep the
// client's path warm at the ping interval. Its client sockets turn
// keep-alive off when the splice starts (clientKeepAliveOff). Its backend
// sockets are probed after a ping interval of silence instead of 15 s
// (backendKeepAliveIdle): that is the cadence at which the clients' pongs
// reached the backend before edge kept them (wsession/pong.go), so the
// path to the backend stays as warm as it was, and a backend host that
// vanished is still found, a ping interval less 15 s later than before
// (nine probes 15 s apart follow the first). Every other socket keeps the
// defaults.

// defaultKeepAliveIdle is Go's keep-alive idle and interval, the
// listener's and dialBackend's.
const defaultKeepAliveIdle = 15 * time.Second

// reapsSilentClients reports whether the pool ends a client that stops
// answering its pings: both a ping interval and a ping timeout are set.
func (p *pool) reapsSilentClients() bool {
	return p.ws.PingInterval > 0 && p.ws.PingTimeout > 0
}

// backendKeepAliveIdle is how long a backend socket of p may be silent
// before its first keep-alive probe: the ping interval for a pool that
// reaps silent clients (never under the default), else the default.
func (p *pool) backendKeepAliveIdle() time.Duration {
	if p.reapsSilentClients() {
		return max(p.ws.PingInterval, defaultKeepAliveIdle)
	}
	return defaultKeepAliveIdle
}

// clientKeepAliveOff turns keep-alive off on the client's socket of a
// connection whose pool reaps silent clients: its pings probe instead.
// The option belongs to the socket, so the descriptor the readiness
// splice duplicates keeps it off. A socket that refuses keeps probing,
// which is only the cost above.
func (c *wsConn) clientKeepAliveOff() {
	if !c.pool.reapsSilentClients() {
		return
	}
	conn := c.client
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	if ec, ok := conn.(*edgeConn); ok {
		conn = ec.Conn
	}
	if tc := tcpOf(conn); tc != nil {
		tc.SetKeepAlive(false)
	}
}
