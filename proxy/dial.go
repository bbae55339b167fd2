package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/wswire"
	"golang.org/x/net/http/httpguts"
)

// backendConn is a backend that answered the upgrade request.
type backendConn struct {
	conn     *net.TCPConn
	resp     *http.Response
	buffered []byte // bytes the backend sent after its response, already read
	// stream, for a non-101 answer too long to hold, yields its body;
	// release closes the backend after it was relayed.
	stream    io.Reader
	release   func()
	backend   *balance.Backend
	setCookie bool
	deflate   bool // the 101 negotiated permessage-deflate
	foreign   bool // and an extension edge does not know (wswire.Foreign)
}

// errHandshake marks a backend that answered something that is not a valid
// HTTP response or a 101 without the right Sec-WebSocket-Accept.
var errHandshake = errors.New("broken websocket handshake")

// dialUpgrade picks a backend, dials it and performs the WebSocket handshake,
// all before the client is hijacked: on a dial failure or a broken handshake
// nothing has reached the client yet, so the next backend is tried (up to
// Pool.Retries more). The returned backend is Acquired; the caller releases
// it. upgradeStatus (errors.go) maps err to the client's answer.
//
// Only a failure that is the backend's own counts against it (see
// handshakeError): edge running out of descriptors or memory, or the
// client going away, says nothing about the backend and ejects nothing.
func (s *Server) dialUpgrade(ctx context.Context, x *exchange) (bc *backendConn, err error) {
	p := x.pool
	req := balance.Request{Cookie: stickyCookie(x.r, p), ClientIP: x.id.client}
	var triedArr [4]*balance.Backend
	req.Tried = triedArr[:0]
	head := s.upgradeRequest(x)
	for attempt := 0; attempt <= p.retries; attempt++ {
		if attempt > 0 {
			s.obs.Retried(x.routeName(), LegUpgrade)
		}
		res, perr := p.balancer.Pick(&req)
		if perr != nil {
			if attempt == 0 {
				return nil, errNoBackend(p, perr)
			}
			break
		}
		b := res.Backend
		if !b.TryAcquire() {
			// Another connection took the backend's last slot
			// (max_connections_per_backend) between Pick and here: try
			// another backend; this is no failure of the backend.
			req.Tried = append(req.Tried, b)
			err = fmt.Errorf("backend %s: %w", b.ID(), errBackendFull)
			continue
		}
		bc, err = s.handshake(ctx, p, b, head, x.r.Header.Get("Sec-WebSocket-Key"), x.r.Header["Sec-Websocket-Extensions"])
		if err == nil {
			b.ReportSuccess()
			bc.backend, bc.setCookie = b, res.SetCookie
			x.backend = b.ID()
			return bc, nil
		}
		b.Release()
		x.backend = b.ID()
		var retry bool
		if retry, err = s.backendFailed(ctx, x, b, err); !retry {
			return nil, err
		}
		req.Tried = append(req.Tried, b)
	}
	return nil, err
}

// backendFailed says what becomes of a failed attempt on b: the error
// for the client, and retry when the failure is the backend's own
// (counted against it) and another backend may be tried. Apart from
// dialUpgrade's loop, so that the loop's frame, on the stack under every
// dial, stays small.
func (s *Server) backendFailed(ctx context.Context, x *exchange, b *balance.Backend, err error) (retry bool, _ error) {
	if ctx.Err() != nil {
		// The client went away; that says nothing about the backend.
		return false, fmt.Errorf("backend %s: %w: %w", b.ID(), errClientGone, ctx.Err())
	}
	var he *handshakeError
	if errors.As(err, &he) && he.fault == "" {
		if he.slow {
			// The backend took the request and has not answered in
			// time: a 504 for this client, no strike against the
			// backend (a slow path is not a broken backend, and any
			// client can choose one), and no retry (the request
			// reached a backend; another try would double what a
			// slow path costs).
			s.log.Debug("backend answer slower than the handshake timeout; not counted against the backend",
				"route", x.routeName(), "backend", b.ID(), "err", err)
			return false, fmt.Errorf("%w: %w", errSlowAnswer, err)
		}
		if he.unfit {
			s.log.Debug("backend answer does not fit what the client asked; not counted against the backend",
				"route", x.routeName(), "backend", b.ID(), "err", err)
			return false, err
		}
		if he.local {
			// Edge itself is short of descriptors or memory: another
			// backend would fail the same way, and none is to blame.
			s.log.Warn("backend dial failed on a local resource; not counted against the backend",
				"route", x.routeName(), "backend", b.ID(), "err", err)
			return false, fmt.Errorf("%w: %w", errLocalResource, err)
		}
		// The backend answered a complete head, then its body broke:
		// no failure of the handshake, and nothing to retry.
		s.log.Debug("backend answer broken after its head", "route", x.routeName(), "backend", b.ID(), "err", err)
		return false, fmt.Errorf("%w: %w", errAnswerBroken, err)
	}
	reason := "handshake"
	if he != nil {
		reason = he.fault
	}
	b.ReportFailureReason(reason)
	s.obs.DialFailed(x.routeName(), b.ID(), err)
	s.log.Debug("backend handshake failed", "route", x.routeName(), "backend", b.ID(), "reason", reason, "err", err)
	return true, err
}

