package proxy

import (
	"net/http"
	"strconv"

	"github.com/edgelb/edge/proxy/internal/wsession"
)

// CloseReason says why a WebSocket connection ended: the access log's
// "reason" and Observer.ConnClosed's reason. The reasons a stream's end,
// a timeout or a limit gives are declared with the session policy that
// records them (internal/wsession); why edge itself asks a connection to
// close (a drain, a backend that left, an operator, a restart, a
// shutdown) is declared here. The first reason recorded for a connection
// wins.
type CloseReason = wsession.Reason

// Close reasons of spliced connections.
const (
	ReasonClientClosed       = wsession.ReasonClientClosed       // the client ended its stream (FIN, reset, failed write)
	ReasonBackendClosed      = wsession.ReasonBackendClosed      // the backend ended its stream
	ReasonIdleTimeout        = wsession.ReasonIdleTimeout        // nothing moved for the pool's idle timeout
	ReasonWriteTimeout       = wsession.ReasonWriteTimeout       // a write did not complete in the write timeout
	ReasonFinTimeout         = wsession.ReasonFinTimeout         // one side closed, the other did not within 10 s
	ReasonPingTimeout        = wsession.ReasonPingTimeout        // the client answered no ping: close 1011
	ReasonFrameTooBig        = wsession.ReasonFrameTooBig        // a client frame over max_frame_bytes: close 1009
	ReasonMessageTooBig      = wsession.ReasonMessageTooBig      // a client message over max_message_bytes: close 1009
	ReasonBackendFrameTooBig = wsession.ReasonBackendFrameTooBig // a backend frame over max_frame_bytes
	// ReasonMessageTooBigInflated: a compressed client message that would
	// inflate past max_message_bytes (deflate policy limit): close 1009.
	ReasonMessageTooBigInflated = wsession.ReasonMessageTooBigInflated
	// ReasonDeflateError: a compressed client message that is no DEFLATE
	// stream (deflate policy limit): close 1007.
	ReasonDeflateError = wsession.ReasonDeflateError
	// ReasonRateLimited: a client over its pool's message or byte rate:
	// close 1008.
	ReasonRateLimited = wsession.ReasonRateLimited
	// ReasonProtocolError: a client frame that broke a rule of RFC 6455
	// or RFC 7692: close 1002, the frame not forwarded.
	ReasonProtocolError = wsession.ReasonProtocolError
	// ReasonBackendProtocolError: a backend frame that broke one: close
	// 1014 (bad gateway) to the client, the frame not forwarded.
	ReasonBackendProtocolError = wsession.ReasonBackendProtocolError
	ReasonError                = wsession.ReasonError // a socket error the splice could not attribute
)

// Close reasons of edge's own: why the proxy asked a connection to close.
const (
	ReasonShutdown    CloseReason = "shutdown"     // edge stopped, or a drain ran out of time
	ReasonDrain       CloseReason = "drain"        // edge drained: close 1001 to the client
	ReasonBackendGone CloseReason = "backend_gone" // the backend left its pool: close 1012
	ReasonAdminDrain  CloseReason = "admin_drain"  // an operator drained the backend: close 1012
	ReasonMoved       CloseReason = "moved"        // handed to another edge process (Handoff), still open there
	ReasonRestart     CloseReason = "restart"      // edge restarted and could not hand it over: close 1012
	ReasonRebalance   CloseReason = "rebalance"    // moved off a backend above its fair share: close 1012
)

// reasonKeep closes without recording a reason of its own: the one
// already recorded stands.
const reasonKeep = wsession.ReasonKeep

// CloseReasons lists every CloseReason, for metrics that must exist at
// zero before the first connection ends.
func CloseReasons() []CloseReason {
	return append(wsession.Reasons(), ReasonShutdown, ReasonDrain, ReasonBackendGone, ReasonAdminDrain, ReasonMoved, ReasonRestart, ReasonRebalance, ReasonTokenExpired, ReasonTokenRevoked)
}

// CloseSide says who closed a WebSocket first: the side whose close frame
// edge saw first or, with no close frame seen, whose stream ended first.
type CloseSide = wsession.Side

// Close sides.
const (
	SideClient  = wsession.SideClient
	SideBackend = wsession.SideBackend
	SideEdge    = wsession.SideEdge
)

// CloseSides lists every CloseSide.
func CloseSides() []CloseSide { return []CloseSide{SideClient, SideBackend, SideEdge} }

