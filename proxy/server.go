package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgelb/edge/auth"
	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/hostname"
	"github.com/edgelb/edge/proxy/internal/handoff"
	"github.com/edgelb/edge/proxy/internal/ready"
)

// Server proxies WebSocket and plain HTTP requests to backend pools.
type Server struct {
	log, access *slog.Logger
	obs         Observer
	now         func() time.Time
	maxConns    int64

	routes   atomic.Pointer[routeTable]
	setMu    sync.Mutex   // serialises SetRoutes (counters, transports)
	inflight atomic.Int64 // for MaxConns
	poolMu   sync.Mutex
	poolUse  map[string]*atomic.Int64 // per pool name, kept across reloads

	ctx     context.Context // ends when the Server is closed
	cancel  context.CancelFunc
	bufs    bufPool   // *[]byte of bufSize
	small   sync.Pool // *[]byte of smallBufSize
	readers sync.Pool // *bufio.Reader for backend handshakes

	// testReadHook, when set by a test, sees every read of a backend's
	// handshake answer.
	testReadHook func(n int)

	reg      registry
	draining atomic.Bool

	// Tokens (auth.go): the revocations in force, the counter that
	// places each expiry in its pool's spread, and the live connections
	// per subject of pools with a per-subject limit.
	revoked   revokedSet
	expirySeq atomic.Uint64
	subjects  subjects
	hc        hostClients

	// The readiness runtime (Linux): pollers and the sweeper, from Run
	// until Run's context ended and the Server closed.
	rt        *ready.Runtime
	closed    chan struct{} // closed by Close
	closeOnce sync.Once
	// TLS 1.3 WebSockets whose records the splice took from crypto/tls,
	// and TLS WebSockets it left there (tlsrecord_linux.go).
	recOwned, recKept atomic.Int64

	// testHandoff, set by a test before Handoff, changes its sender's
	// bounds and records its plan; nil outside tests.
	testHandoff *handoffHooks
	// testRestAfter, when set by a test, replaces how long a record-layer
	// client must be quiet before the sweeper drops its ciphers
	// (restAfter, Sweep; not restIfStill's), in nanoseconds. Atomic: the
	// sweeper reads it.
	testRestAfter atomic.Int64
}

// handoffHooks is what a test sets on Handoff (Server.testHandoff).
type handoffHooks struct {
	// sender's non-zero fields replace handoff.Move's defaults.
	sender handoff.Options
	// plan is when Handoff's 1012s go, in order; guarded by reg.mu.
	plan []time.Duration
}

