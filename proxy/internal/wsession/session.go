// Package wsession is the policy of one spliced WebSocket connection,
// without any I/O: frame tracking in both directions, control frames only
// at frame boundaries, pings and the ping timeout, frame and message
// limits (a compressed client message counted inflated, deflate.go and
// inflate.go), per-connection message and byte rates (rate.go), the
// client's pongs to edge's pings consumed, not forwarded (pong.go), close
// requests (drain, a departing backend, an operator), the
// close code and side edge observed, the lingering close after a close
// frame, and the close reason.
//
// A driver (proxy's goroutine splice or its readiness-driven splice) reads
// the sockets, feeds the bytes in and carries out what comes back: bytes
// to forward, a control frame to write at a boundary, the end of the
// connection. Time is passed in as unix nanoseconds; the session keeps no
// clock, starts nothing and allocates nothing per message.
//
// The session also decides how a connection ends (ending.go): a driver
// reports what happened (Tick, EOF, WriteFailed, Finish) and carries out
// the Action it gets back, one switch on its Kind, so both drivers end a
// connection the same way.
//
// Ownership: the backend->client half (FromBackend, BackendControl,
// ControlWritten) belongs to whoever reads the backend, the
// client->backend half (FromClient, Discard) to whoever reads the client;
// everything else may be called from any goroutine.
package wsession

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgelb/edge/internal/wswire"
)

// Config is the per-pool part of a session, filled once (lingering
// defaults applied) and shared by every connection of the pool.
type Config struct {
	MaxFrameBytes   int64         // payload of one frame, either way; 0: none
	MaxMessageBytes int64         // data payload of one client message; 0: none
	PingInterval    time.Duration // client silence before a ping; 0: no pings
	PingTimeout     time.Duration // silence after a ping before the end; 0: none
	LingerTimeout   time.Duration // lingering close; <= 0: none
	LingerBytes     int64         // client bytes dropped while lingering, at most
	IdleTimeout     time.Duration // nothing read either way; 0: none
	WriteTimeout    time.Duration // bytes a peer does not take (Tick's queuedSince); 0: none

	// Inflate, when not nil, counts the inflated size of the client's
	// permessage-deflate messages against MaxMessageBytes (the deflate
	// policy "limit") on connections that negotiated it (DeflateOn), with
	// counting inflaters from this pool.
	Inflate *Inflaters

	// Rate limits what the client sends per second (rate.go).
	Rate Rate

	// ExpiryCode and ExpiryReason are the close a connection gets when
	// its Expiry passes (the token it was opened with expired): the code
	// goes to the client between two frames, the reason is recorded.
	ExpiryCode   int
	ExpiryReason Reason
}

// FrameAware reports whether c asks for frame-aware mode: client frames
// or the heartbeat followed. Without it the splice is opaque.
func (c *Config) FrameAware() bool {
	return c.MaxFrameBytes > 0 || c.MaxMessageBytes > 0 || c.PingInterval > 0 || c.Rate.On()
}

// tracksClient reports whether client frames are followed (a frame or a
// message limit, or a rate: messages are counted at their first frame).
func (c *Config) tracksClient() bool {
	return c.MaxFrameBytes > 0 || c.MaxMessageBytes > 0 || c.Rate.On()
}

// Linger states.
const (
	lingerNone = iota // not lingering (yet)
	lingerOn          // the backend is gone, the client's input is discarded
	lingerOver        // lingering ended: the client socket closes now
)

