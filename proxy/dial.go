package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/edgelb/edge/balance"
	"golang.org/x/net/http/httpguts"
)

// backendConn is a backend that answered the upgrade request.
type backendConn struct {
	conn      *net.TCPConn
	resp      *http.Response
	buffered  []byte // bytes the backend sent after its response, already read
	backend   *balance.Backend
	setCookie bool
}

// errHandshake marks a backend that answered something that is not a valid
// HTTP response or a 101 without the right Sec-WebSocket-Accept.
var errHandshake = errors.New("broken websocket handshake")

// dialUpgrade picks a backend, dials it and performs the WebSocket handshake,
// all before the client is hijacked: on a dial failure or a broken handshake
// nothing has reached the client yet, so the next backend is tried (up to
// Pool.Retries more). The returned backend is Acquired; the caller releases
// it. status is the answer for the client when err is not nil.
func (s *Server) dialUpgrade(ctx context.Context, x *exchange) (bc *backendConn, status int, err error) {
	p := x.pool
	req := balance.Request{Cookie: stickyCookie(x.r, p), ClientIP: x.id.client}
	var triedArr [4]*balance.Backend
	req.Tried = triedArr[:0]
	head := s.upgradeRequest(x)
	for attempt := 0; attempt <= p.Retries; attempt++ {
		res, perr := p.Balancer.Pick(&req)
		if perr != nil {
			if attempt == 0 {
				return nil, http.StatusServiceUnavailable, errNoBackend(p, perr)
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
		bc, err = s.handshake(ctx, p, b, head, x.r.Header.Get("Sec-WebSocket-Key"))
		if err == nil {
			b.ReportSuccess()
			bc.backend, bc.setCookie = b, res.SetCookie
			x.backend = b.ID()
			return bc, 0, nil
		}
		b.Release()
		if ctx.Err() != nil {
			// The client went away; that says nothing about the backend.
			return nil, 499, fmt.Errorf("backend %s: %w", b.ID(), ctx.Err())
		}
		b.ReportFailure()
		s.obs.DialFailed(x.routeName(), b.ID(), err)
		s.log.Debug("backend handshake failed", "route", x.routeName(), "backend", b.ID(), "err", err)
		x.backend = b.ID()
		req.Tried = append(req.Tried, b)
	}
	if isTimeout(err) {
		return nil, http.StatusGatewayTimeout, err
	}
	if errors.Is(err, errBackendFull) {
		return nil, http.StatusServiceUnavailable, err
	}
	return nil, http.StatusBadGateway, err
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
// Sec-WebSocket-Key, -Version, -Protocol and -Extensions pass untouched.
func (s *Server) upgradeRequest(x *exchange) []byte {
	r := x.r
	h := backendHeader(r, x.lo, x.id)
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
// (never one fixed-size read). A 101 must carry the right
// Sec-WebSocket-Accept (RFC 6455 §4.1), otherwise it is a broken handshake.
func (s *Server) handshake(ctx context.Context, p *Pool, b *balance.Backend, head []byte, key string) (*backendConn, error) {
	d := net.Dialer{
		Timeout: dialTimeout(p),
		// A backend host that vanishes without a reset leaves an idle
		// WebSocket open forever unless probed. Go's defaults (15 s, 15 s,
		// 9), except that the count is the kernel's (also 9 unless tuned):
		// one setsockopt less per connection.
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 15 * time.Second, Count: -1},
	}
	c, err := d.DialContext(ctx, "tcp", b.Addr())
	if err != nil {
		return nil, fmt.Errorf("backend %s: dial: %w", b.ID(), err)
	}
	conn, ok := c.(*net.TCPConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("backend %s: dial returned %T", b.ID(), c)
	}
	// The request context ends when the client goes away: stop waiting then.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	conn.SetDeadline(time.Now().Add(handshakeTimeout(p)))
	if _, err := conn.Write(head); err != nil {
		conn.Close()
		return nil, fmt.Errorf("backend %s: write handshake: %w", b.ID(), err)
	}
	br := s.getReader(conn)
	// Pooled: a fresh 4 KiB reader per connection is garbage the collector
	// keeps as headroom (see doc.go), and the handshake needs it only here.
	// Nothing read from br outlives this function (a 101 has no body; a
	// relayed body is read below).
	defer s.putReader(br)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("backend %s: read handshake: %w", b.ID(), err)
	}
	bc := &backendConn{conn: conn, resp: resp}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		// Relayed as an ordinary response; read a bounded body now.
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxRelayBody+1))
		conn.Close()
		if err != nil {
			return nil, fmt.Errorf("backend %s: read %d body: %w", b.ID(), resp.StatusCode, err)
		}
		if len(body) > maxRelayBody {
			return nil, fmt.Errorf("backend %s: %d body over %d bytes: %w", b.ID(), resp.StatusCode, maxRelayBody, errHandshake)
		}
		bc.buffered = body
		bc.conn = nil
		return bc, nil
	}
	if resp.Header.Get("Sec-WebSocket-Accept") != acceptKey(key) ||
		!httpguts.HeaderValuesContainsToken(resp.Header["Upgrade"], "websocket") {
		conn.Close()
		return nil, fmt.Errorf("backend %s: bad Sec-WebSocket-Accept or Upgrade: %w", b.ID(), errHandshake)
	}
	// Frames the backend sent right behind its 101 sit in br: keep them.
	if n := br.Buffered(); n > 0 {
		bc.buffered, _ = br.Peek(n)
		bc.buffered = append([]byte(nil), bc.buffered...)
	}
	return bc, nil
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
// the client as an ordinary response.
func relayResponse(w http.ResponseWriter, bc *backendConn) {
	h := w.Header()
	for k, vv := range bc.resp.Header {
		h[k] = vv
	}
	removeHopByHop(h)
	delete(h, "Content-Length")
	h.Set("Content-Length", fmt.Sprint(len(bc.buffered)))
	w.WriteHeader(bc.resp.StatusCode)
	w.Write(bc.buffered)
}