// New returns a Server for the routes in opts.
func New(opts Options) (*Server, error) {
	s := &Server{
		log:      opts.Logger,
		access:   opts.AccessLog,
		obs:      opts.Observer,
		now:      opts.Now,
		maxConns: opts.MaxConns,
		poolUse:  map[string]*atomic.Int64{},
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.access == nil {
		s.access = slog.New(slog.DiscardHandler)
	}
	if s.obs == nil {
		s.obs = NopObserver{}
	}
	if s.now == nil {
		s.now = time.Now
	}
	if err := s.SetRoutes(opts.Routes); err != nil {
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.closed = make(chan struct{})
	s.rt = ready.New(ready.Options{Logger: s.log, Quiet: opts.Quiet})
	return s, nil
}

// Started is closed once Run has started the readiness runtime (or found
// it unavailable): WebSockets upgraded from then on can take it.
func (s *Server) Started() <-chan struct{} { return s.rt.Started() }

// Run runs the readiness runtime (Linux: one epoll poller per GOMAXPROCS
// and the sweeper of timeouts) that splices WebSockets without a
// goroutine of their own, and returns once ctx ended and Close returned,
// after stopping it. Until Run starts, and without it, every WebSocket
// takes the goroutine splice, and Adopt waits for it.
func (s *Server) Run(ctx context.Context) error {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	// The connections it runs end with Close (after a drain), not with
	// ctx: the runtime outlives them.
	stop := context.AfterFunc(ctx, func() {
		<-s.closed
		cancel()
	})
	defer stop()
	return s.rt.Run(rctx)
}

// SetRoutes validates and atomically replaces the routing table. Live
// connections keep the pool they were placed in. On error the old table
// stays.
func (s *Server) SetRoutes(routes []Route) error {
	t, err := compileRoutes(routes)
	if err != nil {
		return err
	}
	s.setMu.Lock()
	defer s.setMu.Unlock()
	// Resolved before any request sees the pools: nothing on the data
	// path looks a counter or a transport up.
	for _, p := range t.pools {
		p.use = s.poolCounter(p.name)
	}
	s.hc.attach(t.pools)
	s.routes.Store(t)
	return nil
}

// Close force-closes every live connection and waits until their
// goroutines have finished. Call Drain first for a graceful stop.
func (s *Server) Close() error {
	s.draining.Store(true)
	s.reg.mu.Lock()
	s.reg.closed = true
	s.reg.mu.Unlock()
	s.cancel()
	// Readiness-driven connections have no goroutine watching s.ctx (the
	// others' close twice, harmlessly).
	for _, c := range s.reg.appendAll(nil) {
		c.closeBoth(ReasonShutdown)
	}
	s.reg.wait(context.Background())
	s.closeOnce.Do(func() { close(s.closed) })
	s.hc.closeAll()
	return nil
}

// poolCounter returns the connection counter of a pool, by name, so that a
// reload building new Pool values keeps counting the old connections.
func (s *Server) poolCounter(name string) *atomic.Int64 {
	s.poolMu.Lock()
	defer s.poolMu.Unlock()
	c := s.poolUse[name]
	if c == nil {
		c = new(atomic.Int64)
		s.poolUse[name] = c
	}
	return c
}

// exchange is the state of one request shared by the WebSocket and plain
// HTTP paths, down to its access-log line.
type exchange struct {
	s       *Server
	lo      *ListenerOptions
	r       *http.Request
	start   time.Time
	pool    *pool
	id      identity
	backend string
	status  int
	reason  string
	in, out int64
	// What admit took (one of the pool's connections, counted in
	// pool.use), given back by release. The four flags share a word.
	released atomic.Bool
	admitted bool
	// ws: a WebSocket upgrade, else plain HTTP (the access line's kind);
	// a bool in released's padding rather than a string keeps the
	// exchange, which a held connection keeps, in the 352-byte size class.
	ws bool
	// ridPacked: the request id is rid (see packRequestID), reqID empty.
	ridPacked bool
	// Copied from r for the access log, so a long-lived connection can
	// drop the request (and its header map) after the handshake; detach
	// gives host and path an allocation of their own.
	method, host, path string
	tls                string // TLS version name; "" on a plain listener
	reqID              string // X-Request-Id, a trusted proxy's or made up; see requestID
	rid                [16]byte
	clientReqID        string // an untrusted peer's X-Request-Id, logged apart
	// WebSocket only: time from the request to the 101, and who closed
	// first with which code (0: no close frame seen).
	upgrade   time.Duration
	closeSide CloseSide
	closeCode int
	// deflate: what became of a compression offer (deflateNone...), and
	// the wire and inflated bytes of the client's compressed messages.
	deflate          string
	zWire, zInflated uint64
}

// detach readies the exchange of a WebSocket for a long hold: what the
// access log keeps of the request is copied out of what net/http read.
// The method and path are substrings of the request line and the host a
// header value, two objects a held connection would keep for its
// lifetime; one copy of the host and path, the method's constant and the
// request id's bytes (packRequestID) keep none of them.
func (x *exchange) detach() {
	if x.method == http.MethodGet {
		x.method = http.MethodGet
	}
	var b strings.Builder
	b.Grow(len(x.host) + len(x.path))
	b.WriteString(x.host)
	b.WriteString(x.path)
	hp := b.String()
	x.host, x.path = hp[:len(x.host)], hp[len(x.host):]
	x.packRequestID()
}

func (x *exchange) routeName() string {
	if x.pool == nil {
		return ""
	}
	return x.pool.name
}

// kind names the exchange in the access line.
func (x *exchange) kind() string {
	if x.ws {
		return "ws"
	}
	return "http"
}

// logAccess writes the access line; docs/METRICS.md ("Log fields") lists them.
// Durations are seconds as floats, like Prometheus's base unit.
func (x *exchange) logAccess() { x.logAccessAs(nil, "") }

// logAccessAs writes the access line of a request or connection made
// with a token: its subject goes in as SubjectHash in hex ("sub"), or as
// name when the pool logs subjects (Auth.LogSubject); never the token.
func (x *exchange) logAccessAs(who *auth.Mark, name string) {
	client := ""
	if x.id.client.IsValid() {
		client = x.id.client.String()
	}
	attrs := [23]slog.Attr{
		slog.String("listener", x.lo.Name),
		slog.String("kind", x.kind()),
		slog.String("request_id", x.requestID()),
		slog.String("client", client),
		slog.String("tls", x.tls),
		slog.String("method", x.method),
		slog.String("host", x.host),
		slog.String("path", x.path),
		slog.String("route", x.routeName()),
		slog.String("backend", x.backend),
		slog.Int("status", x.status),
		slog.Float64("dur_s", x.s.now().Sub(x.start).Seconds()),
		slog.Int64("bytes_in", x.in),
		slog.Int64("bytes_out", x.out),
		slog.String("reason", x.reason),
	}
	n := 15
	if x.clientReqID != "" {
		attrs[n] = slog.String("client_request_id", x.clientReqID)
		n++
	}
	if x.ws && x.status == http.StatusSwitchingProtocols {
		attrs[n] = slog.Float64("upgrade_s", x.upgrade.Seconds())
		attrs[n+1] = slog.String("close_side", string(x.closeSide))
		attrs[n+2] = slog.Int("close_code", x.closeCode)
		attrs[n+3] = slog.String("deflate", x.deflate)
		n += 4
		if x.deflate == deflateCounted {
			attrs[n] = slog.Uint64("deflate_wire_in", x.zWire)
			attrs[n+1] = slog.Uint64("deflate_inflated_in", x.zInflated)
			n += 2
		}
	}
	switch {
	case name != "":
		attrs[n] = slog.String("sub", name)
		n++
	case who != nil && who.Subject != 0:
		attrs[n] = slog.String("sub", fmt.Sprintf("%016x", who.Subject))
		n++
	}
	x.s.access.LogAttrs(context.Background(), slog.LevelInfo, "access", attrs[:n]...)
}

// reject answers the request from the proxy itself.
func (x *exchange) reject(w http.ResponseWriter, status int, reason string) {
	x.status, x.reason = status, reason
	x.s.obs.Rejected(x.routeName(), status, reason)
	x.answer(w, func() { http.Error(w, http.StatusText(status), status) })
	x.logAccess()
}

// answer writes an answer of edge's own within the listener's
// AnswerTimeout, then lifts the deadline so that the next request on the
// connection (a long poll, an upgrade) is not bound by it. http.Server's
// WriteTimeout cannot do this: it would also bound every proxied answer
// and, once set, a hijacked WebSocket.
func (x *exchange) answer(w http.ResponseWriter, write func()) {
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(x.lo.AnswerTimeout))
	write()
	if rc.Flush() == nil {
		_ = rc.SetWriteDeadline(time.Time{})
	}
}

// spreadRetryAfter picks a Retry-After between after and four times it, in
// whole seconds: clients refused in the same second should not all come
// back in the same second.
func spreadRetryAfter(after time.Duration) string {
	sec := max(int64(math.Ceil(after.Seconds())), 1)
	return strconv.FormatInt(sec+rand.Int64N(3*sec+1), 10)
}

// sniMatchesHost reports whether the request's Host names the server the
// client asked for in SNI, ignoring case, a port and a trailing dot.
func sniMatchesHost(sni, host string) bool {
	return sni == "" || hostname.Request(sni) == hostname.Request(host)
}

// stickyCookie reads the pool's sticky cookie from the request.
func stickyCookie(r *http.Request, p *pool) string {
	if c, err := r.Cookie(p.cookieName); err == nil {
		return c.Value
	}
	return ""
}

// setCookieValue renders the Set-Cookie value naming backend b.
func setCookieValue(p *pool, b *balance.Backend, secure bool) string {
	c := http.Cookie{
		Name:     p.cookieName,
		Value:    b.CookieValue(),
		Path:     p.cookiePath,
		Secure:   secure,
		HttpOnly: true,
		SameSite: p.cookieSameSite,
		MaxAge:   p.cookieMaxAge,
	}
	return c.String()
}

// isTimeout reports whether err is a deadline or timeout error.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// errNoBackend wraps balance.ErrNoBackend with the pool name.
func errNoBackend(p *pool, err error) error {
	return fmt.Errorf("pool %q: %w", p.name, err)
}

// RecordLayerTakeovers reports how many TLS WebSockets had their records
// taken over by edge's record layer (owned) and how many stayed with
// crypto/tls (kept: TLS 1.2, a handshake log over its bound), among
// those the readiness-driven splice took over since New.
func (s *Server) RecordLayerTakeovers() (owned, kept int64) {
	return s.recOwned.Load(), s.recKept.Load()
}