// Session is the state of one connection. Its zero value is not ready:
// use Init.
type Session struct {
	cfg *Config

	// Backend->client half.
	b2c          tracker
	closeSent    bool // a close frame went (or is going) to the client
	closeNoticed bool // a close request was seen by the backend reader
	ctl          [4]byte

	closeCode atomic.Int32 // requested close code; 0: none
	// backendEOF: the backend's stream ended, so no ping can go out any
	// more and the heartbeat stops (both drivers alike: the goroutine
	// splice has no backend reader left to keep it). Beside closeCode, in
	// the same word.
	backendEOF atomic.Bool
	// expiry is when the connection must close with the Config's
	// ExpiryCode, unix nanos (0: never): set by SetExpiry before the
	// drivers start; ExpireNow brings it forward on a revocation.
	expiry atomic.Int64
	last   atomic.Int64 // unix nanos of the last byte read either way (Touch)

	mu sync.Mutex
	// reason is the first reason recorded; closeBy and closeAt the first
	// close frame edge saw or sent (closeSeen).
	reason    Reason
	closeBy   Side
	closeAt   int
	closeSeen bool

	fw *aware // frame-aware mode; nil: opaque

	// lingering close. closeOut: the client has a close frame; clientEOF:
	// the client's input ended. lingered is the client reader's.
	closeOut, clientEOF atomic.Bool
	linger              atomic.Int32
	lingerUntil         atomic.Int64
	lingered            int64
}

// aware is the frame-aware part of a session; a connection of a pool
// without limits or pings has none.
type aware struct {
	// Client->backend half.
	c2b    tracker
	tooBig bool
	mask   [8]byte
	z      zcount
	rate   buckets

	// endAfterClose: end once the close frame to the client is out (a
	// client frame was over the limit).
	endAfterClose atomic.Bool

	// Heartbeat, in unix nanos. lastClient is the last byte read from the
	// client, pingSent the last ping written, awaitSince the first ping
	// written after lastClient (0: none). pingWanted asks the backend
	// reader for a ping at its next frame boundary; pingExpired says the
	// ping timeout passed (the readiness splice's sweeper sets it).
	lastClient  atomic.Int64
	pingSent    atomic.Int64
	awaitSince  atomic.Int64
	pingWanted  atomic.Bool
	pingExpired atomic.Bool

	// Pongs (pong.go). edgePing: edge's ping is out and no client pong
	// answered it yet (set by the backend reader before the ping is
	// written, cleared by the client reader). backendPings counts the
	// backend's pings (backend reader); pongedAt is its value when a
	// client pong last went to the backend (client reader): they differ
	// while a backend ping may be waiting for its pong. pongBlind: the
	// client stream's boundaries are unknown to the pong check (an
	// adopted session whose client frames were not followed), so every
	// pong goes on.
	edgePing     atomic.Bool
	backendPings atomic.Uint32
	pongedAt     uint32
	pongBlind    bool
}

// Init readies s for a connection of a pool with cfg, opened at now.
func (s *Session) Init(cfg *Config, now int64) {
	s.cfg = cfg
	s.last.Store(now)
	if !cfg.FrameAware() {
		return
	}
	f := &aware{}
	f.lastClient.Store(now)
	if m := cfg.MaxFrameBytes; m > 0 {
		f.c2b.limit = uint64(m)
		s.b2c.limit = uint64(m)
	}
	if m := cfg.MaxMessageBytes; m > 0 {
		f.c2b.msgLimit = uint64(m)
	}
	s.fw = f
}

// FrameAware reports whether the session follows limits or pings.
func (s *Session) FrameAware() bool { return s.fw != nil }

// SetReason records why the connection ends; the first reason wins.
func (s *Session) SetReason(r Reason) {
	s.mu.Lock()
	if s.reason == "" {
		s.reason = r
	}
	s.mu.Unlock()
}

// Reason is the reason recorded first.
func (s *Session) Reason() Reason {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason
}

// NoteClose records the first close frame edge saw or sent; later ones
// (the other side's answer) do not count.
func (s *Session) NoteClose(side Side, code int) {
	s.mu.Lock()
	if !s.closeSeen {
		s.closeSeen, s.closeBy, s.closeAt = true, side, code
	}
	s.mu.Unlock()
}

// ClosedBy says who closed first and with which code (0: no close frame
// was seen, then the side whose stream ended first, edge for its own
// timeouts and shutdown).
func (s *Session) ClosedBy(reason Reason) (Side, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closeSeen {
		return s.closeBy, s.closeAt
	}
	return reason.Side(), 0
}

