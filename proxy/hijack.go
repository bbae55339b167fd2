package proxy

import (
	"net/http"
)

// statusClientClosed is the access log's status of a request whose client
// went away before an answer (nginx's 499); it is never sent.
const statusClientClosed = 499

// serveWebSocket runs the upgrade: backend handshake first, hijack second.
// After the hijack no HTTP error is ever written to the client: failures
// just close the connection.
func (s *Server) serveWebSocket(w http.ResponseWriter, x *exchange) {
	bc, err := s.dialUpgrade(x.r.Context(), x)
	if err != nil {
		x.release()
		status, answer := upgradeStatus(err)
		x.status, x.reason = status, "dial_failed"
		if !answer {
			// Logged as nginx does (499): the client closed the request.
			x.status, x.reason = statusClientClosed, "client_closed"
		} else {
			s.obs.Rejected(x.routeName(), status, "dial_failed")
			http.Error(w, http.StatusText(status), status)
		}
		x.logAccess()
		return
	}
	if bc.resp.StatusCode != http.StatusSwitchingProtocols {
		x.status, x.reason = bc.resp.StatusCode, "backend_refused"
		// The slots are held until the answer is relayed: a streamed one
		// keeps its backend connection open, and relays stalled by clients
		// that do not read must not add up past the pool's limits.
		n, err := relayResponse(w, bc, x.pool.WriteTimeout)
		bc.backend.Release()
		x.release()
		x.out = n
		if err != nil {
			x.reason = "backend_body_broken"
		}
		x.logAccess()
		if err != nil {
			// The status line is out: only closing the connection tells
			// the client the body is incomplete.
			panic(http.ErrAbortHandler)
		}
		return
	}
	x.status = http.StatusSwitchingProtocols

	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Nothing was written yet (HTTP/2 or a wrapped writer): an ordinary
		// error is still possible here.
		bc.conn.Close()
		bc.backend.Release()
		x.release()
		x.status, x.reason = http.StatusInternalServerError, "hijack_failed"
		s.log.Error("hijack failed", "route", x.routeName(), "err", err)
		http.Error(w, http.StatusText(x.status), x.status)
		x.logAccess()
		return
	}
	// Bytes the client sent right behind its request (often its first
	// frame) were read by net/http into brw.Reader: forward them, or they
	// are lost (a bug Caddy shipped).
	var clientBuffered []byte
	if n := brw.Reader.Buffered(); n > 0 {
		clientBuffered, _ = brw.Reader.Peek(n)
		clientBuffered = append([]byte(nil), clientBuffered...)
	}

	c := newWSConn(s, x, client, bc)
	head := s.switchingResponse(x, bc)
	// The request is not needed any more: an idle connection should not pin it.
	x.r = nil
	c.start(head, clientBuffered, bc.buffered)
}

// switchingResponse renders the 101 for the client: the backend's headers
// (hop-by-hop fields normalised) plus the sticky cookie when balance asks
// for one (traefik#3343: the cookie must be on the 101 itself).
func (s *Server) switchingResponse(x *exchange, bc *backendConn) []byte {
	b := make([]byte, 0, 512)
	b = append(b, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"...)
	h := bc.resp.Header
	removeHopByHop(h)
	b = appendHeader(b, h, "")
	if bc.setCookie {
		b = append(b, "Set-Cookie: "...)
		b = append(b, setCookieValue(x.pool, bc.backend, x.lo.TLS || x.r.TLS != nil)...)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}
