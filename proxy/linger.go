package proxy

import (
	"errors"
	"time"
)

// Lingering close defaults (Pool.LingerTimeout, Pool.LingerBytes). The
// bytes cover what a client fast on loopback still has in flight after a
// frame over a limit (its own buffer and both kernels' buffers: several
// MiB); the time is nginx's lingering_timeout.
const (
	defaultLingerTimeout = 5 * time.Second
	defaultLingerBytes   = 16 << 20
)

// Linger states of a connection.
const (
	lingerNone = iota // not lingering (yet)
	lingerOn          // the backend is gone, the client's input is discarded
	lingerOver        // lingering ended: the client socket closes now
)

// closePingTimeout is the close code sent to a client that missed its
// ping timeout: 1011, as python-websockets does for a keepalive timeout.
const closePingTimeout = 1011

// errLingerDone ends the client->backend direction of the goroutine
// splice once lingering is over.
var errLingerDone = errors.New("lingering close done")

// lingerTimeout is how long a lingering close reads the client; <= 0: no
// lingering.
func (p *Pool) lingerTimeout() time.Duration {
	if p.LingerTimeout == 0 {
		return defaultLingerTimeout
	}
	return p.LingerTimeout
}

// lingerBytes is how many client bytes a lingering close discards at most.
func (p *Pool) lingerBytes() int64 {
	if p.LingerBytes <= 0 {
		return defaultLingerBytes
	}
	return p.LingerBytes
}

// forcedClose reports reasons that close both sockets at once: the
// server stopping, a timeout, a dead client. Every other close of a
// connection whose client was sent a close frame lingers.
func forcedClose(reason CloseReason) bool {
	switch reason {
	case ReasonShutdown, ReasonIdleTimeout, ReasonWriteTimeout, ReasonFinTimeout, ReasonPingTimeout, ReasonClientClosed, ReasonError:
		return true
	}
	return false
}

// lingerStart begins a lingering close instead of closing both sockets,
// and reports whether the connection lingers (the discarder ends it).
//
// Once edge has sent the client a close frame, the client may still be
// sending (the rest of a frame over the limit, messages queued before it
// read the close). Closing a socket with unread input makes the kernel
// send a reset instead of a FIN, and the client's stack may drop the
// close frame it had already received (Node ws then reports 1006). So the
// connection closes the way RFC 6455 §7.1.1 and nginx's lingering close
// do: the backend is closed, the client's write half is shut down after
// the queued close frame, and the client's input is read and discarded
// until it closes, LingerBytes were discarded or LingerTimeout passed.
func (c *wsConn) lingerStart() bool {
	switch c.linger.Load() {
	case lingerOn:
		return true
	case lingerOver:
		return false
	}
	d := c.pool.lingerTimeout()
	if !c.closeOut.Load() || c.clientEOF.Load() || d <= 0 || c.c2bGone.Load() {
		return false
	}
	c.lingerUntil.Store(time.Now().Add(d).UnixNano())
	if !c.linger.CompareAndSwap(lingerNone, lingerOn) {
		return c.linger.Load() == lingerOn
	}
	if c.rd.on {
		c.lingerReady()
		return true
	}
	c.backend.Close() // the backend->client goroutine returns
	closeWrite(c.client)
	// Wakes a parked client read at the bound; the reader re-checks
	// lingerUntil after arming its own deadline, so the wake-up is not lost.
	c.client.SetReadDeadline(time.Unix(0, c.lingerUntil.Load()))
	return true
}

// lingerDeadline is when lingering ends; zero when not lingering.
func (c *wsConn) lingerDeadline() time.Time {
	if c.linger.Load() != lingerOn {
		return time.Time{}
	}
	return time.Unix(0, c.lingerUntil.Load())
}

// lingerDiscard accounts for n client bytes read (with err) while
// lingering and reports whether lingering is over.
func (c *wsConn) lingerDiscard(n int, err error) bool {
	c.lingered += int64(n)
	if c.lingered > c.pool.lingerBytes() {
		return true
	}
	if err == nil {
		return false
	}
	return !isTimeout(err) || !time.Now().Before(c.lingerDeadline()) || c.idleExpired()
}

// pingTimeoutClose sends the client a close 1011 after a missed ping
// timeout when the backend->client stream is between two frames, and
// reports whether it did; the connection then ends with a lingering
// close. Otherwise the caller closes at once.
func (c *wsConn) pingTimeoutClose(write func([]byte) error) bool {
	if c.closeSent || c.frames.closeSeen || !c.frames.atBoundary() {
		return false
	}
	c.setReason(ReasonPingTimeout)
	c.closeSent = true
	if err := write(closeFrame(closePingTimeout)); err != nil {
		return false
	}
	c.closeWritten(closePingTimeout)
	c.closeOut.Store(true)
	return true
}