// Request asks for a close frame with code to the client at the next
// backend->client frame boundary, for reason. It reports whether this was
// the first request: the driver then wakes the backend reader.
func (s *Session) Request(code int, reason Reason) bool {
	if !s.closeCode.CompareAndSwap(0, int32(code)) {
		return false
	}
	s.SetReason(reason)
	return true
}

// Requested reports whether a close was requested.
func (s *Session) Requested() bool { return s.closeCode.Load() != 0 }

// CloseOut reports that the client was sent a close frame.
func (s *Session) CloseOut() bool { return s.closeOut.Load() }

// Verdict says what to do with bytes the session consumed.
type Verdict uint8

// Verdicts of FromBackend.
const (
	Forward Verdict = iota // write the bytes to the other side
	Drop                   // read and drop: the close handshake is done
	TooBig                 // write the bytes, then end: a frame over the limit follows
)

// Head consumes backend bytes that came behind the 101 and returns how
// many go out with it; stop: a frame over the limit, or one that broke a
// rule of strict.go, follows them, and the connection ends.
func (s *Session) Head(p []byte) (n int, stop bool) {
	c := counting{frames: -1, budget: -1}
	n = s.b2c.feedWith(p, false, &c)
	s.noteBackendPings(c.pings)
	s.noteBackendClose()
	if s.b2c.bad {
		s.SetReason(ReasonBackendProtocolError)
	}
	return n, s.b2c.stopped()
}

// FromBackend consumes a prefix of the backend bytes p and says what to
// do with its first n bytes. It stops at the first frame boundary when a
// control frame may be due there; the driver then asks BackendControl and
// feeds the rest. At a frame that broke a rule of strict.go it stops
// before the frame and asks for a close 1014 (bad gateway) to the
// client, which BackendControl then gives, ending the connection.
func (s *Session) FromBackend(p []byte) (n int, v Verdict) {
	if s.closeSent {
		// After a close frame to the client nothing more goes to it; the
		// backend's bytes are read and dropped until it closes.
		return len(p), Drop
	}
	stop := s.Requested() || s.fw != nil && s.fw.pingWanted.Load()
	c := counting{frames: -1, budget: -1}
	n = s.b2c.feedWith(p, stop, &c)
	s.noteBackendPings(c.pings)
	s.noteBackendClose()
	switch {
	case s.b2c.tooBig:
		return n, TooBig
	case s.b2c.bad:
		s.Request(CloseBadGateway, ReasonBackendProtocolError)
	}
	return n, Forward
}

func (s *Session) noteBackendClose() {
	if code, ok := s.b2c.newClose(); ok {
		s.NoteClose(SideBackend, code)
	}
}

// Fault names the rule of strict.go a frame broke, the client's
// (fromClient) or the backend's; "" when none did. For the log line of
// the connection's end.
func (s *Session) Fault() (fault string, fromClient bool) {
	if f := s.fw; f != nil && f.c2b.bad {
		return f.c2b.fault.String(), true
	}
	return s.b2c.fault.String(), false
}

// Control is a control frame to write to the client now, and what follows.
type Control struct {
	// Frame, when not nil, goes to the client now: a close with Code, or
	// a ping. It is valid until the next call into the session.
	Frame []byte
	Code  int
	// End: end the connection now (after Frame), with the reason already
	// recorded; Flush: once what is queued to the client went out.
	End, Flush bool
	// Reason, with End and without Flush: the reason to Finish with
	// (ReasonKeep: the one recorded stands).
	Reason Reason
}