// WebSocket close codes (RFC 6455 §7.4.1 and the IANA registry).
const (
	// CloseGoingAway (1001) is sent to every client when the proxy drains.
	CloseGoingAway = wsession.CloseGoingAway
	// CloseMessageTooBig (1009) is sent to a client whose frame exceeds
	// Pool.MaxFrameBytes.
	CloseMessageTooBig = wsession.CloseMessageTooBig
	// CloseServiceRestart (1012) suits a backend that leaves the pool.
	CloseServiceRestart = wsession.CloseServiceRestart
	// closePingTimeout (1011) goes to a client that missed its ping timeout.
	closePingTimeout = wsession.ClosePingTimeout
)

// edgeCloseCodes are the close codes edge itself sends to
// clients: drain, a frame that broke a rule, a compressed message that
// is no DEFLATE, a rate over its limit, a frame or message over the
// limit, a missed ping, a backend that left, a backend frame that broke
// a rule.
var edgeCloseCodes = []int{CloseGoingAway, wsession.CloseProtocolError, wsession.CloseInvalidData, wsession.ClosePolicy,
	CloseMessageTooBig, closePingTimeout, CloseServiceRestart, wsession.CloseBadGateway}

// EdgeCloseCodes lists the close codes edge sends to clients itself.
func EdgeCloseCodes() []int { return append([]int(nil), edgeCloseCodes...) }

// KnownCloseCodes lists the close codes of the IANA registry that
// CloseCodeLabel reports by number (RFC 6455 §7.4.1, RFC 6455 §11.7).
func KnownCloseCodes() []int {
	return []int{1000, 1001, 1002, 1003, 1005, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014}
}

// CloseCodeLabel is the bounded metric label of a close code: the number
// for a registered code, "none" for no close frame (0), "other" for
// application codes (3000-4999) and anything invalid, so a backend cannot
// make up label values.
func CloseCodeLabel(code int) string {
	if code == 0 {
		return "none"
	}
	for _, k := range KnownCloseCodes() {
		if k == code {
			return strconv.Itoa(code)
		}
	}
	return "other"
}

// Rejection is a status and reason edge answers a request with itself
// (Observer.Rejected).
type Rejection struct {
	Status int
	Reason string
	// Routed: refused after routing, so it carries a pool; otherwise the
	// pool is empty.
	Routed bool
}

// Rejections lists every answer edge gives by itself, for metrics that
// must exist at zero before the first refusal: malformed requests, the
// drain, routing, upgrade validation, every admission limit, and backend
// failures.
func Rejections() []Rejection {
	r := []Rejection{
		{http.StatusBadRequest, "bad_method", false},
		{http.StatusBadRequest, "bad_target", false},
		{http.StatusBadRequest, "bad_host", false},
		{http.StatusBadRequest, "bad_path", false},
		{http.StatusServiceUnavailable, "drain", false},
		{http.StatusMisdirectedRequest, "sni_mismatch", false},
		{http.StatusMisdirectedRequest, "no_route", false},
	}
	return append(r, []Rejection{
		{http.StatusMethodNotAllowed, "upgrade_method", true},
		{http.StatusBadRequest, "upgrade_protocol", true},
		{http.StatusBadRequest, "upgrade_connection", true},
		{http.StatusUpgradeRequired, "upgrade_version", true},
		{http.StatusBadRequest, "upgrade_key", true},
		{http.StatusBadRequest, "upgrade_body", true},
		// Admission limits (admit, narrowest first).
		{http.StatusTooManyRequests, "rate_limit", true},
		{http.StatusServiceUnavailable, "client_max_conns", true},
		{http.StatusServiceUnavailable, "pool_max_conns", true},
		{http.StatusServiceUnavailable, "max_conns", true},
		{http.StatusServiceUnavailable, "pool_rate_limit", true},
		// Tokens (auth.go), checked before admission.
		{http.StatusUnauthorized, reasonTokenMissing, true},
		{http.StatusUnauthorized, reasonTokenInvalid, true},
		{http.StatusUnauthorized, reasonTokenRevoked, true},
		{http.StatusUnauthorized, reasonTokenLifetime, true},
		{http.StatusForbidden, reasonTokenForbidden, true},
		{http.StatusTooManyRequests, reasonSubjectConns, true},
		// Backends.
		{http.StatusServiceUnavailable, "dial_failed", true},
		{http.StatusBadGateway, "dial_failed", true},
		{http.StatusGatewayTimeout, "dial_failed", true},
		{http.StatusServiceUnavailable, "no_backend", true},
		{http.StatusRequestEntityTooLarge, "body_too_large", true},
		{http.StatusRequestTimeout, "body_timeout", true},
		{http.StatusBadRequest, "client_closed", true},
		{http.StatusGatewayTimeout, "timeout", true},
		{http.StatusBadGateway, "body_too_large", true},
		{http.StatusBadGateway, "error", true},
	}...)
}