// appendHeader writes h as header lines, skipping the field named skip and
// any name or value that is not valid on the wire (RFC 9110 §5.1, §5.5), so
// nothing a client sent can split a request or a response.
func appendHeader(b []byte, h http.Header, skip string) []byte {
	for k, vv := range h {
		if k == skip || !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				continue
			}
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	return b
}

// errBackendFull means every backend tried was at its connection limit.
var errBackendFull = errors.New("backend at its connection limit")

// upgradeRequest renders the request head sent to every backend tried: the
// client's request line and Host, its headers without hop-by-hop fields
// (RFC 7230 §6.1) plus forwarded headers, then Connection/Upgrade restored.
// Sec-WebSocket-Key, -Version and -Protocol pass untouched;
// -Extensions as the pool's deflate policy says (wswire.RewriteOffer).
func (s *Server) upgradeRequest(x *exchange) []byte {
	r := x.r
	h := backendHeader(r, x.lo, x.id)
	h.Set("X-Request-Id", x.reqID)
	if vals := h["Sec-Websocket-Extensions"]; len(vals) > 0 {
		offer, deflate := wswire.RewriteOffer(vals, x.pool.deflate, x.pool.deflateBits)
		if offer == "" {
			delete(h, "Sec-Websocket-Extensions")
		} else {
			h["Sec-Websocket-Extensions"] = []string{offer}
		}
		x.deflate = deflateOffer(r.Header["Sec-Websocket-Extensions"], deflate)
	}
	uri := r.RequestURI
	if uri == "" || !strings.HasPrefix(uri, "/") {
		uri = r.URL.RequestURI()
	}
	b := make([]byte, 0, 1024)
	b = append(b, "GET "...)
	b = append(b, uri...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, r.Host...)
	b = append(b, "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"...)
	b = appendHeader(b, h, "Host")
	return append(b, "\r\n"...)
}

// handshake dials b, writes head and reads the answer with http.ReadResponse
// (never one fixed-size read), through a limit of MaxResponseHeaderBytes on
// everything read before the final head is complete. Interim answers (100,
// 103) are skipped. A 101 must carry the right Sec-WebSocket-Accept
// (RFC 6455 §4.1), otherwise it is a broken handshake. Every error is a
// *handshakeError saying whose fault it is.
func (s *Server) handshake(ctx context.Context, p *pool, b *balance.Backend, head []byte, key string, ext []string) (*backendConn, error) {
	conn, err := dialBackend(ctx, p, b)
	if err != nil {
		return nil, err
	}
	// The request context ends when the client goes away: stop waiting then.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	conn.SetDeadline(time.Now().Add(p.handshakeTimeout))
	if _, err := conn.Write(head); err != nil {
		conn.Close()
		return nil, ioFault(fmt.Errorf("backend %s: write handshake: %w", b.ID(), err))
	}
	lim := &headLimit{r: conn, n: int64(p.maxResponseHeaderBytes), hook: s.testReadHook}
	// Pooled: a fresh 4 KiB reader per connection is garbage the collector
	// keeps as headroom (see doc.go), and the handshake needs it only here.
	// Nothing read from br outlives it (a 101 has no body; a relayed body
	// holds the reader until it is streamed, see backendConn.release).
	br := s.getReader(lim)
	resp, err := readFinalResponse(br)
	if err != nil {
		s.putReader(br)
		conn.Close()
		return nil, headFault(b, p, lim, err)
	}
	lim.n = math.MaxInt64 // the head is complete: what follows is body or frames
	bc := &backendConn{conn: conn, resp: resp}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return s.relayable(bc, br, p, b)
	}
	defer s.putReader(br)
	if err := checkSwitching(bc, p, b, key, ext); err != nil {
		conn.Close()
		return nil, err
	}
	// Frames the backend sent right behind its 101 sit in br: keep them.
	if n := br.Buffered(); n > 0 {
		bc.buffered, _ = br.Peek(n)
		bc.buffered = append([]byte(nil), bc.buffered...)
	}
	return bc, nil
}