// BackendControl says, between two reads of the backend or at a frame
// boundary FromBackend stopped at, whether a control frame goes to the
// client now: the close 1011 of a missed ping timeout, a requested close
// (or none when the backend's own close already went through), else a
// wanted ping. Control frames never land inside a frame (RFC 6455 §5.4);
// without a known boundary the connection ends. After writing Frame, the
// driver calls ControlWritten.
func (s *Session) BackendControl() Control {
	if s.fw != nil && s.fw.pingExpired.Load() {
		return s.pingTimeoutControl()
	}
	if code := s.closeCode.Load(); code != 0 && !s.closeSent {
		return s.closeControl(int(code))
	}
	if s.mayPing() {
		// Marked before the write: the client's pong may be read before
		// ControlWritten runs.
		s.fw.edgePing.Store(true)
		return Control{Frame: wswire.Ping}
	}
	return Control{}
}

func (s *Session) closeControl(code int) Control {
	s.closeNoticed = true
	var c Control
	switch t := &s.b2c; {
	case t.broken:
		// No known boundary: closing is the only safe move.
		return Control{End: true}
	case t.closeSeen && t.atBoundary():
		// The backend is already closing and its close frame has gone
		// through whole; do not send a second close.
		s.closeSent = true
		s.closeOut.Store(true)
	case t.closeSeen && !t.bad:
		// The backend's close frame is still passing through: let it
		// finish before anything else is decided.
		return c
	case t.atBoundary():
		s.closeSent = true
		c.Frame, c.Code = wswire.CloseFrame(&s.ctl, code), code
		if code == ClosePolicy && s.Reason() == ReasonRateLimited {
			c.Frame = rateLimitedClose
		}
	default:
		return c
	}
	if s.b2c.bad || s.fw != nil && s.fw.endAfterClose.Load() {
		// A backend frame broke a rule, or a client frame was over the
		// limit or broke one, and the client has (or is getting) its
		// close: nothing more is exchanged.
		c.End, c.Flush = true, true
	}
	return c
}

// mayPing reports whether a ping can go to the client now: one was asked
// for, the backend->client stream is between two frames, and no close
// frame went or is about to go (RFC 6455 §5.5.1).
func (s *Session) mayPing() bool {
	return s.fw != nil && s.fw.pingWanted.Load() && !s.closeSent && !s.b2c.closeSeen &&
		!s.Requested() && s.b2c.atBoundary()
}

// ControlWritten records that the frame of c was written at now.
func (s *Session) ControlWritten(c Control, now int64) {
	if c.Code != 0 {
		s.NoteClose(SideEdge, c.Code)
		s.closeOut.Store(true)
		return
	}
	f := s.fw
	f.pingWanted.Store(false)
	f.pingSent.Store(now)
	if a := f.awaitSince.Load(); a <= f.lastClient.Load() {
		f.awaitSince.Store(now)
	}
}

// pingTimeoutControl is a close 1011 for a client that missed its ping
// timeout when the backend->client stream is between two frames (the
// connection then ends lingering once it is out); otherwise the end at
// once. Once the 1011 is out, the next Tick that finds the timeout still
// passed ends the connection.
func (s *Session) pingTimeoutControl() Control {
	if s.closeSent || s.b2c.closeSeen || !s.b2c.atBoundary() {
		return Control{End: true, Reason: ReasonPingTimeout}
	}
	s.SetReason(ReasonPingTimeout)
	s.closeSent = true
	s.fw.pingExpired.Store(false)
	return Control{Frame: wswire.CloseFrame(&s.ctl, ClosePingTimeout), Code: ClosePingTimeout, End: true, Flush: true}
}

// Client is what to do with client bytes.
type Client struct {
	// N bytes of the input go to the backend.
	N int
	// CloseBackend: a masked close 1001 (CloseFrame) follows them, the
	// backend's stream being between two frames.
	CloseBackend bool
	// Wake: a close to the client was just requested; the driver wakes
	// the backend reader.
	Wake bool
	// Pause, when not 0, is the unix nano time before which the client
	// must not be read: it is over its rate under Rate.Slow.
	Pause int64
	// Drop, when not 0: the Drop bytes after the first N are a client
	// pong answering edge's ping, consumed here (pong.go); the bytes
	// after them were not looked at: the driver feeds them next. When
	// Drop is 0, all of the input was consumed.
	Drop int
}

