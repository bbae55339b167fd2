package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/edgelb/edge/balance"
)

// The plain HTTP leg uses net/http's Transport rather than fasthttp's
// HostClient: it streams both bodies (memory per request is one copy
// buffer, not the response), hands a 101's connection to the caller so it
// is never pooled again, notices a backend closing an idle connection
// while it sits in the pool (fasthttp finds out on the next request), and
// bounds the response head. Its own replay of requests is switched off by
// plainBody.

// maxPlainResponseHead bounds a backend's response head on the plain leg;
// a longer head is that backend's failure.
const maxPlainResponseHead = 64 << 10

// dialError marks a failure to connect: nothing was sent, so another
// backend may be tried.
type dialError struct{ err error }

func (e *dialError) Error() string { return "dial: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

var (
	errBodyTooLarge     = errors.New("request body over the pool's max_body_bytes")
	errBodyDetached     = errors.New("request body no longer readable: the exchange ended")
	errResponseTooLarge = errors.New("response body over the pool's max_body_bytes")
)

// hostClients keeps one http.Transport (a keep-alive pool per backend
// address) per pool name across reloads, and hands it to the compiled pool
// (attach, from SetRoutes) so a plain request finds it without a lookup. A
// pool whose dial timeout changed gets a new one; pools no longer routed
// lose theirs. Connections to a backend that left its pool close when idle
// for IdleConnTimeout.
type hostClients struct {
	mu sync.Mutex
	m  map[string]*poolTransport
}

type poolTransport struct {
	dial time.Duration
	t    *http.Transport
}

// attach sets the transport of every pool of a table about to be
// published, and drops those of pools it no longer routes.
func (h *hostClients) attach(pools []*pool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]*poolTransport{}
	}
	live := make(map[string]bool, len(pools))
	for _, p := range pools {
		live[p.name] = true
		pt := h.m[p.name]
		if pt == nil || pt.dial != p.dialTimeout {
			if pt != nil {
				pt.t.CloseIdleConnections()
			}
			pt = &poolTransport{dial: p.dialTimeout, t: newTransport(p.dialTimeout)}
			h.m[p.name] = pt
		}
		p.transport = pt.t
	}
	for k, pt := range h.m {
		if !live[k] {
			pt.t.CloseIdleConnections()
			delete(h.m, k)
		}
	}
}

func newTransport(dt time.Duration) *http.Transport {
	d := &net.Dialer{Timeout: dt}
	return &http.Transport{
		Proxy: nil, // never the environment's HTTP_PROXY
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, &dialError{err}
			}
			return c, nil
		},
		MaxIdleConnsPerHost:    64,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: maxPlainResponseHead,
		// Bodies pass as they are: no Accept-Encoding added, nothing decoded.
		DisableCompression: true,
		// HTTP/1.1 only, as to every backend.
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
}

// closeAll drops every transport, closing their idle connections (Close).
func (h *hostClients) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, pt := range h.m {
		pt.t.CloseIdleConnections()
		delete(h.m, k)
	}
}

// clientBody is the client's request body as the Transport reads it: each
// read gets the listener's body timeout as its deadline (a client that
// sends a head announcing a body and then nothing loses its connection,
// and its admission slot, after that long), at most limit bytes pass, and
// detach ends reading for good before the handler returns (net/http's
// Transport may still read a body after RoundTrip returned).
type clientBody struct {
	rc      *http.ResponseController
	timeout time.Duration
	eof     chan struct{} // closed at io.EOF

	mu       sync.Mutex
	src      io.Reader
	left     int64 // bytes that may still pass
	n        int64
	err      error // the client's failure: timeout, reset, over the limit
	detached bool
}

func newClientBody(r *http.Request, rc *http.ResponseController, timeout time.Duration, limit int64) *clientBody {
	return &clientBody{rc: rc, timeout: timeout, src: r.Body, left: limit, eof: make(chan struct{})}
}

func (b *clientBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.detached:
		return 0, errBodyDetached
	case b.err != nil:
		return 0, b.err
	case b.done():
		return 0, io.EOF
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	_ = b.rc.SetReadDeadline(time.Now().Add(b.timeout))
	n, err := b.src.Read(p)
	if int64(n) > b.left {
		b.err = errBodyTooLarge
		return 0, b.err
	}
	b.left -= int64(n)
	b.n += int64(n)
	switch {
	case err == io.EOF:
		// net/http's background read of the connection starts now; it
		// must not inherit the body deadline.
		_ = b.rc.SetReadDeadline(time.Time{})
		close(b.eof)
	case err != nil:
		b.err = fmt.Errorf("client body: %w", err)
		return n, b.err
	}
	return n, err
}

