package wsession

import (
	"errors"
	"time"
)

// FinTimeout bounds how long one half stays open after the other ended
// cleanly, so a peer that never closes its half cannot pin the connection
// (HAProxy's "timeout client-fin").
const FinTimeout = 10 * time.Second

// Kind is what a driver does for an Action.
type Kind uint8

// Kinds of Action. A driver switches on the Kind and nothing else: the
// session has already recorded the reason and moved its own state.
const (
	// Nothing: go on as before.
	Nothing Kind = iota
	// Ping: a ping is due at the next backend->client frame boundary;
	// make the backend reader look at the session (BackendControl).
	Ping
	// Close: a close frame (Code) is due at the next backend->client
	// frame boundary; make the backend reader look, as for Ping.
	Close
	// HalfClose: a stream ended cleanly; shut Side's write half down (a
	// TLS close_notify first where there is TLS) and give the other half
	// FinTimeout to end too.
	HalfClose
	// Linger: begin the lingering close (RFC 6455 §7.1.1): close the
	// backend, shut the client's write half down after what is queued to
	// it, and read and drop what the client sends until Tick or Discard
	// ends it.
	Linger
	// End: close both sockets now; with Flush, once what is queued to the
	// client went out (then Finish with ReasonKeep).
	End
)

// Action is one decision of the session about the end of a connection.
type Action struct {
	Kind   Kind
	Side   Side   // HalfClose: whose write half shuts down
	Code   int    // Close: the close code due
	Reason Reason // End: the reason recorded first
	Flush  bool   // End: after the client's queue
}

// Touch records activity at now (unix nanos): a byte read either way.
func (s *Session) Touch(now int64) { s.last.Store(now) }

// LastActivity is the unix nanos of the last Touch (or Init).
func (s *Session) LastActivity() int64 { return s.last.Load() }

// Finish decides how the connection ends for reason at now: a lingering
// close when the client was sent a close frame and may still be sending
// (lingerStart's rule), unless force or reason is one that closes at once
// (Forced); Nothing while lingering is already under way and nothing
// forces the end; End otherwise. The reason is recorded first.
func (s *Session) Finish(reason Reason, force bool, now int64) Action {
	s.SetReason(reason)
	if force || reason.Forced() {
		s.linger.CompareAndSwap(lingerOn, lingerOver)
		return Action{Kind: End, Reason: s.Reason()}
	}
	switch lingering, started := s.lingerStart(now); {
	case started:
		return Action{Kind: Linger}
	case lingering:
		return Action{}
	}
	return Action{Kind: End, Reason: s.Reason()}
}

// EOF decides what a clean end of side's stream (a FIN read) means: the
// client's is passed on to the backend (HalfClose); the backend's after
// edge sent the client a close frame ends the connection once that frame
// is out, the server closing TCP first (RFC 6455 §7.1.1); otherwise it is
// passed on to the client. While lingering the backend is already gone:
// Nothing.
func (s *Session) EOF(side Side) Action {
	if side == SideClient {
		s.SetReason(ReasonClientClosed)
		s.clientEOF.Store(true)
		return Action{Kind: HalfClose, Side: SideBackend}
	}
	if s.lingering() {
		return Action{}
	}
	s.backendEOF.Store(true)
	s.SetReason(ReasonBackendClosed)
	if s.closeSent {
		return Action{Kind: End, Reason: s.Reason(), Flush: true}
	}
	return Action{Kind: HalfClose, Side: SideClient}
}

// WriteFailed decides what a failed write to side at now means: a write
// that timed out ends the connection (a peer that stopped reading,
// traefik#10627); a failed write to the client ends it; a failed write to
// the backend after the client was sent a close frame (a departing
// backend) lingers instead of resetting the client.
func (s *Session) WriteFailed(side Side, err error, now int64) Action {
	var t interface{ Timeout() bool }
	switch {
	case errors.As(err, &t) && t.Timeout():
		return s.Finish(ReasonWriteTimeout, true, now)
	case side == SideClient:
		return s.Finish(ReasonClientClosed, true, now)
	}
	return s.Finish(ReasonBackendClosed, false, now)
}

// Tick decides what the clock calls for at now: the end of a lingering
// close (its bound or the idle timeout), the idle timeout (nothing read either way for IdleTimeout), a
// write stall (queuedSince, the unix nanos since which the driver holds
// bytes a peer did not take, 0 for none, older than WriteTimeout), the
// ping timeout (first a close 1011 at the next boundary, BackendControl's;
// still open at the next Tick: the end), or a ping due.
func (s *Session) Tick(now, queuedSince int64) Action {
	idle := s.cfg.IdleTimeout > 0 && now-s.last.Load() >= int64(s.cfg.IdleTimeout)
	if s.lingering() {
		// The idle timeout bounds a lingering close too: Deadline gives
		// the client reader the earlier of the two.
		if now >= s.lingerUntil.Load() || idle {
			s.lingerEnd()
			return Action{Kind: End, Reason: s.Reason()}
		}
		return Action{}
	}
	if idle {
		return s.Finish(ReasonIdleTimeout, true, now)
	}
	if a, ok := s.expire(now); ok {
		return a
	}
	if wt := s.cfg.WriteTimeout; wt > 0 && queuedSince != 0 && now-queuedSince >= int64(wt) {
		return s.Finish(ReasonWriteTimeout, true, now)
	}
	due, timedOut := s.pingCheck(now)
	switch {
	case timedOut:
		if s.fw.pingExpired.Swap(true) {
			// The close 1011 did not get out in time.
			return s.Finish(ReasonPingTimeout, true, now)
		}
		return Action{Kind: Close, Code: ClosePingTimeout}
	case due:
		s.fw.pingWanted.Store(true)
		return Action{Kind: Ping}
	}
	return Action{}
}

