package proxy

import (
	"crypto/tls"

	"errors"
	"github.com/edgelb/edge/auth"
	"math"
	"net/http"
	"strconv"
)

// The path of one request, in call order: ServeHTTP (the drain gate,
// validation, deciding the client, routing), admit (the limits), then
// for a WebSocket serveWebSocket: dial and upgrade the backend
// (dial.go), hijack the client, and start the splice (conn.go, then
// splice.go or splice_ready_linux.go). Plain requests go to servePlain
// (http.go).

// Handler returns the http.Handler for one listener.
func (s *Server) Handler(lo ListenerOptions) http.Handler {
	return &handler{s: s, lo: lo.withDefaults()}
}

type handler struct {
	s  *Server
	lo ListenerOptions
}

// ServeHTTP is the top of the path of one connection.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := h.s
	x := &exchange{s: s, lo: &h.lo, r: r, start: s.now(),
		method: r.Method, host: r.Host, path: r.URL.Path}
	if r.TLS != nil {
		x.tls = tls.VersionName(r.TLS.Version)
	}
	ws := wantsUpgrade(r.Header)
	if ws {
		x.ws = true
		// A refused upgrade leaves the connection to more requests,
		// which never take this handshake's log over either; a 101's
		// takeover ran on this goroutine and took it already.
		defer stopHandshakeLog(r.Context())
	} else {
		// A plain request never leads to the record layer's takeover.
		stopHandshakeLog(r.Context())
	}
	x.id = decideClient(r.RemoteAddr, r.Header["X-Forwarded-For"], h.lo.TrustedProxies)
	x.reqID, x.clientReqID = requestID(r.Header, x.id.trusted)

	if r.Method == http.MethodOptions && r.RequestURI == "*" {
		// RFC 9110 §9.3.7: OPTIONS * asks about the server itself; edge
		// answers it as net/http would, within AnswerTimeout (the server
		// runs with DisableGeneralOptionsHandler so that it gets here).
		x.status, x.reason = http.StatusOK, "options"
		x.answer(w, func() { w.Header().Set("Content-Length", "0"); w.WriteHeader(http.StatusOK) })
		x.logAccess()
		return
	}
	if reason := invalidRequest(r); reason != "" {
		w.Header().Set("Connection", "close")
		x.reject(w, http.StatusBadRequest, reason)
		return
	}
	if s.draining.Load() {
		w.Header().Set("Connection", "close")
		w.Header().Set("Retry-After", retryAfterBusy)
		x.reject(w, http.StatusServiceUnavailable, "drain")
		return
	}
	if h.lo.StrictSNIHost && r.TLS != nil && !sniMatchesHost(r.TLS.ServerName, r.Host) {
		// A connection set up for one name must not carry requests for
		// another (connection reuse across certificates, domain fronting).
		x.reject(w, http.StatusMisdirectedRequest, "sni_mismatch")
		return
	}
	rt := s.routes.Load().match(r.Host, r.URL.Path)
	if rt == nil {
		x.reject(w, http.StatusMisdirectedRequest, "no_route")
		return
	}
	x.pool = rt.pool
	if ws {
		if e := checkUpgrade(r); e != nil {
			x.status, x.reason = e.status, e.reason
			s.obs.Rejected(x.routeName(), e.status, e.reason)
			x.answer(w, func() { writeUpgradeError(w, e) })
			x.logAccess()
			return
		}
	}
	var tok bearerResult
	if a := rt.pool.auth; a != nil {
		if tok = s.checkToken(r, a, rt.pool.name, x.start); tok.status != 0 {
			x.refuseToken(w, tok)
			return
		}
	}
	if no := x.admit(false); no.status != 0 {
		x.refuse(w, no)
		return
	}
	if ws {
		if !s.holdSubject(x, tok) {
			x.release()
			w.Header().Set("Retry-After", retryAfterBusy)
			x.reject(w, http.StatusTooManyRequests, reasonSubjectConns)
			return
		}
		s.serveWebSocket(w, x, tok)
		return
	}
	defer x.release()
	s.servePlain(w, x)
	x.logAccessAs(tok.mark, tok.subject)
}

// refusal is why admit turned a request away: the answer's status, the
// access line's reason and the Retry-After. The zero refusal admits.
type refusal struct {
	status             int
	reason, retryAfter string
}

// admit counts x against its client's, its pool's and the Server's
// limits: the one admission of a connection, whether a request's or one
// Adopt took from another process (adopted). On success x.release undoes
// it exactly once.
//
// A request meets the limits narrowest first, so that one refused by one
// never spends a token of a wider one: one client bursting must not
// leave other clients refused by the pool-wide rate. The per-client
// limiter goes first; the concurrency caps (pool, then global) are given
// back on refusal; the pool-wide admission bucket, whose token cannot be
// given back, is last.
//
// An adopted connection was admitted by the process it comes from and
// is live: it is counted the same way but never refused, and spends no
// token of a rate, the client's or the pool's, as it is no new
// connection.
func (x *exchange) admit(adopted bool) refusal {
	s, p, ip := x.s, x.pool, x.id.client
	if adopted {
		p.limiter.Hold(ip)
	} else if ok, after := p.limiter.Admit(ip); !ok {
		if after > 0 {
			// A rate limit: the client may come back after the bucket refills.
			return refusal{http.StatusTooManyRequests, "rate_limit", strconv.FormatInt(int64(math.Ceil(after.Seconds())), 10)}
		}
		return refusal{http.StatusServiceUnavailable, "client_max_conns", retryAfterBusy}
	}
	x.admitted = true
	n, total := p.use.Add(1), s.inflight.Add(1)
	var no refusal
	switch {
	case adopted:
		return no
	case p.maxConns > 0 && n > p.maxConns:
		no = refusal{http.StatusServiceUnavailable, "pool_max_conns", retryAfterBusy}
	case s.maxConns > 0 && total > s.maxConns:
		no = refusal{http.StatusServiceUnavailable, "max_conns", retryAfterBusy}
	default:
		if ok, after := p.admission.Take(); !ok {
			no = refusal{http.StatusServiceUnavailable, "pool_rate_limit", spreadRetryAfter(after)}
		}
	}
	if no.status != 0 {
		x.release()
	}
	return no
}

