package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/testbackend"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/gorilla/websocket"
)

// startBackend starts a testbackend and closes it at the end of the test.
func startBackend(t *testing.T, id string) *testbackend.Server {
	t.Helper()
	b, err := testbackend.Start(id)
	if err != nil {
		t.Fatalf("start backend %s: %v", id, err)
	}
	t.Cleanup(b.Close)
	return b
}

// newPool builds a Pool over members id=addr.
func newPool(t testing.TB, name string, mode balance.Mode, addrs map[string]string) *Pool {
	t.Helper()
	bp, err := balance.NewPool(balance.PoolOptions{Name: name, Mode: mode, Cookie: balance.CookieOptions{Keys: [][]byte{[]byte("0123456789abcdef0123456789abcdef")}}})
	if err != nil {
		t.Fatalf("new pool: %v", err)
	}
	var ms []balance.Member
	for id, addr := range addrs {
		ms = append(ms, balance.Member{ID: id, Addr: addr, Weight: 1})
	}
	if err := bp.Update(ms); err != nil {
		t.Fatalf("update pool: %v", err)
	}
	return &Pool{Name: name, Balancer: bp, DialTimeout: time.Second, HandshakeTimeout: 2 * time.Second}
}

// recorder is an Observer that records events for assertions.
type recorder struct {
	mu      sync.Mutex
	tokens  []string // TokenChecked outcomes
	closed  []string // reasons
	dialErr []string // backend ids
	rejects []int
	opened  int
	// unpaired counts ConnClosed calls beyond the ConnOpened ones.
	unpaired int
	// closeCh queues every ConnClosed reason for waitClosed. A send never
	// blocks the edge: past its room a reason is counted in dropped, and
	// waitClosed then fails, its order being broken.
	closeCh chan string
	dropped int
	closes  []string // "side code" of each ConnCloseCode
	pings   int
	retries []string // legs
	deflate []string // Deflate outcomes
	// wire and inflated sum Inflated.
	wire, inflated int64
	rateLimited    []string // RateLimited actions
}

func newRecorder() *recorder { return &recorder{closeCh: make(chan string, 4096)} }

func (r *recorder) ConnOpened(string, string) { r.mu.Lock(); r.opened++; r.mu.Unlock() }
func (r *recorder) ConnClosed(_, _, reason string, _ time.Duration, _, _ int64) {
	r.mu.Lock()
	r.closed = append(r.closed, reason)
	if len(r.closed) > r.opened {
		r.unpaired++
	}
	r.mu.Unlock()
	select {
	case r.closeCh <- reason:
	default:
		r.mu.Lock()
		r.dropped++
		r.mu.Unlock()
	}
}
func (r *recorder) DialFailed(_, backend string, _ error) {
	r.mu.Lock()
	r.dialErr = append(r.dialErr, backend)
	r.mu.Unlock()
}
func (r *recorder) Rejected(_ string, status int, _ string) {
	r.mu.Lock()
	r.rejects = append(r.rejects, status)
	r.mu.Unlock()
}
func (r *recorder) HTTPRequest(string, string, int, time.Duration) {}
func (r *recorder) ConnCloseCode(_ string, side CloseSide, code int) {
	r.mu.Lock()
	r.closes = append(r.closes, string(side)+" "+strconv.Itoa(code))
	r.mu.Unlock()
}
func (r *recorder) Upgraded(string, time.Duration) {}
func (r *recorder) PingSent(string)                { r.mu.Lock(); r.pings++; r.mu.Unlock() }

// pingsSent is how many heartbeat pings edge sent so far.
func (r *recorder) pingsSent() int { r.mu.Lock(); defer r.mu.Unlock(); return r.pings }