// FromClient consumes the client bytes p read at now. At the header of a
// frame over MaxFrameBytes, or of the frame that takes a message over
// MaxMessageBytes, it requests a close 1009 (message too big, RFC 6455
// §7.4.1) to the client; at a frame that broke a rule of strict.go, a
// close 1002 (protocol error); over the rate, a close 1008 (rate.go). In
// each case the frame's bytes stay back, the backend's stream ends with a
// masked close 1001 when that falls between two frames, and nothing more
// goes on: the payload is never buffered, and the connection ends once
// the client's close is out.
func (s *Session) FromClient(p []byte, now int64) Client {
	f := s.fw
	if f == nil {
		return Client{N: len(p)}
	}
	f.lastClient.Store(now)
	if f.pongBlind {
		// Restored without the client's boundaries: nothing to follow.
		return Client{N: len(p)}
	}
	if f.tooBig {
		return Client{}
	}
	k := s.pongCounting()
	q, cut := s.budget(p, &k, now)
	n := f.c2b.feedWith(q, false, &k)
	s.notePongs(&k)
	if code, ok := f.c2b.newClose(); ok {
		s.NoteClose(SideClient, code)
	}
	switch {
	case f.c2b.stopped():
		return s.refuse(Client{N: n, CloseBackend: !f.c2b.split && !f.c2b.broken})
	case k.rateOver || cut && n == len(q):
		return s.rateClose(n, k.frames, f.c2b.atBoundary() && !k.rateSplit, now)
	case s.cfg.Rate.On():
		// The pong edge consumes is still charged: a client frame.
		return dropped(s.charge(n, k.frames, now), &k, n)
	}
	return dropped(Client{N: n}, &k, n)
}

// refuse ends the client's half at a frame over a limit or one that broke
// a rule: c (its first N bytes go on, CloseBackend) with the close to the
// client requested.
func (s *Session) refuse(c Client) Client {
	f := s.fw
	f.tooBig = true
	f.endAfterClose.Store(true)
	reason, code := ReasonFrameTooBig, CloseMessageTooBig
	switch {
	case f.c2b.bad:
		reason, code = ReasonProtocolError, CloseProtocolError
	case f.z.bad:
		reason, code = ReasonDeflateError, CloseInvalidData
	case f.c2b.inflated:
		reason = ReasonMessageTooBigInflated
	case f.c2b.tooBigMsg:
		reason = ReasonMessageTooBig
	}
	c.Wake = s.Request(code, reason)
	f.z.release(s.cfg.Inflate)
	return c
}

// DeflateOn records that the connection negotiated permessage-deflate
// (the backend's 101 accepted it): under a Config with Inflate, the
// client's compressed messages are counted inflated from now on.
func (s *Session) DeflateOn() {
	s.b2c.rsv = max(s.b2c.rsv, rsvDeflate) // rsvAny stays (ForeignExtension)
	if f := s.fw; f != nil {
		f.c2b.rsv = max(f.c2b.rsv, rsvDeflate)
		f.z.negotiated = true
		f.z.on = s.cfg.Inflate != nil && f.c2b.msgLimit > 0
	}
}

// ForeignExtension records that the connection negotiated an extension
// edge does not know (a pool that passes extension offers as they are):
// the RSV bits it may set are its own, so they are not judged either way
// (strict.go); everything else still is.
func (s *Session) ForeignExtension() {
	s.b2c.rsv = rsvAny
	if f := s.fw; f != nil {
		f.c2b.rsv = rsvAny
	}
}

// Deflate reports whether permessage-deflate was negotiated and whether
// the client's messages are counted inflated.
func (s *Session) Deflate() (negotiated, counted bool) {
	if f := s.fw; f != nil {
		return f.z.negotiated, f.z.on
	}
	return false, false
}

