package proxy

import (
	"errors"
	"sync/atomic"
	"time"
)

// errBackendFrameTooBig reports a backend frame over Pool.MaxFrameBytes.
var errBackendFrameTooBig = errors.New("backend frame over the pool's MaxFrameBytes")

// frameState is the per-connection state of frame-aware mode; a connection
// of a pool without MaxFrameBytes, PingInterval and PingTimeout has none
// and is spliced opaquely, exactly as before.
type frameState struct {
	// c2b follows client frames; used only with MaxFrameBytes.
	// Owned by the client->backend direction, like tooBig.
	c2b    frameTracker
	tooBig bool

	// endAfterClose: close both sockets once the close frame to the
	// client is out (a client frame was over the limit).
	endAfterClose atomic.Bool

	// Heartbeat, in unix nanos. lastClient is the last byte read from the
	// client, pingSent the last ping written, awaitSince the first ping
	// written after lastClient (0: none). pingWanted asks the
	// backend->client direction for a ping at its next frame boundary.
	lastClient atomic.Int64
	pingSent   atomic.Int64
	awaitSince atomic.Int64
	pingWanted atomic.Bool
	// pingExpired: the readiness sweeper found the ping timeout passed
	// and asks the runner for a close 1011 at the next frame boundary.
	pingExpired atomic.Bool
}

// frameAware reports whether p asks for frame-aware mode.
func (p *Pool) frameAware() bool {
	return p.MaxFrameBytes > 0 || p.MaxMessageBytes > 0 || p.PingInterval > 0
}

// tracksClient reports whether client frames are followed (a frame or a
// message limit).
func (p *Pool) tracksClient() bool {
	return p.MaxFrameBytes > 0 || p.MaxMessageBytes > 0
}

// initFrames sets frame-aware mode up for a new connection.
func (c *wsConn) initFrames() {
	if !c.pool.frameAware() {
		return
	}
	f := &frameState{}
	f.lastClient.Store(time.Now().UnixNano())
	if m := c.pool.MaxFrameBytes; m > 0 {
		f.c2b.limit = uint64(m)
		c.frames.limit = uint64(m)
	}
	if m := c.pool.MaxMessageBytes; m > 0 {
		f.c2b.msgLimit = uint64(m)
	}
	f.c2b.onClose = func(code int) { c.noteClose(SideClient, code) }
	c.fw = f
}

// clientChunk returns the part of the client bytes p that goes on to the
// backend. At the header of a frame over MaxFrameBytes, or of the frame
// that takes a message over MaxMessageBytes, it asks for a close
// 1009 (message too big, RFC 6455 §7.4.1) to the client, ends the
// backend's stream with a masked close 1001 when that falls between two
// frames, and forwards nothing more: the payload is never buffered, and
// the connection ends once the client's close is out. A client stream
// whose framing is lost (a 64-bit length with its top bit set) is treated
// the same way: its frames can no longer be measured.
func (c *wsConn) clientChunk(p []byte) []byte {
	f := c.fw
	f.lastClient.Store(time.Now().UnixNano())
	if !c.pool.tracksClient() {
		return p
	}
	if f.tooBig {
		return nil
	}
	n := f.c2b.feed(p, false)
	switch {
	case f.c2b.tooBig:
		p = p[:n]
		if !f.c2b.split {
			p = append(p[:n:n], maskedCloseFrame(CloseGoingAway)...)
		}
	case f.c2b.broken:
		p = nil
	default:
		return p
	}
	f.tooBig = true
	f.endAfterClose.Store(true)
	reason := ReasonFrameTooBig
	if f.c2b.tooBigMsg {
		reason = ReasonMessageTooBig
	}
	c.requestClose(CloseMessageTooBig, reason)
	return p
}

// pingPending reports a requested ping not yet sent.
func (c *wsConn) pingPending() bool {
	return c.fw != nil && (c.fw.pingWanted.Load() || c.fw.pingExpired.Load())
}

// mayPing reports whether a ping can go to the client now: one was asked
// for, the backend->client stream is between two frames, and no close
// frame went or is about to go (RFC 6455 §5.5.1).
func (c *wsConn) mayPing() bool {
	return c.fw != nil && c.fw.pingWanted.Load() && !c.closeSent && !c.frames.closeSeen &&
		c.closeCode.Load() == 0 && c.frames.atBoundary()
}

// pinged records a ping written to the client.
func (c *wsConn) pinged() {
	f := c.fw
	now := time.Now().UnixNano()
	c.s.obs.PingSent(c.x.routeName())
	f.pingWanted.Store(false)
	f.pingSent.Store(now)
	if a := f.awaitSince.Load(); a <= f.lastClient.Load() {
		f.awaitSince.Store(now)
	}
}

// pingCheck says what the heartbeat calls for at now: a ping (the client
// has sent nothing for PingInterval since its last byte or our last ping),
// or the end (nothing at all from the client within PingTimeout of the
// first unanswered ping: a half-open socket, traefik#10627, traefik#8668).
func (c *wsConn) pingCheck(now int64) (due, timedOut bool) {
	f, iv := c.fw, c.pool.PingInterval
	if f == nil || iv <= 0 {
		return false, false
	}
	last := f.lastClient.Load()
	if to := c.pool.PingTimeout; to > 0 {
		if a := f.awaitSince.Load(); a > last && now-a >= int64(to) {
			return false, true
		}
	}
	return !f.pingWanted.Load() && now-max(last, f.pingSent.Load()) >= int64(iv), false
}

// pingDeadline lowers d (zero: none) to the next moment pingCheck may have
// something to say; the goroutine splice reads the backend until then.
func (c *wsConn) pingDeadline(d time.Time) time.Time {
	f, iv := c.fw, c.pool.PingInterval
	if f == nil || iv <= 0 {
		return d
	}
	last := f.lastClient.Load()
	next := int64(0)
	if !f.pingWanted.Load() {
		next = max(last, f.pingSent.Load()) + int64(iv)
	}
	if to := c.pool.PingTimeout; to > 0 {
		if a := f.awaitSince.Load(); a > last && (next == 0 || a+int64(to) < next) {
			next = a + int64(to)
		}
	}
	if next == 0 {
		return d
	}
	if t := time.Unix(0, next); d.IsZero() || t.Before(d) {
		return t
	}
	return d
}

// relayFrames forwards the backend bytes p to the client through write in
// frame-aware mode: a header over MaxFrameBytes ends the connection before
// any of its payload goes on, and a requested ping goes in at the first
// frame boundary. It returns how many bytes went to the client.
func (c *wsConn) relayFrames(p []byte, write func([]byte) error) (int, error) {
	out := 0
	for len(p) > 0 {
		ping := c.fw.pingWanted.Load()
		n := c.frames.feed(p, ping)
		if n > 0 {
			// Whole frames before one over the limit still go out.
			if err := write(p[:n]); err != nil {
				return out, err
			}
			out += n
		}
		if c.frames.tooBig {
			return out, c.backendTooBig()
		}
		p = p[n:]
		if ping && c.mayPing() {
			if err := write(pingFrame()); err != nil {
				return out, err
			}
			c.pinged()
		}
		if n == 0 {
			break
		}
	}
	return out, nil
}

// backendTooBig logs a backend frame over MaxFrameBytes and returns the
// error that ends the connection: nothing bounds a backend either
// (base/base#2655), and there is no boundary left to send a close at.
func (c *wsConn) backendTooBig() error {
	c.s.log.Warn("backend frame over the limit; closing the connection",
		"pool", c.pool.Name, "backend", c.be.ID(), "max_frame_bytes", c.pool.MaxFrameBytes)
	return errBackendFrameTooBig
}