func (b *clientBody) done() bool {
	select {
	case <-b.eof:
		return true
	default:
		return false
	}
}

// Close leaves the body to net/http, which owns it.
func (b *clientBody) Close() error { return nil }

// detach wakes a read still blocked on the client (the backend answered
// before taking the whole body) and refuses any later one.
func (b *clientBody) detach() {
	if !b.done() {
		_ = b.rc.SetReadDeadline(time.Now())
	}
	b.mu.Lock()
	b.detached = true
	b.mu.Unlock()
}

// clientErr is the client's failure while its body was read, if any.
func (b *clientBody) clientErr() error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

func (b *clientBody) bytesIn() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

// emptyBody is an empty request body the Transport cannot rewind.
type emptyBody struct{}

func (emptyBody) Read([]byte) (int, error) { return 0, io.EOF }
func (emptyBody) Close() error             { return nil }

// plainBody is the body handed to the Transport, and its length.
//
// net/http's Transport replays a request by itself, on a reused
// connection, after a reset or EOF before the response, even when the
// backend had read it (Request.isReplayable: GET, HEAD, OPTIONS, TRACE or
// an Idempotency-Key, with a nil or NoBody body): a query of death sent
// twice. A body without GetBody makes every request non-replayable. An
// empty one costs nothing on the wire for the methods that usually lack a
// body (the Transport probes it and sends no body), and is an empty
// chunked body for TRACE or a request with an Idempotency-Key; other
// methods are not replayed anyway and keep NoBody (and Content-Length: 0
// for POST, PUT and PATCH).
func plainBody(r *http.Request, cb *clientBody) (io.ReadCloser, int64) {
	if cb != nil {
		return cb, r.ContentLength
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return emptyBody{}, 0
	}
	if _, ok := r.Header["Idempotency-Key"]; ok {
		return emptyBody{}, 0
	}
	if _, ok := r.Header["X-Idempotency-Key"]; ok {
		return emptyBody{}, 0
	}
	return http.NoBody, 0
}

// attempt records what became of one request sent to one backend.
type attempt struct {
	mu     sync.Mutex
	conn   net.Conn
	reused bool
	wrote  bool // the request head went out
}

func (a *attempt) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) {
			a.mu.Lock()
			a.conn, a.reused = i.Conn, i.Reused
			a.mu.Unlock()
		},
		WroteHeaders: func() {
			a.mu.Lock()
			a.wrote = true
			a.mu.Unlock()
		},
	}
}

func (a *attempt) sent() (wrote, reused bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.wrote, a.reused
}

// closeConn closes the connection the request went out on.
func (a *attempt) closeConn() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conn != nil {
		a.conn.Close()
	}
}

// outRequest builds the request to one backend. The target is the path
// the route matched (r.URL.Path, with its original escaping where that
// encodes the same path) and the query as sent; Host is the one routed
// on, so an absolute-form target goes out in origin form with its
// authority as Host (RFC 9112 §3.2.2).
func outRequest(ctx context.Context, r *http.Request, addr string, hdr http.Header, body io.ReadCloser, n int64) *http.Request {
	u := &url.URL{Scheme: "http", Host: addr, Path: r.URL.Path, RawPath: r.URL.RawPath,
		RawQuery: r.URL.RawQuery, ForceQuery: r.URL.ForceQuery}
	out := &http.Request{Method: r.Method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: hdr, Host: r.Host, Body: body, ContentLength: n}
	return out.WithContext(ctx)
}

// plainHeader is the header sent to backends.
func plainHeader(x *exchange) http.Header {
	h := backendHeader(x.r, x.lo, x.id)
	h.Set("X-Request-Id", x.reqID)
	delete(h, "Host")
	if _, ok := h["User-Agent"]; !ok {
		// An empty value keeps the Transport from adding its own.
		h["User-Agent"] = []string{""}
	}
	return h
}