// release gives back what admit took, exactly once, however many paths
// call it (a handler's defer, the splice's end). Fields of the exchange
// rather than a closure: a long-lived WebSocket holds the exchange anyway,
// and a closure with its sync.Once would be one more allocation each.
func (x *exchange) release() {
	if !x.admitted || !x.released.CompareAndSwap(false, true) {
		return
	}
	x.pool.use.Add(-1)
	x.s.inflight.Add(-1)
	x.pool.limiter.Done(x.id.client)
}

// refuse answers a request admit turned away, with its Retry-After.
func (x *exchange) refuse(w http.ResponseWriter, no refusal) {
	w.Header().Set("Retry-After", no.retryAfter)
	x.reject(w, no.status, no.reason)
}

// statusClientClosed is the access log's status of a request whose client
// went away before an answer (nginx's 499); it is never sent.
const statusClientClosed = 499

// serveWebSocket runs the upgrade: backend handshake first, hijack second.
// After the hijack no HTTP error is ever written to the client: failures
// just close the connection.
func (s *Server) serveWebSocket(w http.ResponseWriter, x *exchange, tok bearerResult) {
	started := false
	defer func() {
		if !started {
			s.giveSubject(x.pool, tok.mark)
		}
	}()
	bc, err := s.dialUpgrade(x.r.Context(), x)
	if err != nil {
		x.release()
		status, answer := upgradeStatus(err)
		x.status, x.reason = status, "dial_failed"
		if errors.Is(err, errSlowAnswer) {
			x.reason = "timeout"
		}
		if !answer {
			// Logged as nginx does (499): the client closed the request.
			x.status, x.reason = statusClientClosed, "client_closed"
		} else {
			s.obs.Rejected(x.routeName(), status, x.reason)
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
		n, err := relayResponse(w, bc, x.pool.writeTimeout)
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
	if tok.mark != nil {
		c.who = tok.mark
		c.sess.SetExpiry(s.expiryFrom(tok.expires, x.start, x.pool.auth))
		if tok.subject != "" {
			s.subjects.nameHold(x.pool.name, tok.mark.Subject, tok.subject)
		}
	}
	head := s.switchingResponse(x, bc, tok.protocol)
	started = true
	// The request is not needed any more: an idle connection should not pin it.
	x.r = nil
	x.detach()
	c.start(head, clientBuffered, bc.buffered)
}

// switchingResponse renders the 101 for the client: the backend's headers
// (hop-by-hop fields normalised) plus the sticky cookie when balance asks
// for one (traefik#3343: the cookie must be on the 101 itself).
func (s *Server) switchingResponse(x *exchange, bc *backendConn, tokenProtocol string) []byte {
	b := make([]byte, 0, 512)
	b = append(b, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"...)
	h := bc.resp.Header
	removeHopByHop(h)
	if tokenProtocol != "" && len(h["Sec-Websocket-Protocol"]) == 0 {
		// The token's entry was all the client offered (stripProtocol).
		h["Sec-Websocket-Protocol"] = []string{tokenProtocol}
	}
	b = appendHeader(b, h, "")
	if bc.setCookie {
		b = append(b, "Set-Cookie: "...)
		b = append(b, setCookieValue(x.pool, bc.backend, x.lo.TLS || x.r.TLS != nil)...)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}

// refuseToken answers a request whose token checkToken refused: 401 with
// the challenge of RFC 6750 §3 (no error detail: what failed is for the
// access log and the metrics, not for whoever holds a bad token), or 403.
func (x *exchange) refuseToken(w http.ResponseWriter, tok bearerResult) {
	if tok.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="edge"`)
	}
	x.status, x.reason = tok.status, tok.reason
	x.s.obs.Rejected(x.routeName(), tok.status, tok.reason)
	x.answer(w, func() { http.Error(w, http.StatusText(tok.status), tok.status) })
	x.logAccessAs(tok.mark, tok.subject)
}

// holdSubject counts a WebSocket against its subject's limit in its pool
// (Auth.MaxConnsPerSubject), or reports false when it is over.
func (s *Server) holdSubject(x *exchange, tok bearerResult) bool {
	a := x.pool.auth
	if tok.mark == nil || a == nil || a.MaxConnsPerSubject <= 0 || tok.mark.Subject == 0 {
		return true
	}
	return s.subjects.take(x.pool.name, tok.mark.Subject, a.MaxConnsPerSubject)
}

// holdAdopted counts an adopted connection against its subject in its
// pool, without refusing it: it is live already.
func (s *Server) holdAdopted(c *wsConn) {
	a := c.pool.auth
	if c.who == nil || a == nil || a.MaxConnsPerSubject <= 0 || c.who.Subject == 0 {
		return
	}
	s.subjects.hold(c.pool.name, c.who.Subject)
}

// giveSubject gives back what holdSubject took.
func (s *Server) giveSubject(p *pool, who *auth.Mark) {
	if who == nil || p.auth == nil || p.auth.MaxConnsPerSubject <= 0 || who.Subject == 0 {
		return
	}
	s.subjects.give(p.name, who.Subject)
}