// Deadline is the next moment, in unix nanos, at which Tick may have
// something to say to the reader of side (0: none): the idle timeout for
// both, the end of lingering for the client reader, the heartbeat for the
// backend reader. A close request the backend reader has not acted on
// makes its deadline now-or-past (1), so a reader about to wait does not.
func (s *Session) Deadline(side Side) int64 {
	dl := int64(0)
	earliest := func(t int64) {
		if t != 0 && (dl == 0 || t < dl) {
			dl = t
		}
	}
	if it := s.cfg.IdleTimeout; it > 0 {
		earliest(s.last.Load() + int64(it))
	}
	if side == SideClient {
		earliest(s.lingerDeadline())
		return dl
	}
	if !s.closeNoticed && s.Requested() {
		return 1
	}
	earliest(s.pingDeadline())
	earliest(s.expiryDeadline())
	return dl
}

// NextTick is the earliest moment, in unix nanos, at which Tick may have
// something to say given the session's state now and queuedSince (as
// for Tick); 0: nothing until that state changes. A scheduler that asks
// Tick again at NextTick, and at once after anything else touched the
// session (bytes, a written control frame, a close request), decides
// exactly what asking at every sweep does: the readiness splice's
// sweeper visits a connection only then. Every deadline Tick checks is
// here: idle, the end of lingering, a write stall, the heartbeat.
func (s *Session) NextTick(queuedSince int64) int64 {
	var next int64
	earliest := func(t int64) {
		if t != 0 && (next == 0 || t < next) {
			next = t
		}
	}
	if it := s.cfg.IdleTimeout; it > 0 {
		earliest(s.last.Load() + int64(it))
	}
	if s.lingering() {
		earliest(s.lingerUntil.Load())
		return next
	}
	if wt := s.cfg.WriteTimeout; wt > 0 && queuedSince != 0 {
		earliest(queuedSince + int64(wt))
	}
	earliest(s.pingDeadline())
	earliest(s.expiryDeadline())
	return next
}

// SetExpiry makes the connection close at, unix nanos (0: never), with
// the Config's ExpiryCode: the end of the token it was opened with, plus
// the pool's grace and its share of the spread. Call it before a driver
// runs the session.
func (s *Session) SetExpiry(at int64) { s.expiry.Store(at) }

// ExpireNow brings the expiry forward to now, for a connection whose
// close was requested for its token (a revocation): one that cannot
// reach a frame boundary (a backend frame that never ends) is then ended
// FinTimeout later, as at its token's end, not at an expiry hours away.
func (s *Session) ExpireNow(now int64) {
	for {
		cur := s.expiry.Load()
		if cur != 0 && cur <= now || s.expiry.CompareAndSwap(cur, now) {
			return
		}
	}
}

// Expiry is what SetExpiry set (0: none).
func (s *Session) Expiry() int64 { return s.expiry.Load() }

// expire is the expiry's part of Tick: at the expiry a close with
// ExpiryCode is requested at the next frame boundary, like a drain's; a
// connection still open FinTimeout later (a backend frame that never
// ends, so no boundary comes, or a client that never answers the close)
// is ended.
func (s *Session) expire(now int64) (Action, bool) {
	exp := s.expiry.Load()
	if exp == 0 || now < exp {
		return Action{}, false
	}
	if s.Request(s.cfg.ExpiryCode, s.cfg.ExpiryReason) {
		return Action{Kind: Close, Code: s.cfg.ExpiryCode}, true
	}
	// Also once the close frame is out: a client that never answers it
	// must not keep an expired or revoked token's connection open.
	if now >= exp+int64(FinTimeout) {
		return s.Finish(s.cfg.ExpiryReason, true, now), true
	}
	return Action{}, false
}

// expiryDeadline is the expiry's next moment for NextTick and Deadline:
// the expiry itself, then the bound on reaching a frame boundary.
func (s *Session) expiryDeadline() int64 {
	exp := s.expiry.Load()
	switch {
	case exp == 0:
		return 0
	case s.Requested() || s.closeOut.Load():
		return exp + int64(FinTimeout)
	}
	return exp
}

// Discard accounts for n client bytes read and dropped while lingering:
// past LingerBytes lingering ends (End), else Nothing. Client reader only.
func (s *Session) Discard(n int) Action {
	s.lingered += int64(n)
	if s.lingered > s.cfg.LingerBytes {
		s.lingerEnd()
		return Action{Kind: End, Reason: s.Reason()}
	}
	return Action{}
}

// Closing reports a connection on its way out: a close requested or sent
// to the client, or lingering. Such a connection cannot move to another
// process (its end is decided here).
func (s *Session) Closing() bool {
	return s.Requested() || s.closeOut.Load() || s.linger.Load() != lingerNone
}
