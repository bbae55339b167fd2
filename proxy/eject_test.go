package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/testkit"
)

// ejectingPool builds a pool over addrs that ejects a backend on its first
// counted failure, so any failure wrongly blamed on a backend shows.
func ejectingPool(t *testing.T, addrs map[string]string) *Pool {
	t.Helper()
	bp, err := balance.NewPool(balance.PoolOptions{Name: "chat", Eject: balance.EjectOptions{Failures: 1, Cooldown: time.Minute, MaxPercent: 100}})
	if err != nil {
		t.Fatalf("new pool: %v", err)
	}
	var ms []balance.Member
	for id, addr := range addrs {
		ms = append(ms, balance.Member{ID: id, Addr: addr})
	}
	if err := bp.Update(ms); err != nil {
		t.Fatalf("update: %v", err)
	}
	return &Pool{Name: "chat", Balancer: bp, DialTimeout: time.Second, HandshakeTimeout: 2 * time.Second, Retries: 1}
}

func ejectedIDs(p *Pool) []string {
	var out []string
	for _, b := range p.Balancer.Snapshot().Backends {
		if b.Ejected() {
			out = append(out, b.ID())
		}
	}
	return out
}

// answerBackend answers every upgrade request with resp.
func answerBackend(t *testing.T, resp string) string {
	return testkit.RawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, resp)
	})
}

// upgradeAnswer sends one raw upgrade request to e and reads the answer
// with its whole body.
func upgradeAnswer(t *testing.T, e *edge, path string, extra ...string) (*http.Response, []byte) {
	t.Helper()
	c := e.rawConn(t)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, testkit.RawUpgrade(path, "x", extra...))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, body
}