// servePlain proxies a non-upgrade request (long-polling transports such as
// socket.io and SockJS use these) through the same pick and stickiness.
func (s *Server) servePlain(w http.ResponseWriter, x *exchange) {
	r, p := x.r, x.pool
	limit := p.maxBodyBytes
	if r.ContentLength > limit {
		w.Header().Set("Connection", "close")
		x.rejectBackend(w, http.StatusRequestEntityTooLarge, "body_too_large")
		return
	}
	rc := http.NewResponseController(w)
	var cb *clientBody
	if r.ContentLength != 0 {
		cb = newClientBody(r, rc, x.lo.ReadBodyTimeout, limit)
		defer cb.detach()
	}
	ctx, cancel := context.WithTimeout(r.Context(), p.requestTimeout)
	defer cancel()
	hdr := plainHeader(x)

	preq := balance.Request{Cookie: stickyCookie(r, p), ClientIP: x.id.client}
	var triedArr [4]*balance.Backend
	preq.Tried = triedArr[:0]
	var lastErr error
	for i := 0; i <= p.retries; i++ {
		if i > 0 {
			s.obs.Retried(x.routeName(), LegPlain)
		}
		res, perr := p.balancer.Pick(&preq)
		if perr != nil {
			if i == 0 {
				x.rejectBackend(w, http.StatusServiceUnavailable, "no_backend")
				return
			}
			break
		}
		b := res.Backend
		x.backend = b.ID()
		preq.Tried = append(preq.Tried, b)
		if !b.TryAcquire() {
			// The backend's last slot went to another connection since Pick.
			lastErr = fmt.Errorf("backend %s: %w", b.ID(), errBackendFull)
			continue
		}
		done, retry, err := s.plainAttempt(ctx, w, rc, x, cb, hdr, res)
		b.Release()
		if done {
			return
		}
		lastErr = fmt.Errorf("backend %s: %w", b.ID(), err)
		if !retry {
			break
		}
	}
	x.in = cb.bytesIn()
	s.log.Debug("plain request failed", "route", x.routeName(), "backend", x.backend, "err", lastErr)
	status, reason := plainFailure(r, cb, lastErr)
	if status == http.StatusRequestTimeout || status == http.StatusRequestEntityTooLarge {
		w.Header().Set("Connection", "close")
	}
	x.rejectBackend(w, status, reason)
}

// plainAttempt sends the request to one backend. done means the client
// has its answer; otherwise retry says whether another backend may be
// tried: only when nothing was sent.
func (s *Server) plainAttempt(ctx context.Context, w http.ResponseWriter, rc *http.ResponseController, x *exchange, cb *clientBody, hdr http.Header, res balance.Result) (done, retry bool, err error) {
	b := res.Backend
	a := &attempt{}
	body, n := plainBody(x.r, cb)
	out := outRequest(httptrace.WithClientTrace(ctx, a.trace()), x.r, b.Addr(), hdr, body, n)
	resp, err := x.pool.transport.RoundTrip(out)
	if err != nil {
		wrote, reused := a.sent()
		if backendsFault(x.r, cb, err, wrote, reused) {
			b.ReportFailure()
			s.obs.DialFailed(x.routeName(), b.ID(), err)
		}
		nothingSent := !wrote && cb.bytesIn() == 0
		return false, nothingSent && cb.clientErr() == nil && ctx.Err() == nil, err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// RFC 9110 §15.2.2: a server must not switch protocols unless asked,
		// and no request on this leg asks (Upgrade is hop-by-hop and never
		// forwarded). What follows on that connection is no longer HTTP:
		// close it, whether or not the Transport saw a protocol switch.
		a.closeConn()
		resp.Body.Close()
		b.ReportFailure()
		err = fmt.Errorf("101 Switching Protocols to a request without Upgrade")
		s.obs.DialFailed(x.routeName(), b.ID(), err)
		return false, false, err
	}
	defer resp.Body.Close()
	b.ReportSuccess()
	if resp.ContentLength > x.pool.maxBodyBytes {
		return false, false, errResponseTooLarge
	}
	s.relayPlain(w, rc, x, resp, res, b)
	return true, false, nil
}