// dialBackend connects to b within the pool's dial timeout.
func dialBackend(ctx context.Context, p *pool, b *balance.Backend) (*net.TCPConn, error) {
	d := net.Dialer{
		Timeout: p.dialTimeout,
		// A backend host that vanishes without a reset leaves an idle
		// WebSocket open forever unless probed: after the pool's ping
		// interval of silence, or Go's 15 s (keepalive.go), then every
		// 15 s while unanswered; the count is the kernel's (9 unless
		// tuned), one setsockopt less per connection.
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: p.backendKeepAliveIdle(), Interval: defaultKeepAliveIdle, Count: -1},
	}
	c, err := d.DialContext(ctx, "tcp", b.Addr())
	if err != nil {
		return nil, dialFault(fmt.Errorf("backend %s: dial: %w", b.ID(), err))
	}
	conn, ok := c.(*net.TCPConn)
	if !ok {
		c.Close()
		return nil, &handshakeError{local: true, err: fmt.Errorf("backend %s: dial returned %T", b.ID(), c)}
	}
	return conn, nil
}

// headFault is the handshakeError of a response head that could not be
// read: too large for lim, or readFault's classification.
func headFault(b *balance.Backend, p *pool, lim *headLimit, err error) error {
	err = fmt.Errorf("backend %s: read handshake: %w", b.ID(), err)
	if lim.hit {
		return &handshakeError{fault: "head_too_large", err: fmt.Errorf("%w (limit %d bytes)", err, p.maxResponseHeaderBytes)}
	}
	return readFault(err)
}

// checkSwitching checks a backend's 101: the right Sec-WebSocket-Accept
// for key and Upgrade: websocket (RFC 6455 §4.1), and its extensions
// against the client's offer ext (answerExtensions).
func checkSwitching(bc *backendConn, p *pool, b *balance.Backend, key string, ext []string) error {
	resp := bc.resp
	if resp.Header.Get("Sec-WebSocket-Accept") != wswire.AcceptKey(key) ||
		!httpguts.HeaderValuesContainsToken(resp.Header["Upgrade"], "websocket") {
		return &handshakeError{fault: "bad_handshake", err: fmt.Errorf("backend %s: bad Sec-WebSocket-Accept or Upgrade: %w", b.ID(), errHandshake)}
	}
	if err := answerExtensions(bc, p, ext); err != nil {
		if errors.Is(err, wswire.ErrClientWindow) {
			// The client's own window request, ignored by a backend that
			// any client could send it to: a 502 for this client only.
			return &handshakeError{unfit: true, err: fmt.Errorf("backend %s: %w: %w", b.ID(), err, errAnswerUnfit)}
		}
		return &handshakeError{fault: "bad_handshake", err: fmt.Errorf("backend %s: %w: %w", b.ID(), err, errHandshake)}
	}
	return nil
}

// relayable prepares a complete non-101 answer for relaying: a body of up
// to maxRelayBody is read now and the backend closed; a longer one is
// streamed to the client by relayResponse, so no answer is refused for its
// size and memory stays bounded. Whatever breaks after the head is not a
// handshake failure of the backend: it answered.
func (s *Server) relayable(bc *backendConn, br *bufio.Reader, p *pool, b *balance.Backend) (*backendConn, error) {
	resp := bc.resp
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxRelayBody+1))
	if err != nil {
		s.putReader(br)
		bc.conn.Close()
		return nil, &handshakeError{err: fmt.Errorf("backend %s: read %d body: %w", b.ID(), resp.StatusCode, err)}
	}
	if len(body) <= maxRelayBody {
		s.putReader(br)
		bc.conn.Close()
		bc.conn, bc.buffered = nil, body
		return bc, nil
	}
	conn, timeout := bc.conn, p.handshakeTimeout
	bc.stream = io.MultiReader(bytes.NewReader(body), &idleReader{conn: conn, r: resp.Body, timeout: timeout})
	bc.release = func() {
		conn.Close()
		s.putReader(br)
	}
	bc.conn = nil
	return bc, nil
}

