package wsession

// Reason says why a WebSocket connection ended: the access log's "reason"
// and the Observer's close reason (proxy.CloseReason is this type). The
// first reason recorded for a connection wins. The reasons declared here
// are the session's own: a stream that ended, a timeout, a limit. Why edge
// itself asks a connection to close (a drain, a departing backend, a
// restart, a shutdown) is the proxy's vocabulary, passed in to Request
// and Finish as opaque names.
type Reason string

// Close reasons the session decides or the streams give.
const (
	ReasonClientClosed       Reason = "client_closed"         // the client ended its stream (FIN, reset, failed write)
	ReasonBackendClosed      Reason = "backend_closed"        // the backend ended its stream
	ReasonIdleTimeout        Reason = "idle_timeout"          // nothing moved for the pool's idle timeout
	ReasonWriteTimeout       Reason = "write_timeout"         // a write did not complete in the write timeout
	ReasonFinTimeout         Reason = "fin_timeout"           // one side closed, the other did not within 10 s
	ReasonPingTimeout        Reason = "ping_timeout"          // the client answered no ping: close 1011
	ReasonFrameTooBig        Reason = "frame_too_big"         // a client frame over max_frame_bytes: close 1009
	ReasonMessageTooBig      Reason = "message_too_big"       // a client message over max_message_bytes: close 1009
	ReasonBackendFrameTooBig Reason = "backend_frame_too_big" // a backend frame over max_frame_bytes
	// ReasonMessageTooBigInflated: a compressed client message that
	// inflates past max_message_bytes (deflate policy limit): close 1009.
	ReasonMessageTooBigInflated Reason = "message_too_big_inflated"
	// ReasonDeflateError: a compressed client message that is no DEFLATE
	// stream (deflate policy limit): close 1007.
	ReasonDeflateError Reason = "deflate_error"
	// ReasonRateLimited: a client over its message or byte rate: close 1008.
	ReasonRateLimited Reason = "rate_limited"
	// ReasonProtocolError: a client frame that broke a rule of RFC 6455
	// or RFC 7692 (strict.go): close 1002, the frame not forwarded.
	ReasonProtocolError Reason = "protocol_error"
	// ReasonBackendProtocolError: a backend frame that broke one: close
	// 1014 (bad gateway) to the client, the frame not forwarded.
	ReasonBackendProtocolError Reason = "backend_protocol_error"
	ReasonError                Reason = "error" // a socket error the splice could not attribute
)

// ReasonKeep closes without recording a reason of its own: the one
// already recorded stands.
const ReasonKeep Reason = ""

// Reasons lists every Reason declared here; the proxy adds its own.
func Reasons() []Reason {
	return []Reason{
		ReasonClientClosed, ReasonBackendClosed, ReasonIdleTimeout, ReasonWriteTimeout, ReasonFinTimeout,
		ReasonPingTimeout, ReasonFrameTooBig, ReasonMessageTooBig,
		ReasonBackendFrameTooBig, ReasonMessageTooBigInflated, ReasonDeflateError, ReasonRateLimited,
		ReasonProtocolError, ReasonBackendProtocolError, ReasonError,
	}
}

// validName reports whether r can be a reason at all: a short name of
// lower-case letters and underscores, as every reason of the session and
// the proxy is. A restored session checks it; which names are known is
// its caller's to check.
func validName(r Reason) bool {
	if len(r) == 0 || len(r) > 32 {
		return false
	}
	for _, b := range []byte(r) {
		if (b < 'a' || b > 'z') && b != '_' {
			return false
		}
	}
	return true
}

// Forced reports the session's reasons that close both sockets at once: a
// timeout, a dead client. Every other close of a connection whose client
// was sent a close frame lingers (the caller forces its own, Finish).
func (r Reason) Forced() bool {
	switch r {
	case ReasonIdleTimeout, ReasonWriteTimeout, ReasonFinTimeout, ReasonPingTimeout, ReasonClientClosed, ReasonError:
		return true
	}
	return false
}

// Side says who closed a WebSocket first: the side whose close frame edge
// saw first or, with no close frame seen, whose stream ended first.
type Side string

// Close sides.
const (
	SideClient  Side = "client"
	SideBackend Side = "backend"
	SideEdge    Side = "edge"
)

// Side is the Side of a connection that ended for r without any close
// frame seen.
func (r Reason) Side() Side {
	switch r {
	case ReasonClientClosed:
		return SideClient
	case ReasonBackendClosed:
		return SideBackend
	}
	return SideEdge
}

// WebSocket close codes edge sends or reports (RFC 6455 §7.4.1 and the
// IANA registry).
const (
	CloseGoingAway      = 1001 // drain
	CloseProtocolError  = 1002 // a client frame that broke a rule of RFC 6455 or RFC 7692
	CloseNoStatus       = 1005 // a close frame without a status code (§7.1.5)
	CloseInvalidData    = 1007 // a compressed message that is no DEFLATE stream
	ClosePolicy         = 1008 // a client over its message or byte rate
	CloseMessageTooBig  = 1009 // a client frame or message over the limit
	ClosePingTimeout    = 1011 // a missed ping timeout, as python-websockets does
	CloseServiceRestart = 1012 // a backend that left its pool
	CloseBadGateway     = 1014 // a backend frame that broke a rule of RFC 6455 or RFC 7692
)