// backendsFault reports whether a failed exchange is the backend's fault,
// the only failures balance is told about (passive ejection): a refused or
// timed out connect, a reset or EOF before a complete response head, a
// malformed head or one over maxPlainResponseHead. The client's doing
// (its body timed out, was too large or broke off; it left) and edge's
// own (its request timeout, local descriptor or memory exhaustion, a
// stale pooled connection that took nothing) never count.
func backendsFault(r *http.Request, cb *clientBody, err error, wrote, reused bool) bool {
	if cb.clientErr() != nil || r.Context().Err() != nil {
		return false
	}
	var de *dialError
	if errors.As(err, &de) {
		return !localExhaustion(err) && !errors.Is(err, context.Canceled)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	return wrote || !reused
}

// localExhaustion reports errors of this host, not of the peer: out of
// descriptors, buffers, memory or ephemeral ports.
func localExhaustion(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.EADDRNOTAVAIL} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// plainFailure maps a failed exchange to the answer and its reason.
func plainFailure(r *http.Request, cb *clientBody, err error) (int, string) {
	if cerr := cb.clientErr(); cerr != nil {
		switch {
		case errors.Is(cerr, errBodyTooLarge):
			return http.StatusRequestEntityTooLarge, "body_too_large"
		case isTimeout(cerr):
			// RFC 9110 §15.5.9: the client did not send its body in time.
			return http.StatusRequestTimeout, "body_timeout"
		case strings.Contains(cerr.Error(), "too large"):
			return http.StatusRequestEntityTooLarge, "body_too_large"
		}
		return http.StatusBadRequest, "client_closed"
	}
	switch {
	case r.Context().Err() != nil:
		return http.StatusBadRequest, "client_closed"
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, "timeout"
	case errors.Is(err, errResponseTooLarge):
		return http.StatusBadGateway, "body_too_large"
	}
	return http.StatusBadGateway, "error"
}

// rejectBackend answers a plain request from the proxy (no access log; the
// caller writes it).
func (x *exchange) rejectBackend(w http.ResponseWriter, status int, reason string) {
	x.status, x.reason = status, reason
	x.s.obs.Rejected(x.routeName(), status, reason)
	x.s.obs.HTTPRequest(x.routeName(), x.backend, status, x.s.now().Sub(x.start))
	x.answer(w, func() { http.Error(w, http.StatusText(status), status) })
}

// relayPlain streams the backend's answer to the client, without
// hop-by-hop headers, adding the sticky cookie when balance asks for one.
// Each write to the client has the pool's write timeout; a body that
// fails half-way, or grows over the pool's max_body_bytes, ends the
// client connection so the truncation cannot pass for a complete answer.
func (s *Server) relayPlain(w http.ResponseWriter, rc *http.ResponseController, x *exchange, resp *http.Response, res balance.Result, b *balance.Backend) {
	h := w.Header()
	connHdr := strings.Join(resp.Header["Connection"], ",")
	for name, vv := range resp.Header {
		if name == "Content-Length" || isHopByHop(name, connHdr) {
			continue
		}
		h[name] = append(h[name], vv...)
	}
	if res.SetCookie {
		h.Add("Set-Cookie", setCookieValue(x.pool, b, x.lo.TLS || x.r.TLS != nil))
	}
	if resp.ContentLength >= 0 {
		h.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	} else if v := resp.Header.Get("Content-Length"); x.r.Method == http.MethodHead && v != "" {
		h.Set("Content-Length", v)
	}
	wt := x.pool.writeTimeout
	setDeadline := func() {
		if wt > 0 {
			_ = rc.SetWriteDeadline(time.Now().Add(wt))
		}
	}
	// A later request on this connection must not inherit the deadline.
	defer rc.SetWriteDeadline(time.Time{})
	x.status, x.reason = resp.StatusCode, "done"
	setDeadline()
	w.WriteHeader(resp.StatusCode)
	err := s.copyPlain(w, rc, resp.Body, x.pool.maxBodyBytes, &x.out, setDeadline)
	s.obs.HTTPRequest(x.routeName(), b.ID(), resp.StatusCode, s.now().Sub(x.start))
	if err != nil {
		x.reason = "aborted"
		if errors.Is(err, errResponseTooLarge) {
			x.reason = "body_too_large"
		}
		s.log.Debug("plain response aborted", "route", x.routeName(), "backend", b.ID(), "err", err)
		x.logAccess()
		// Closes the client connection without a final chunk.
		panic(http.ErrAbortHandler)
	}
}

// copyPlain copies body to the client through one pooled buffer, flushing
// each read so long-polling and streamed answers are not held back.
func (s *Server) copyPlain(w http.ResponseWriter, rc *http.ResponseController, body io.Reader, limit int64, out *int64, setDeadline func()) error {
	bp := s.getBuf()
	defer s.putBuf(bp)
	buf := *bp
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if *out+int64(n) > limit {
				return errResponseTooLarge
			}
			setDeadline()
			if _, err := w.Write(buf[:n]); err != nil {
				return fmt.Errorf("write to client: %w", err)
			}
			if err := rc.Flush(); err != nil {
				return fmt.Errorf("flush to client: %w", err)
			}
			*out += int64(n)
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return fmt.Errorf("backend body: %w", rerr)
		}
	}
}

func isHopByHop(name, connection string) bool {
	for _, k := range hopByHop {
		if name == k {
			return true
		}
	}
	for _, t := range strings.Split(connection, ",") {
		if t = strings.TrimSpace(t); t != "" && strings.EqualFold(t, name) {
			return true
		}
	}
	return false
}