// readFinalResponse reads responses until one that is not interim: 1xx
// answers other than 101 may precede the final one (RFC 9110 §15.2) and are
// skipped. The reader's limit bounds them all together.
func readFinalResponse(br *bufio.Reader) (*http.Response, error) {
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode < 100 || resp.StatusCode > 199 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
	}
}

// errHeadTooLarge is returned by headLimit past its limit.
var errHeadTooLarge = errors.New("backend response head over the limit")

// headLimit reads at most n bytes from r, then fails with errHeadTooLarge:
// http.ReadResponse grows a header line without bound otherwise (a backend
// sending one endless header takes memory at line rate). Since a
// bufio.Reader only reads when it needs more, a head of exactly n bytes
// passes, whatever follows it.
type headLimit struct {
	r    io.Reader
	n    int64
	hit  bool
	hook func(int) // tests only
}

func (l *headLimit) Read(p []byte) (int, error) {
	if l.n <= 0 {
		l.hit = true
		return 0, errHeadTooLarge
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	if l.hook != nil {
		l.hook(n)
	}
	return n, err
}

// idleReader renews the read deadline before every read, so a relayed body
// may be long but the backend may not go quiet for longer than timeout.
type idleReader struct {
	conn    net.Conn
	r       io.Reader
	timeout time.Duration
}

func (r *idleReader) Read(p []byte) (int, error) {
	r.conn.SetReadDeadline(time.Now().Add(r.timeout))
	return r.r.Read(p)
}

func (s *Server) getReader(r io.Reader) *bufio.Reader {
	if br, ok := s.readers.Get().(*bufio.Reader); ok {
		br.Reset(r)
		return br
	}
	return bufio.NewReaderSize(r, 4096)
}

func (s *Server) putReader(br *bufio.Reader) {
	br.Reset(nil)
	s.readers.Put(br)
}

// relayResponse sends a backend's non-101 answer to an upgrade request to
// the client as an ordinary response, and returns the body bytes written.
// Each write to the client has the pool's write timeout wt, as on the plain
// leg, so a client that stops reading cannot hold the relay (and a streamed
// answer's backend connection) for ever. An error means the body broke, or
// the client stopped reading, after the status line was sent.
func relayResponse(w http.ResponseWriter, bc *backendConn, wt time.Duration) (int64, error) {
	if bc.release != nil {
		defer bc.release()
	}
	h := w.Header()
	for k, vv := range bc.resp.Header {
		h[k] = vv
	}
	removeHopByHop(h)
	delete(h, "Content-Length")
	dw := &deadlineWriter{w: w, rc: http.NewResponseController(w), timeout: wt}
	// A later request on this connection must not inherit the deadline.
	defer dw.clear()
	if bc.stream == nil {
		h.Set("Content-Length", strconv.Itoa(len(bc.buffered)))
		dw.renew()
		w.WriteHeader(bc.resp.StatusCode)
		n, err := dw.Write(bc.buffered)
		return int64(n), dw.flush(err)
	}
	if bc.resp.ContentLength >= 0 {
		h.Set("Content-Length", strconv.FormatInt(bc.resp.ContentLength, 10))
	}
	dw.renew()
	w.WriteHeader(bc.resp.StatusCode)
	n, err := io.Copy(dw, bc.stream)
	return n, dw.flush(err)
}

// deadlineWriter gives each write to the client its own deadline, timeout
// from now; a zero timeout sets none.
type deadlineWriter struct {
	w       io.Writer
	rc      *http.ResponseController
	timeout time.Duration
}

func (d *deadlineWriter) renew() {
	if d.timeout > 0 {
		_ = d.rc.SetWriteDeadline(time.Now().Add(d.timeout))
	}
}

func (d *deadlineWriter) clear() {
	if d.timeout > 0 {
		_ = d.rc.SetWriteDeadline(time.Time{})
	}
}

// flush sends what net/http still buffers, under the deadline: after the
// handler returns it would be flushed with none. err is a write error
// already seen, returned as it is.
func (d *deadlineWriter) flush(err error) error {
	if err != nil {
		return err
	}
	d.renew()
	return d.rc.Flush()
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	d.renew()
	return d.w.Write(p)
}

// handshakeError is a failed dial or handshake with whose fault it is.
// fault names a failure that shows the backend down or broken, which
// counts towards its passive ejection: the connect refused, timed out or
// unreachable, a reset or an EOF before a complete response head, a head
// that is malformed or over the limit, a 101 with a wrong
// Sec-WebSocket-Accept. An empty fault is no such proof: local is set for
// a lack of descriptors, buffers, memory or local ports on edge; slow for
// a backend that accepted the connection and took the request but did not
// answer within the handshake timeout. A slow answer is what any client
// can cause by choosing a slow path (a long poll, an export), so unlike
// Envoy's gateway failures it never counts; a backend that is slow for
// everyone fails its active health checks instead.
type handshakeError struct {
	fault string
	local bool
	slow  bool
	unfit bool // a valid answer to edge's offer the client would refuse (errAnswerUnfit)
	err   error
}

func (e *handshakeError) Error() string { return e.err.Error() }
func (e *handshakeError) Unwrap() error { return e.err }

// localErrnos are the errors a dial or a socket call fails with when edge,
// not the backend, lacks something: descriptors (EMFILE, ENFILE), socket
// buffers or memory (ENOBUFS, ENOMEM), an ephemeral port (EADDRNOTAVAIL,
// EADDRINUSE on an exhausted port range).
var localErrnos = []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.EADDRNOTAVAIL, syscall.EADDRINUSE}

