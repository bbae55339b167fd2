package proxy

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/testbackend"
	"github.com/edgelb/edge/internal/wswire"
	"github.com/gorilla/websocket"
)

// testKey is a valid Sec-WebSocket-Key (the RFC 6455 §1.3 example).
const testKey = "dGhlIHNhbXBsZSBub25jZQ=="

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
	closed  []string // reasons
	dialErr []string // backend ids
	rejects []int
	opened  int
	// unpaired counts ConnClosed calls beyond the ConnOpened ones.
	unpaired int
	closeCh  chan string
	closes   []string // "side code" of each ConnCloseCode
	pings    int
	retries  []string // legs
}

func newRecorder() *recorder { return &recorder{closeCh: make(chan string, 100)} }

func (r *recorder) ConnOpened(string, string) { r.mu.Lock(); r.opened++; r.mu.Unlock() }
func (r *recorder) ConnClosed(_, _, reason string, _ time.Duration, _, _ int64) {
	r.mu.Lock()
	r.closed = append(r.closed, reason)
	if len(r.closed) > r.opened {
		r.unpaired++
	}
	r.mu.Unlock()
	r.closeCh <- reason
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
func (r *recorder) CloseSent(string, int)          {}
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
	select {
	case reason := <-r.closeCh:
		return reason
	case <-time.After(10 * time.Second):
		t.Fatal("no ConnClosed within 10s")
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
}

type edgeConfig struct {
	opts              Options
	lo                ListenerOptions
	tls               bool
	readHeaderTimeout time.Duration
	maxHeaderBytes    int
	wrap              func(net.Listener) net.Listener
	accept            *AcceptLimit // readiness path only: WrapListenerLimit
	cryptoTLS         bool         // TLS records stay with crypto/tls
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
	s, err := New(cfg.opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.srv = s
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	e.addr = ln.Addr().String()
	if cfg.wrap != nil {
		ln = cfg.wrap(ln)
	}
	// As cmd/edge wraps a TLS listener: the readiness splice owns the TLS
	// 1.3 records (RecordLayer) unless the test keeps crypto/tls.
	var rl *RecordLayer
	if cfg.tls && !cfg.cryptoTLS {
		rl = NewRecordLayer()
	}
	switch {
	case goroutinePath(t) && cfg.accept == nil:
	case rl != nil:
		ln = WrapListenerTLS(ln, cfg.accept, nil, rl)
	case cfg.accept != nil:
		ln = WrapListenerLimit(ln, cfg.accept)
	default:
		ln = WrapListener(ln)
	}
	cfg.lo.TLS = cfg.tls
	if cfg.tls {
		cert, pool := selfSigned(t)
		e.certs = pool
		tc := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
		if rl != nil {
			tc.KeyLogWriter = rl.KeyLogWriter()
		}
		ln = tls.NewListener(ln, tc)
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
		ConnContext:                  ConnContext,
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

// pathOf holds the splice forEachPath chose for each of its subtests,
// keyed by the subtest: startEdge looks it up for the test or any test
// nested in it, never by parsing a name.
var pathOf sync.Map // testing.TB -> splicePath

// forEachPath runs f as a subtest per splice path, the path passed
// explicitly to everything under the subtest (spliceFor).
func forEachPath(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	for _, p := range splicePaths {
		t.Run(p.String(), func(t *testing.T) {
			pathOf.Store(t, p)
			t.Cleanup(func() { pathOf.Delete(t) })
			f(t)
		})
	}
}

// spliceFor is the splice forEachPath chose for t, or for the subtest
// of forEachPath t runs under; the readiness splice by default.
func spliceFor(t testing.TB) splicePath {
	var found splicePath
	name := t.Name()
	pathOf.Range(func(k, v any) bool {
		if pt := k.(testing.TB); pt == t || strings.HasPrefix(name, pt.Name()+"/") {
			found = v.(splicePath)
			return false
		}
		return true
	})
	return found
}

// goroutinePath reports whether t's edge uses the goroutine splice.
func goroutinePath(t testing.TB) bool { return spliceFor(t) == spliceGoroutines }

// readinessExpected reports whether connections of t's edge should be
// readiness-driven.
func readinessExpected(t testing.TB) bool {
	return readinessOn && runtime.GOOS == "linux" && !goroutinePath(t)
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

func (e *edge) tlsConfig() *tls.Config {
	return &tls.Config{RootCAs: e.certs, ServerName: "edge.test"}
}

func (e *edge) dialer() *websocket.Dialer {
	return &websocket.Dialer{TLSClientConfig: e.tlsConfig(), HandshakeTimeout: 5 * time.Second}
}

func (e *edge) httpClient() *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: e.tlsConfig()}, Timeout: 5 * time.Second}
}

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

// ask sends a text message and returns the answer.
func ask(t *testing.T, c *websocket.Conn, msg string) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
	_, b, err := c.ReadMessage()
	if err != nil {
		t.Fatalf("read answer to %q: %v", msg, err)
	}
	return string(b)
}

// askHeaders returns the backend's view of the upgrade request headers.
func askHeaders(t *testing.T, c *websocket.Conn) map[string][]string {
	t.Helper()
	var h map[string][]string
	if err := json.Unmarshal([]byte(ask(t, c, "headers")), &h); err != nil {
		t.Fatalf("headers JSON: %v", err)
	}
	return h
}

// upgradeRequest renders a raw upgrade request.
func rawUpgrade(path, host string, extra ...string) string {
	var b strings.Builder
	b.WriteString("GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\n")
	b.WriteString("Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + testKey + "\r\n")
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

// maskedFrame renders a client frame (masked, RFC 6455 §5.3).
func maskedFrame(opcode byte, payload []byte) []byte {
	if len(payload) > 125 {
		panic("test frame too long")
	}
	mask := [4]byte{1, 2, 3, 4}
	f := []byte{0x80 | opcode, 0x80 | byte(len(payload)), mask[0], mask[1], mask[2], mask[3]}
	for i, c := range payload {
		f = append(f, c^mask[i%4])
	}
	return f
}

// readFrame reads one unmasked server frame.
func readFrame(t *testing.T, br *bufio.Reader) (byte, []byte) {
	t.Helper()
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		t.Fatalf("read frame header: %v", err)
	}
	n := int(hdr[1] & 0x7f)
	switch n {
	case 126:
		var l [2]byte
		io.ReadFull(br, l[:])
		n = int(l[0])<<8 | int(l[1])
	case 127:
		t.Fatal("unexpected 64-bit frame")
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(br, p); err != nil {
		t.Fatalf("read frame payload: %v", err)
	}
	return hdr[0] & 0x0f, p
}

// rawBackend runs handle for every connection accepted on a loopback port.
func rawBackend(t *testing.T, handle func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

// read101 reads the answer to the upgrade request written on c, within
// five seconds, and fails the test unless it is a 101; the reader holds
// what came after it.
func read101(t *testing.T, c net.Conn) *bufio.Reader {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 101 {
		t.Fatalf("handshake: %v %v", resp, err)
	}
	return br
}

// readUpgrade reads an upgrade request on a raw backend and returns the
// 101 answer for it.
func readUpgrade(t *testing.T, br *bufio.Reader) (*http.Request, string) {
	req, err := http.ReadRequest(br)
	if err != nil {
		t.Errorf("backend read request: %v", err)
		return nil, ""
	}
	return req, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
		wswire.AcceptKey(req.Header.Get("Sec-WebSocket-Key")) + "\r\n\r\n"
}

// closedPort returns a loopback address nobody listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// selfSigned makes a certificate for edge.test and a pool trusting it.
func selfSigned(t testing.TB) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("key: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "edge.test"},
		DNSNames:              []string{"edge.test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("certificate: %v", err)
	}
	leaf, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitGoroutines waits until the goroutine count is back to base.
func waitGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= base {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("goroutines: got %d, want <= %d\n%s", n, base, buf)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mustPrefixes(s ...string) []netip.Prefix {
	var ps []netip.Prefix
	for _, p := range s {
		ps = append(ps, netip.MustParsePrefix(p))
	}
	return ps
}

// isClosed reports whether err means the peer closed the connection.
func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "reset") || strings.Contains(err.Error(), "close")
}