// TestLargeNon101EjectsNothing: a complete 404 bigger than any in-memory
// bound is the backend's answer, relayed whole, and no failure.
func TestLargeNon101EjectsNothing(t *testing.T) {
	page := strings.Repeat("not found. ", 200<<10/11)
	resp404 := fmt.Sprintf("HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", len(page), page)
	chunked := "HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(page), page)
	p := ejectingPool(t, map[string]string{"a": answerBackend(t, resp404), "b": answerBackend(t, chunked)})
	e := startEdge(t, edgeConfig{opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
	for i := range 5 {
		resp, body := upgradeAnswer(t, e, "/missing")
		if resp.StatusCode != http.StatusNotFound || string(body) != page {
			t.Fatalf("request %d: got %d with %d bytes, want 404 with the %d-byte page", i, resp.StatusCode, len(body), len(page))
		}
	}
	if got := ejectedIDs(p); len(got) != 0 {
		t.Fatalf("ejected after complete 404s: %v", got)
	}
	if got := e.obs.dialFailures(); len(got) != 0 {
		t.Fatalf("dial failures counted: %v", got)
	}
}

// TestHostileEndlessHeader: a backend that sends a header line without end
// is cut off at the head limit, quickly and with edge reading only about
// that much, and that is the backend's failure.
func TestHostileEndlessHeader(t *testing.T) {
	var sent atomic.Int64
	hostile := testkit.RawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nX-Endless: ")
		chunk := []byte(strings.Repeat("a", 32<<10))
		// Bounded: 256 MiB at most, and it stops as soon as edge stops reading.
		c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		for range 8 << 10 {
			n, err := c.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	var read atomic.Int64
	p := ejectingPool(t, map[string]string{"hostile": hostile})
	p.Retries = 0
	p.HandshakeTimeout = 20 * time.Second // the limit ends it, not the timeout
	e := startEdge(t, edgeConfig{opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
	e.srv.testReadHook = func(n int) { read.Add(int64(n)) }
	start := time.Now()
	resp, _ := upgradeAnswer(t, e, "/")
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status: got %d, want 502", resp.StatusCode)
	}
	if d := time.Since(start); d >= p.HandshakeTimeout {
		t.Fatalf("handshake ended by its timeout (%v), not the head limit", d)
	}
	if got, limit := read.Load(), int64(defaultMaxResponseHeaderBytes); got > limit+4096 {
		t.Fatalf("edge read %d bytes of the head, want at most %d", got, limit+4096)
	}
	// The pool's only backend is never ejected, but the failure is counted.
	if got := e.obs.dialFailures(); len(got) != 1 || got[0] != "hostile" {
		t.Fatalf("an oversized head is the backend's failure: counted %v", got)
	}
	if got := p.Balancer.Snapshot().ByID("hostile").EjectionsRefused(); got != 1 {
		t.Fatalf("ejections refused (last available): got %d, want 1", got)
	}
}

// TestInterimResponsesSkipped: 100 Continue and 103 Early Hints before the
// 101 are skipped; the backend's 101 is the one used (RFC 9110 §15.2).
func TestInterimResponsesSkipped(t *testing.T) {
	addr := testkit.RawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		_, ok := testkit.ReadUpgrade(t, br)
		io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
		io.WriteString(c, strings.Replace(ok, "\r\n\r\n", "\r\nX-From: backend\r\n\r\n", 1))
		// Echo one frame's worth of bytes back, raw.
		buf := make([]byte, 64)
		n, _ := br.Read(buf)
		c.Write([]byte{0x81, byte(n)})
		c.Write(buf[:n])
	})
	p := ejectingPool(t, map[string]string{"a": addr})
	e := startEdge(t, edgeConfig{opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
	c := e.rawConn(t)
	io.WriteString(c, testkit.RawUpgrade("/", "x"))
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("first answer: %v %v, want the 101", resp, err)
	}
	if got := resp.Header.Get("X-From"); got != "backend" {
		t.Fatalf("101 headers: %v, want the backend's", resp.Header)
	}
	c.Write([]byte("hello"))
	if op, payload := testkit.ReadFrame(t, br); op != 1 || string(payload) != "hello" {
		t.Fatalf("after the 101: op %d payload %q", op, payload)
	}
}

// TestUpgradeWithBodyRefused: an upgrade request carrying a body is
// answered 400 before any backend is dialed.
func TestUpgradeWithBodyRefused(t *testing.T) {
	var accepted atomic.Int64
	addr := testkit.RawBackend(t, func(c net.Conn) { accepted.Add(1) })
	p := ejectingPool(t, map[string]string{"a": addr})
	e := startEdge(t, edgeConfig{opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
	for _, tc := range []struct {
		name  string
		extra []string
		body  string
	}{
		{"content-length", []string{"Content-Length: 5"}, "hello"},
		{"chunked", []string{"Transfer-Encoding: chunked"}, "5\r\nhello\r\n0\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := e.rawConn(t)
			c.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(c, testkit.RawUpgrade("/", "x", tc.extra...)+tc.body)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("read answer: %v", err)
			}
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status: got %d, want 400", resp.StatusCode)
			}
		})
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("backend dialed %d times, want 0", n)
	}
}

// TestBackendFailuresStillCount: what is the backend's own fault keeps
// counting: a refused connect, an EOF before the head, a malformed head, a
// 101 with a wrong Sec-WebSocket-Accept, a head slower than the handshake
// timeout.
func TestBackendFailuresStillCount(t *testing.T) {
	for _, tc := range []struct {
		name   string
		addr   func(t *testing.T) string
		status int
	}{
		{"connect refused", func(t *testing.T) string { return testkit.ClosedPort(t) }, http.StatusBadGateway},
		{"eof before head", func(t *testing.T) string { return answerBackend(t, "HTTP/1.1 101 Swi") }, http.StatusBadGateway},
		{"malformed head", func(t *testing.T) string { return answerBackend(t, "HTTP/1.1 abc nope\r\n\r\n") }, http.StatusBadGateway},
		{"bad accept", func(t *testing.T) string {
			return answerBackend(t, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: bad\r\n\r\n")
		}, http.StatusBadGateway},
		{"slow head", func(t *testing.T) string {
			return testkit.RawBackend(t, func(c net.Conn) { io.Copy(io.Discard, c) })
		}, http.StatusGatewayTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := ejectingPool(t, map[string]string{"a": tc.addr(t), "b": testkit.ClosedPort(t)})
			p.Retries = 0
			// The fast failures must come within the timeout even on a slow
			// machine, or they turn into 504s; only the slow head waits it out.
			p.HandshakeTimeout = 2 * time.Second
			if tc.status == http.StatusGatewayTimeout {
				p.HandshakeTimeout = 300 * time.Millisecond
			}
			b := p.Balancer.Snapshot().ByID("a")
			p.Balancer.Snapshot().ByID("b").SetHealthy(false) // every pick lands on a
			e := startEdge(t, edgeConfig{opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
			resp, _ := upgradeAnswer(t, e, "/")
			if resp.StatusCode != tc.status {
				t.Fatalf("status: got %d, want %d", resp.StatusCode, tc.status)
			}
			if got := b.Ejections(); got != 0 {
				t.Fatalf("the last available backend was ejected")
			}
			if got := b.EjectionsRefused(); got != 1 {
				t.Fatalf("counted failures reaching the threshold: got %d, want 1 (refused: last available)", got)
			}
		})
	}
}

// TestSlowPathLeavesHalfThePool: a path whose backends answer slower than
// the handshake timeout counts as the backends' timeouts (as Envoy counts
// upstream timeouts), but the ejection cap (default 50%) keeps the other
// half of the pool serving every other path.
func TestSlowPathLeavesHalfThePool(t *testing.T) {
	slowOrOK := func(t *testing.T) string {
		return testkit.RawBackend(t, func(c net.Conn) {
			br := bufio.NewReader(c)
			req, ok := testkit.ReadUpgrade(t, br)
			if req == nil {
				return
			}
			if req.URL.Path == "/slow" {
				io.Copy(io.Discard, br) // never answers
				return
			}
			io.WriteString(c, ok)
			io.Copy(io.Discard, br)
		})
	}
	bp, err := balance.NewPool(balance.PoolOptions{Name: "chat", Eject: balance.EjectOptions{Failures: 2, Cooldown: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if err := bp.Update([]balance.Member{{ID: "a", Addr: slowOrOK(t)}, {ID: "b", Addr: slowOrOK(t)}}); err != nil {
		t.Fatal(err)
	}
	p := &Pool{Name: "chat", Balancer: bp, DialTimeout: time.Second, HandshakeTimeout: 200 * time.Millisecond, Retries: 1}
	// Every other path goes to the same backends with a handshake timeout
	// a healthy backend meets even on a slow machine.
	other := &Pool{Name: "chat", Balancer: bp, DialTimeout: time.Second, HandshakeTimeout: 5 * time.Second, Retries: 1}
	e := startEdge(t, edgeConfig{opts: Options{Routes: []Route{{PathPrefix: "/slow", Pool: p}, {Default: true, Pool: other}}}})
	for range 5 {
		if resp, _ := upgradeAnswer(t, e, "/slow"); resp.StatusCode != http.StatusGatewayTimeout {
			t.Fatalf("slow path: got %d, want 504", resp.StatusCode)
		}
	}
	if got := ejectedIDs(p); len(got) != 1 {
		t.Fatalf("ejected: %v, want exactly one of two (cap 50%%)", got)
	}
	c := e.rawConn(t)
	io.WriteString(c, testkit.RawUpgrade("/", "x"))
	testkit.Read101(t, c)
}

// TestHeadLimitBoundary: a head of exactly the limit passes whatever
// follows it; one byte more is over.
func TestHeadLimitBoundary(t *testing.T) {
	const limit = 1024
	mk := func(size int) string {
		h := "HTTP/1.1 101 Switching Protocols\r\nX-Pad: "
		return h + strings.Repeat("p", size-len(h)-4) + "\r\n\r\n"
	}
	for _, tc := range []struct {
		size int
		ok   bool
	}{{limit, true}, {limit + 1, false}} {
		lim := &headLimit{r: strings.NewReader(mk(tc.size) + strings.Repeat("frame", 1000)), n: limit}
		resp, err := readFinalResponse(bufio.NewReaderSize(lim, 4096))
		if tc.ok && (err != nil || resp.StatusCode != 101) {
			t.Errorf("head of %d bytes: %v %v, want the 101", tc.size, resp, err)
		}
		if !tc.ok && (!lim.hit || err == nil) {
			t.Errorf("head of %d bytes: err %v, hit %v; want over the limit", tc.size, err, lim.hit)
		}
	}
}

// TestFaultClassification: what counts against a backend and what is
// edge's own, for errors as the net package returns them.
func TestFaultClassification(t *testing.T) {
	op := func(op string, err error) error {
		return &net.OpError{Op: op, Net: "tcp", Err: os.NewSyscallError("socket", err)}
	}
	for _, tc := range []struct {
		name  string
		err   error
		fault string
		local bool
	}{
		{"EMFILE", dialFault(op("dial", syscall.EMFILE)), "", true},
		{"ENFILE", dialFault(op("dial", syscall.ENFILE)), "", true},
		{"ENOBUFS", dialFault(op("dial", syscall.ENOBUFS)), "", true},
		{"ENOMEM", dialFault(op("dial", syscall.ENOMEM)), "", true},
		{"EADDRNOTAVAIL", dialFault(op("dial", syscall.EADDRNOTAVAIL)), "", true},
		{"refused", dialFault(op("dial", syscall.ECONNREFUSED)), "connect_refused", false},
		{"unreachable", dialFault(op("dial", syscall.EHOSTUNREACH)), "connect_failed", false},
		{"read reset", readFault(op("read", syscall.ECONNRESET)), "reset", false},
		{"eof", readFault(io.ErrUnexpectedEOF), "eof", false},
		{"malformed", readFault(errors.New(`malformed HTTP response "x"`)), "malformed_head", false},
		{"write ENOBUFS", ioFault(op("write", syscall.ENOBUFS)), "", true},
	} {
		var he *handshakeError
		if !errors.As(tc.err, &he) || he.fault != tc.fault || he.local != tc.local {
			t.Errorf("%s: got %+v, want fault %q local %v", tc.name, he, tc.fault, tc.local)
		}
	}
}