// Inflated returns the wire payload bytes of the client's compressed
// messages and what they inflated to (up to the limit), so far.
func (s *Session) Inflated() (wire, inflated uint64) {
	if f := s.fw; f != nil {
		return f.z.wire, f.z.inflated
	}
	return 0, 0
}

// MidMessage reports a compressed client message under way, whose
// counting state is mid-stream: it cannot move to another process.
// Client reader only (or with it stopped).
func (s *Session) MidMessage() bool { return s.fw != nil && s.fw.z.inFlight() }

// MaskedClose returns the masked close 1001 FromClient asked for, masked
// with mask (the driver's random key, RFC 6455 §5.3). Client reader only.
func (s *Session) MaskedClose(mask [4]byte) []byte {
	return wswire.MaskedCloseFrame(&s.fw.mask, CloseGoingAway, mask)
}

// pingCheck says what the heartbeat calls for at now: a ping (the client
// has sent nothing for PingInterval since its last byte or our last ping),
// or the end (nothing at all from the client within PingTimeout of the
// first unanswered ping: a half-open socket, traefik#10627, traefik#8668).
func (s *Session) pingCheck(now int64) (due, timedOut bool) {
	f, iv := s.fw, s.cfg.PingInterval
	if f == nil || iv <= 0 || s.backendEOF.Load() {
		return false, false
	}
	last := f.lastClient.Load()
	if to := s.cfg.PingTimeout; to > 0 {
		if a := f.awaitSince.Load(); a > last && now-a >= int64(to) {
			return false, true
		}
	}
	return !f.pingWanted.Load() && now-max(last, f.pingSent.Load()) >= int64(iv), false
}

// pingDeadline is the next moment the heartbeat may have something to say, in
// unix nanos; 0: none.
func (s *Session) pingDeadline() int64 {
	f, iv := s.fw, s.cfg.PingInterval
	if f == nil || iv <= 0 || s.backendEOF.Load() {
		return 0
	}
	last := f.lastClient.Load()
	next := int64(0)
	if !f.pingWanted.Load() {
		next = max(last, f.pingSent.Load()) + int64(iv)
	}
	if to := s.cfg.PingTimeout; to > 0 {
		if a := f.awaitSince.Load(); a > last && (next == 0 || a+int64(to) < next) {
			next = a + int64(to)
		}
	}
	return next
}

// lingerStart begins a lingering close at now, and reports whether the
// connection lingers and whether it began just now (Finish then says
// Linger: the driver closes the backend and shuts the client's write half
// down).
//
// Once edge has sent the client a close frame, the client may still be
// sending (the rest of a frame over the limit, messages queued before it
// read the close). Closing a socket with unread input makes the kernel
// send a reset instead of a FIN, and the client's stack may drop the close
// frame it had already received (Node ws then reports 1006). So the
// connection closes the way RFC 6455 §7.1.1 and nginx's lingering close
// do: the backend is closed, the client's write half is shut down after
// the queued close frame, and the client's input is read and discarded
// until it closes, LingerBytes were discarded or LingerTimeout passed.
func (s *Session) lingerStart(now int64) (lingering, started bool) {
	switch s.linger.Load() {
	case lingerOn:
		return true, false
	case lingerOver:
		return false, false
	}
	d := s.cfg.LingerTimeout
	if !s.closeOut.Load() || s.clientEOF.Load() || d <= 0 {
		return false, false
	}
	s.lingerUntil.Store(now + int64(d))
	if !s.linger.CompareAndSwap(lingerNone, lingerOn) {
		return s.linger.Load() == lingerOn, false
	}
	return true, true
}

// lingering reports a lingering close under way.
func (s *Session) lingering() bool { return s.linger.Load() == lingerOn }

// lingerEnd ends lingering: the client socket closes now.
func (s *Session) lingerEnd() { s.linger.Store(lingerOver) }

// lingerDeadline is when lingering ends, in unix nanos; 0 when not lingering.
func (s *Session) lingerDeadline() int64 {
	if !s.lingering() {
		return 0
	}
	return s.lingerUntil.Load()
}
