package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/valyala/fasthttp"
)

// dialError marks a failure to connect, the only plain-HTTP failure after
// which another backend may be tried: nothing was sent.
type dialError struct{ err error }

func (e *dialError) Error() string { return "dial: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// hostClients caches one fasthttp.HostClient (a keep-alive pool) per pool
// and backend address. Entries whose backend left every pool are removed
// when a new entry is added, so the cache never outgrows the membership.
type hostClients struct {
	mu sync.Mutex
	m  map[string]*fasthttp.HostClient
}

func (h *hostClients) get(s *Server, p *Pool, addr string) *fasthttp.HostClient {
	key := p.Name + "\x00" + addr
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.m[key]; c != nil {
		return c
	}
	if h.m == nil {
		h.m = map[string]*fasthttp.HostClient{}
	}
	h.pruneLocked(s)
	dt := dialTimeout(p)
	c := &fasthttp.HostClient{
		Addr: addr,
		Dial: func(a string) (net.Conn, error) {
			conn, err := net.DialTimeout("tcp", a, dt)
			if err != nil {
				return nil, &dialError{err}
			}
			return conn, nil
		},
		MaxIdleConnDuration:      90 * time.Second,
		ReadTimeout:              requestTimeout(p),
		WriteTimeout:             p.WriteTimeout,
		MaxResponseBodySize:      int(maxBody(p)),
		DisablePathNormalizing:   true,
		NoDefaultUserAgentHeader: true,
		// fasthttp retries idempotent requests on a stale keep-alive
		// connection; a dial failure is ours to retry, on another backend.
		RetryIfErr: func(req *fasthttp.Request, _ int, err error) (bool, bool) {
			var de *dialError
			return false, !errors.As(err, &de) && req.Header.IsGet()
		},
	}
	h.m[key] = c
	return c
}

// pruneLocked drops clients for backends no longer in any routed pool.
func (h *hostClients) pruneLocked(s *Server) {
	live := map[string]bool{}
	for _, p := range s.routes.Load().pools {
		for _, b := range p.Balancer.Snapshot().Backends {
			live[p.Name+"\x00"+b.Addr()] = true
		}
	}
	for k, c := range h.m {
		if !live[k] {
			c.CloseIdleConnections()
			delete(h.m, k)
		}
	}
}

func (h *hostClients) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, c := range h.m {
		c.CloseIdleConnections()
		delete(h.m, k)
	}
}

func requestTimeout(p *Pool) time.Duration {
	if p.RequestTimeout > 0 {
		return p.RequestTimeout
	}
	return defaultRequestTimeout
}

func maxBody(p *Pool) int64 {
	if p.MaxBodyBytes > 0 {
		return p.MaxBodyBytes
	}
	return defaultMaxBodyBytes
}

