package proxy

import (
	"errors"
	"time"
)

// errLingerDone ends the client->backend direction of the goroutine
// splice once lingering is over.
var errLingerDone = errors.New("lingering close done")

// lingerStart begins a lingering close instead of closing both sockets,
// and reports whether the connection lingers (the discarder ends it). The
// session decides (wsession.Session.LingerStart); the driver closes the
// backend and shuts the client's write half down after its queue.
func (c *wsConn) lingerStart() bool {
	lingering, started := c.sess.LingerStart(time.Now().UnixNano(), c.c2bGone.Load())
	if !started {
		return lingering
	}
	if c.rd.on {
		c.lingerReady()
		return true
	}
	c.backend.Close() // the backend->client goroutine returns
	closeWrite(c.client)
	// Wakes a parked client read at the bound; the reader re-checks the
	// deadline after arming its own, so the wake-up is not lost.
	c.client.SetReadDeadline(c.lingerDeadline())
	return true
}

// lingerDeadline is when lingering ends; zero when not lingering.
func (c *wsConn) lingerDeadline() time.Time {
	d := c.sess.LingerDeadline()
	if d == 0 {
		return time.Time{}
	}
	return time.Unix(0, d)
}

// lingerDiscard accounts for n client bytes read (with err) while
// lingering and reports whether lingering is over.
func (c *wsConn) lingerDiscard(n int, err error) bool {
	if c.sess.Discard(n) {
		return true
	}
	if err == nil {
		return false
	}
	return !isTimeout(err) || !time.Now().Before(c.lingerDeadline()) || c.idleExpired()
}

// lingerEnd ends a lingering close: both sockets close now.
func (c *wsConn) lingerEnd() {
	c.sess.LingerEnd()
	c.closeNow()
}