func (r *recorder) CloseSent(string, int) {}
func (r *recorder) Deflate(_, outcome string) {
	r.mu.Lock()
	r.deflate = append(r.deflate, outcome)
	r.mu.Unlock()
}
func (r *recorder) TokenChecked(_, outcome string) {
	r.mu.Lock()
	r.tokens = append(r.tokens, outcome)
	r.mu.Unlock()
}
func (r *recorder) RateLimited(_, action string) {
	r.mu.Lock()
	r.rateLimited = append(r.rateLimited, action)
	r.mu.Unlock()
}
func (r *recorder) Inflated(_ string, wire, inflated int64) {
	r.mu.Lock()
	r.wire, r.inflated = r.wire+wire, r.inflated+inflated
	r.mu.Unlock()
}
func (r *recorder) Retried(_, leg string) {
	r.mu.Lock()
	r.retries = append(r.retries, leg)
	r.mu.Unlock()
}

// closedCount reports how many connections have closed so far.
func (r *recorder) closedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.closed)
}

func (r *recorder) dialFailures() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.dialErr...)
}

// waitClosed waits for the next ConnClosed and returns its reason.
func (r *recorder) waitClosed(t *testing.T) string {
	t.Helper()
	r.mu.Lock()
	dropped := r.dropped
	r.mu.Unlock()
	if dropped > 0 {
		t.Fatalf("%d ConnClosed reasons dropped: the queue was full", dropped)
	}
	select {
	case reason := <-r.closeCh:
		return reason
	case <-time.After(30 * time.Second):
		t.Fatal("no ConnClosed within 30s")
		return ""
	}
}

// edge is a running proxy behind an http.Server configured the way
// cmd/edge configures it.
type edge struct {
	srv   *Server
	addr  string
	tls   bool
	obs   *recorder
	certs *x509.CertPool
	// certPEM is the certificate (its own root) for clients we did not
	// write; its name is edge.test.
	certPEM []byte
	// rl is the listener's record layer; nil when crypto/tls keeps
	// every record.
	rl *recordLayer
}

type edgeConfig struct {
	opts              Options
	lo                ListenerOptions
	tls               bool
	readHeaderTimeout time.Duration
	maxHeaderBytes    int
	wrap              func(net.Listener) net.Listener
	accept            *AcceptLimit // readiness path only: WrapListenerLimit
	// splice is the splice path under test; the readiness splice unless
	// a test run by forEachPath passes its own.
	splice splicePath
	// cryptoTLS keeps every TLS record with crypto/tls (the record
	// layer is off, as for TLS 1.2 clients).
	cryptoTLS bool
	// tlsMod, when set, changes the listener's tls.Config (client
	// certificates, say).
	tlsMod func(*tls.Config)
}

func startEdge(t testing.TB, cfg edgeConfig) *edge {
	t.Helper()
	e := &edge{tls: cfg.tls, obs: newRecorder()}
	if cfg.opts.Observer == nil {
		cfg.opts.Observer = e.obs
	}
	if cfg.opts.AccessLog == nil {
		cfg.opts.AccessLog = slog.New(slog.DiscardHandler)
	}
	if cfg.opts.Quiet == nil {
		// As cmd/edge wires it: memory goes back once churn is over.
		cfg.opts.Quiet = debug.FreeOSMemory
	}
	s, err := New(cfg.opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.srv = s
	// As cmd/edge runs it, under its owner's context; it returns once
	// that ended and the Server closed (the cleanup below).
	runCtx, stopRun := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); s.Run(runCtx) }()
	<-s.rt.Started()
	t.Cleanup(func() {
		stopRun()
		s.Close()
		<-ran
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	e.addr = ln.Addr().String()
	if cfg.wrap != nil {
		ln = cfg.wrap(ln)
	}
	// As cmd/edge wraps a TLS listener (ListenTLS): the readiness splice
	// owns the TLS 1.3 records unless the test keeps crypto/tls.
	recordLayer := cfg.tls && !cfg.cryptoTLS
	switch {
	case cfg.splice == spliceGoroutines && cfg.accept == nil:
	case recordLayer:
	case cfg.accept != nil:
		ln = WrapListenerLimit(ln, cfg.accept)
	default:
		ln = WrapListener(ln)
	}
	cfg.lo.TLS = cfg.tls
	if cfg.tls {
		cert := testkit.SelfSigned(t, "edge.test")
		e.certs = cert.Pool()
		e.certPEM = cert.CertPEM()
		tc := &tls.Config{Certificates: []tls.Certificate{cert.TLS()}, NextProtos: []string{"http/1.1"}}
		if cfg.tlsMod != nil {
			cfg.tlsMod(tc)
		}
		if recordLayer && (cfg.splice != spliceGoroutines || cfg.accept != nil) {
			ln, e.rl, err = listenTLS(ln, tc, cfg.accept, nil)
			if err != nil {
				t.Fatal(err)
			}
		} else {
			ln = tls.NewListener(ln, tc)
		}
	}
	if cfg.readHeaderTimeout == 0 {
		cfg.readHeaderTimeout = 5 * time.Second
	}
	if cfg.maxHeaderBytes == 0 {
		cfg.maxHeaderBytes = 16 << 10
	}
	hs := &http.Server{
		Handler:           s.Handler(cfg.lo),
		ReadHeaderTimeout: cfg.readHeaderTimeout,
		MaxHeaderBytes:    cfg.maxHeaderBytes,
		ErrorLog:          nil,
		// As cmd/edge runs it: OPTIONS * reaches the handler.
		DisableGeneralOptionsHandler: true,
		ConnContext:                  connContext,
	}
	done := make(chan struct{})
	go func() { defer close(done); hs.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(ctx)
		s.Close()
		<-done
		e.obs.mu.Lock()
		defer e.obs.mu.Unlock()
		if e.obs.unpaired > 0 {
			t.Errorf("observer: %d ConnClosed without a ConnOpened before them", e.obs.unpaired)
		}
	})
	return e
}