func isLocal(err error) bool {
	for _, e := range localErrnos {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// dialFault classifies a failed connect: anything but a local shortage is
// the backend's (as Envoy's connect failures are).
func dialFault(err error) error {
	switch {
	case isLocal(err):
		return &handshakeError{local: true, err: err}
	case errors.Is(err, syscall.ECONNREFUSED):
		return &handshakeError{fault: "connect_refused", err: err}
	case isTimeout(err):
		return &handshakeError{fault: "connect_timeout", err: err}
	}
	return &handshakeError{fault: "connect_failed", err: err}
}

// ioFault classifies a failed write of the request or read of the head,
// once connected: a timeout is a slow answer, never the backend's fault.
func ioFault(err error) error {
	switch {
	case isLocal(err):
		return &handshakeError{local: true, err: err}
	case isTimeout(err):
		return &handshakeError{slow: true, err: err}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return &handshakeError{fault: "eof", err: err}
	}
	return &handshakeError{fault: "reset", err: err}
}

// readFault classifies a failed read of the response head: an I/O error as
// ioFault does; anything else http.ReadResponse refused is a malformed head.
func readFault(err error) error {
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return ioFault(err)
	}
	return &handshakeError{fault: "malformed_head", err: err}
}

// answerExtensions checks the backend's Sec-WebSocket-Extensions answer
// against what was offered it and rewrites it for the client, per the
// pool's deflate policy (wswire.RewriteAnswer); ext is the client's offer.
func answerExtensions(bc *backendConn, p *pool, ext []string) error {
	vals := bc.resp.Header["Sec-Websocket-Extensions"]
	ans, on, err := wswire.RewriteAnswer(ext, vals, p.deflate, p.deflateBits)
	if err != nil {
		return err
	}
	bc.deflate = on
	if p.deflate == wswire.DeflatePass && p.deflateBits == 0 {
		bc.foreign = wswire.Foreign(vals)
		return nil // the backend's answer as it is
	}
	bc.foreign = wswire.Foreign([]string{ans})
	if ans == "" {
		delete(bc.resp.Header, "Sec-Websocket-Extensions")
	} else {
		bc.resp.Header["Sec-Websocket-Extensions"] = []string{ans}
	}
	return nil
}

// Values of the access log's "deflate" field.
const (
	deflateNone     = ""         // the client offered no compression
	deflateStripped = "stripped" // offered, and removed by the pool's policy
	deflateOffered  = "declined" // offered, the backend did not accept it
	deflatePassed   = "on"       // negotiated, counted compressed
	deflateCounted  = "limit"    // negotiated, counted inflated
)

// deflateOffer is the "deflate" field for a client offer vals of which
// the rewritten offer kept a permessage-deflate offer or not.
func deflateOffer(vals []string, kept bool) string {
	if kept {
		return deflateOffered
	}
	es, _ := wswire.ParseExtensions(vals)
	for _, e := range es {
		if e.Name == wswire.PerMessageDeflate {
			return deflateStripped
		}
	}
	return deflateNone
}
