package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
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
// counting: a refused connect, an EOF or a reset before the head, a
// malformed head, a 101 with a wrong Sec-WebSocket-Accept.
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
		{"reset before any byte", func(t *testing.T) string {
			return testkit.RawBackend(t, func(c net.Conn) {
				http.ReadRequest(bufio.NewReader(c))
				c.(*net.TCPConn).SetLinger(0) // close with a reset
			})
		}, http.StatusBadGateway},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := ejectingPool(t, map[string]string{"a": tc.addr(t), "b": testkit.ClosedPort(t)})
			p.Retries = 0
			// The failures must come within the timeout even on a slow
			// machine, or they turn into 504s.
			p.HandshakeTimeout = 5 * time.Second
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

// slowPathBackend answers an upgrade to /slow only after 30 s (a long
// poll, an export: the backend accepted and read the request and is busy
// answering it), every other path at once.
func slowPathBackend(t *testing.T) string {
	return testkit.RawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		req, ok := testkit.ReadUpgrade(t, br)
		if req == nil {
			return
		}
		if req.URL.Path == "/slow" {
			// Answered after 30 s, unless edge hangs up first.
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			io.Copy(io.Discard, br)
			c.SetReadDeadline(time.Time{})
		}
		io.WriteString(c, ok)
		io.Copy(io.Discard, br)
	})
}

// TestSlowAnswersEjectNothing: concurrent upgrades to a path the backends
// answer slower than the handshake timeout are 504s for those clients and
// no strike against any backend, with the ejection settings conf gives by
// default (5 failures in 30 s, cap 50%): 12 of them used to eject two of
// four backends.
func TestSlowAnswersEjectNothing(t *testing.T) {
	for _, n := range []int{12, 100} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			bp, err := balance.NewPool(balance.PoolOptions{Name: "chat", Eject: balance.EjectOptions{Failures: 5, Window: 30 * time.Second, Cooldown: 30 * time.Second, MaxPercent: 50}})
			if err != nil {
				t.Fatal(err)
			}
			var ms []balance.Member
			for i := range 4 {
				ms = append(ms, balance.Member{ID: fmt.Sprint("b", i), Addr: slowPathBackend(t)})
			}
			if err := bp.Update(ms); err != nil {
				t.Fatal(err)
			}
			// The edge's handshake timeout is far shorter than the slow
			// path's 30 s, so every upgrade to it times out.
			p := &Pool{Name: "chat", Balancer: bp, DialTimeout: 5 * time.Second, HandshakeTimeout: 300 * time.Millisecond, Retries: 1}
			e := startEdge(t, edgeConfig{opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
			var wg sync.WaitGroup
			statuses := make([]int, n)
			for i := range n {
				wg.Go(func() {
					c := e.rawConn(t)
					c.SetDeadline(time.Now().Add(30 * time.Second))
					io.WriteString(c, testkit.RawUpgrade("/slow", "x"))
					if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
						statuses[i] = resp.StatusCode
					}
				})
			}
			wg.Wait()
			for i, st := range statuses {
				if st != http.StatusGatewayTimeout {
					t.Fatalf("upgrade %d to the slow path: status %d, want 504", i, st)
				}
			}
			if got := ejectedIDs(p); len(got) != 0 {
				t.Fatalf("ejected by slow answers: %v", got)
			}
			if got := e.obs.dialFailures(); len(got) != 0 {
				t.Fatalf("slow answers counted as %d backend failures: %v", len(got), got)
			}
			for _, b := range bp.Snapshot().Backends {
				if got := b.EjectionsRefused(); got != 0 {
					t.Fatalf("backend %s: %d ejections refused, want no failure counted", b.ID(), got)
				}
			}
			// Every backend still answers every other path.
			for range 8 {
				c := e.rawConn(t)
				io.WriteString(c, testkit.RawUpgrade("/", "x"))
				testkit.Read101(t, c)
				c.Close()
			}
		})
	}
}

// notAcceptingBackend is a backend whose process stopped calling accept:
// its listener's accept queue (backlog 0 holds one) is full, so the kernel
// drops further SYNs and a connect times out.
func notAcceptingBackend(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// Fill the queue: this connection is never accepted.
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return addr
}

// TestDownBackendsStillEjected: next to the slow answers that count
// nothing, a backend that is down or broken still is: one that stopped
// accepting (connect timeout), one whose process is gone (connect
// refused), one that answers garbage.
func TestDownBackendsStillEjected(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the full accept queue dropping SYNs is Linux behaviour")
	}
	p := ejectingPool(t, map[string]string{
		"ok":           slowPathBackend(t),
		"notaccepting": notAcceptingBackend(t),
		"gone":         testkit.ClosedPort(t),
		"garbage":      answerBackend(t, "SSH-2.0-OpenSSH_9.2\r\n\r\n"),
	})
	p.DialTimeout = 300 * time.Millisecond
	p.Retries = 3
	e := startEdge(t, edgeConfig{opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
	for range 20 {
		if len(ejectedIDs(p)) == 3 {
			break
		}
		c := e.rawConn(t)
		io.WriteString(c, testkit.RawUpgrade("/", "x"))
		testkit.Read101(t, c)
		c.Close()
	}
	got := ejectedIDs(p)
	sort.Strings(got)
	if want := []string{"garbage", "gone", "notaccepting"}; !slices.Equal(got, want) {
		t.Fatalf("ejected: %v, want %v", got, want)
	}
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