// splicePath names which splice a test's edge uses.
type splicePath int

// Splice paths: the readiness-driven splice (listener wrapped by
// WrapListener, the default) and the goroutine splice (plain listener,
// two goroutines per connection).
const (
	spliceReadiness splicePath = iota
	spliceGoroutines
)

func (p splicePath) String() string {
	if p == spliceGoroutines {
		return "goroutines"
	}
	return "readiness"
}

var splicePaths = []splicePath{spliceReadiness, spliceGoroutines}

// forEachPath runs f as a subtest per splice path, passing the path to
// f: f puts it in the edgeConfig of every edge it starts.
func forEachPath(t *testing.T, f func(t *testing.T, sp splicePath)) {
	t.Helper()
	for _, sp := range splicePaths {
		t.Run(sp.String(), func(t *testing.T) { f(t, sp) })
	}
}

// readinessExpected reports whether connections of an edge on splice
// path sp should be readiness-driven.
func readinessExpected(sp splicePath) bool {
	return readinessOn && runtime.GOOS == "linux" && sp != spliceGoroutines
}

// url returns the WebSocket URL of path on the edge.
func (e *edge) url(path string) string {
	if e.tls {
		return "wss://" + e.addr + path
	}
	return "ws://" + e.addr + path
}

func (e *edge) httpURL(path string) string {
	if e.tls {
		return "https://" + e.addr + path
	}
	return "http://" + e.addr + path
}

// tlsConfig, dialer and httpClient are clients trusting the edge's
// certificate (for edge.test); without TLS they connect in the clear.
func (e *edge) tlsConfig() *tls.Config { return testkit.ClientTLS(e.certs, "edge.test") }

func (e *edge) dialer() *websocket.Dialer { return testkit.Dialer(e.certs, "edge.test") }

func (e *edge) httpClient() *http.Client { return testkit.HTTPClient(e.certs, "edge.test") }

// dialWS opens a WebSocket through the edge and closes it at test end.
func (e *edge) dialWS(t *testing.T, path string, h http.Header) (*websocket.Conn, *http.Response) {
	t.Helper()
	c, resp, err := e.dialer().Dial(e.url(path), h)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dial %s: %v (status %d)", path, err, status)
	}
	t.Cleanup(func() { c.Close() })
	return c, resp
}

// rawConn dials the edge without any HTTP client.
func (e *edge) rawConn(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatalf("dial edge: %v", err)
	}
	if e.tls {
		c = tls.Client(c, e.tlsConfig())
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func mustPrefixes(s ...string) []netip.Prefix {
	var ps []netip.Prefix
	for _, p := range s {
		ps = append(ps, netip.MustParsePrefix(p))
	}
	return ps
}