// idempotent methods (RFC 9110 §9.2.2) may be retried on another backend.
func idempotent(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// servePlain proxies a non-upgrade request (long-polling transports such as
// socket.io and SockJS use these) through the same pick and stickiness.
func (s *Server) servePlain(w http.ResponseWriter, x *exchange) {
	r, p := x.r, x.pool
	limit := maxBody(p)
	if r.ContentLength > limit {
		x.rejectBackend(w, http.StatusRequestEntityTooLarge, "body_too_large")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		x.rejectBackend(w, http.StatusBadRequest, "client_closed")
		return
	}
	if int64(len(body)) > limit {
		x.rejectBackend(w, http.StatusRequestEntityTooLarge, "body_too_large")
		return
	}
	x.in = int64(len(body))

	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.DisableNormalizing()
	uri := r.RequestURI
	if uri == "" || !strings.HasPrefix(uri, "/") {
		uri = r.URL.RequestURI()
	}
	req.SetRequestURI(uri)
	req.Header.SetMethod(r.Method)
	req.Header.SetHost(r.Host)
	for k, vv := range backendHeader(r, x.lo, x.id) {
		if k == "Host" {
			continue
		}
		for _, v := range vv {
			req.Header.Add(k, v)
		}
	}
	if len(body) > 0 || r.ContentLength == 0 && (r.Method == http.MethodPost || r.Method == http.MethodPut) {
		req.SetBodyRaw(body)
	}
	if r.Method == http.MethodHead {
		resp.SkipBody = true
	}

	preq := balance.Request{Cookie: stickyCookie(r, p), ClientIP: x.id.client}
	var triedArr [4]*balance.Backend
	preq.Tried = triedArr[:0]
	attempts := 1
	if idempotent(r.Method) {
		attempts += p.Retries
	}
	var lastErr error
	for i := 0; i < attempts; i++ {
		res, perr := p.Balancer.Pick(&preq)
		if perr != nil {
			if i == 0 {
				x.rejectBackend(w, http.StatusServiceUnavailable, "no_backend")
				return
			}
			break
		}
		b := res.Backend
		x.backend = b.ID()
		if !b.TryAcquire() {
			// The backend's last slot went to another connection since Pick.
			preq.Tried = append(preq.Tried, b)
			lastErr = fmt.Errorf("backend %s: %w", b.ID(), errBackendFull)
			continue
		}
		err := s.hc.get(s, p, b.Addr()).DoTimeout(req, resp, requestTimeout(p))
		b.Release()
		if err == nil {
			b.ReportSuccess()
			s.relayPlain(w, x, resp, res, b)
			return
		}
		lastErr = fmt.Errorf("backend %s: %w", b.ID(), err)
		b.ReportFailure()
		s.obs.DialFailed(x.routeName(), b.ID(), lastErr)
		var de *dialError
		if !errors.As(err, &de) {
			break
		}
		preq.Tried = append(preq.Tried, b)
		resp.Reset()
		if r.Method == http.MethodHead {
			resp.SkipBody = true
		}
	}
	s.log.Debug("plain request failed", "route", x.routeName(), "backend", x.backend, "err", lastErr)
	status, reason := http.StatusBadGateway, "error"
	switch {
	case errors.Is(lastErr, fasthttp.ErrTimeout):
		status, reason = http.StatusGatewayTimeout, "timeout"
	case errors.Is(lastErr, fasthttp.ErrBodyTooLarge):
		reason = "body_too_large"
	}
	x.rejectBackend(w, status, reason)
}

// rejectBackend answers a plain request from the proxy (no access log; the
// caller writes it).
func (x *exchange) rejectBackend(w http.ResponseWriter, status int, reason string) {
	x.status, x.reason = status, reason
	x.s.obs.Rejected(x.routeName(), status, reason)
	x.s.obs.HTTPRequest(x.routeName(), x.backend, status, x.s.now().Sub(x.start))
	http.Error(w, http.StatusText(status), status)
}

// relayPlain copies the backend's answer to the client, without hop-by-hop
// headers, adding the sticky cookie when balance asks for one.
func (s *Server) relayPlain(w http.ResponseWriter, x *exchange, resp *fasthttp.Response, res balance.Result, b *balance.Backend) {
	h := w.Header()
	connHdr := string(resp.Header.Peek("Connection"))
	for k, v := range resp.Header.All() {
		name := http.CanonicalHeaderKey(string(k))
		if name == "Content-Length" || isHopByHop(name, connHdr) {
			continue
		}
		h[name] = append(h[name], string(v))
	}
	if res.SetCookie {
		h.Add("Set-Cookie", setCookieValue(x.pool, b, x.lo.TLS || x.r.TLS != nil))
	}
	bodyLen := len(resp.Body())
	if x.r.Method != http.MethodHead {
		h.Set("Content-Length", strconv.Itoa(bodyLen))
	}
	status := resp.StatusCode()
	w.WriteHeader(status)
	if x.r.Method != http.MethodHead {
		w.Write(resp.Body())
		x.out = int64(bodyLen)
	}
	x.status, x.reason = status, "done"
	s.obs.HTTPRequest(x.routeName(), b.ID(), status, s.now().Sub(x.start))
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
