package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/testkit"
)

// rawRequest writes raw on a fresh connection to the edge and reads one
// response (its body included).
func rawRequest(t *testing.T, e *edge, raw string) (*http.Response, string) {
	t.Helper()
	c := e.rawConn(t)
	defer c.Close()
	return rawExchange(t, c, bufio.NewReader(c), raw)
}

// rawExchange writes raw on c and reads one response from br.
func rawExchange(t *testing.T, c net.Conn, br *bufio.Reader, raw string) (*http.Response, string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatalf("write request: %v", err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read response to %q: %v", raw, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// twoBackendEdge is an edge whose default pool has two testbackends and
// ejects a backend after 3 failures.
func twoBackendEdge(t *testing.T, mod func(cfg *edgeConfig)) (*edge, *Pool) {
	t.Helper()
	b1, b2 := startBackend(t, "b1"), startBackend(t, "b2")
	bp, err := balance.NewPool(balance.PoolOptions{Name: "chat", Mode: balance.LeastConn,
		Eject: balance.EjectOptions{Failures: 3, Window: time.Minute, Cooldown: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if err := bp.Update([]balance.Member{{ID: "b1", Addr: b1.Addr(), Weight: 1}, {ID: "b2", Addr: b2.Addr(), Weight: 1}}); err != nil {
		t.Fatal(err)
	}
	p := &Pool{Name: "chat", Balancer: bp, DialTimeout: time.Second, HandshakeTimeout: 2 * time.Second}
	cfg := edgeConfig{lo: ListenerOptions{Name: "public"}, opts: Options{Routes: []Route{{Default: true, Pool: p}}}}
	if mod != nil {
		mod(&cfg)
	}
	return startEdge(t, cfg), p
}

// TestInvalidRequestsRefused: requests whose target or Host edge cannot
// route and forward unchanged are answered 400 before routing, and never
// count against a backend.
func TestInvalidRequestsRefused(t *testing.T) {
	e, _ := twoBackendEdge(t, nil)
	for _, raw := range []string{
		"GET / HTTP/1.1\r\nHost:\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: \r\n\r\n",
		"GET / HTTP/1.0\r\n\r\n",
		"GET /a#frag HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /a?q=1#frag HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: [x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: [::1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: [zz::1]\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a%41.example\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\"b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x:99999\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x:\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a@b\r\n\r\n",
		"CONNECT 127.0.0.1:80 HTTP/1.1\r\nHost: 127.0.0.1:80\r\n\r\n",
		// Asterisk form only means OPTIONS, which net/http answers itself.
		"GET * HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /chat/../admin HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /chat/%2e%2e/admin HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /./a HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET ftp://x/a HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET http://u@x/a HTTP/1.1\r\nHost: x\r\n\r\n",
		// An upgrade request is validated the same way.
		testkit.RawUpgrade("/a#frag", "x"),
	} {
		resp, _ := rawRequest(t, e, raw)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%q: got %d, want 400", raw, resp.StatusCode)
		}
	}
	if f := e.obs.dialFailures(); len(f) != 0 {
		t.Fatalf("client errors counted as backend failures: %v", f)
	}
	// Both backends still take traffic. The pick is random between two
	// idle backends: ask until both have answered (64 misses in a row
	// would mean one is never picked at all).
	seen := map[string]bool{}
	for i := 0; i < 64 && !(seen["b1"] && seen["b2"]); i++ {
		resp, body := rawRequest(t, e, "GET /whoami HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp.StatusCode != 200 {
			t.Fatalf("after refusals: got %d %q", resp.StatusCode, body)
		}
		seen[body] = true
	}
	if !seen["b1"] || !seen["b2"] {
		t.Fatalf("a backend stopped getting traffic: %v", seen)
	}
}

// TestValidRequestsForwardedAsRouted: what validation accepts reaches the
// backend with the target the route matched.
func TestValidRequestsForwardedAsRouted(t *testing.T) {
	e, _ := twoBackendEdge(t, nil)
	for _, tc := range []struct{ raw, want string }{
		{"GET /x%2Fy?a=%20 HTTP/1.1\r\nHost: Chat.Example.com.\r\n\r\n", "/x/y"},
		{"GET //a HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", "//a"},
		// Absolute form (RFC 9112 §3.2.2): the target's authority is the host.
		{"GET http://chat.example.com/p HTTP/1.1\r\nHost: other\r\n\r\n", "/p"},
		{"GET /a..b/.c HTTP/1.1\r\nHost: 10.0.0.1\r\n\r\n", "/a..b/.c"},
	} {
		resp, body := rawRequest(t, e, tc.raw)
		if resp.StatusCode != 200 || !strings.HasSuffix(body, " "+tc.want+"\n") {
			t.Errorf("%q: got %d %q, want 200 with path %q", tc.raw, resp.StatusCode, body, tc.want)
		}
	}
}

// TestSlowBodyFreesSlot: a client that sends a head announcing a body and
// then nothing is cut after the body timeout, and its slot is free again.
func TestSlowBodyFreesSlot(t *testing.T) {
	e, _ := twoBackendEdge(t, func(cfg *edgeConfig) {
		cfg.opts.MaxConns = 2
		cfg.lo.ReadBodyTimeout = 300 * time.Millisecond
	})
	var conns []net.Conn
	for range 2 {
		c := e.rawConn(t)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
		conns = append(conns, c)
	}
	testkit.WaitFor(t, "both slow requests admitted", func() bool { return e.srv.inflight.Load() == 2 })
	for _, c := range conns {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("slow body client not answered: %v", err)
		}
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Fatalf("slow body: got %d, want 408", resp.StatusCode)
		}
	}
	testkit.WaitFor(t, "slots released", func() bool { return e.srv.inflight.Load() == 0 })
	resp, body := rawRequest(t, e, "GET /whoami HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("after slow bodies: got %d %q, want 200", resp.StatusCode, body)
	}
	if f := e.obs.dialFailures(); len(f) != 0 {
		t.Fatalf("slow clients counted as backend failures: %v", f)
	}
}

// TestRequestBodyStreamed: a request body reaches the backend as it
// comes, up to the pool's bound.
func TestRequestBodyStreamed(t *testing.T) {
	got := make(chan string, 1)
	addr := testkit.RawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		b, _ := io.ReadAll(req.Body)
		got <- string(b)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	p := newPool(t, "chat", balance.LeastConn, map[string]string{"b": addr})
	p.MaxBodyBytes = 1000
	e := startEdge(t, edgeConfig{opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
	resp, _ := rawRequest(t, e, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
	if resp.StatusCode != 200 || <-got != "abcde" {
		t.Fatalf("chunked body: status %d", resp.StatusCode)
	}
	big := strings.Repeat("x", 1001)
	resp, _ = rawRequest(t, e, fmt.Sprintf("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(big), big))
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("body over the bound: got %d, want 413", resp.StatusCode)
	}
	resp, _ = rawRequest(t, e, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3e9\r\n"+big[:1001]+"\r\n0\r\n\r\n")
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked body over the bound: got %d, want 413", resp.StatusCode)
	}
}

// TestNonReadingClientBoundedMemory: clients that never read a big
// response do not make edge hold the response.
func TestNonReadingClientBoundedMemory(t *testing.T) {
	const size, clients = 8 << 20, 8
	payload := make([]byte, size)
	var started atomic.Int64
	addr := testkit.RawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		started.Add(1)
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", size)
		c.Write(payload)
	})
	p := newPool(t, "chat", balance.LeastConn, map[string]string{"b": addr})
	p.MaxBodyBytes = 16 << 20
	e := startEdge(t, edgeConfig{opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	for range clients {
		c := e.rawConn(t)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
		// Read the status line only, then stop reading.
		var line [12]byte
		if _, err := io.ReadFull(c, line[:]); err != nil || string(line[:]) != "HTTP/1.1 200" {
			t.Fatalf("status line: %q %v", line, err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	grown := int64(ms.HeapAlloc) - int64(base)
	t.Logf("heap grew by %d KiB with %d stalled %d MiB responses", grown>>10, clients, size>>20)
	if grown > 16<<20 {
		t.Fatalf("heap grew by %d MiB for %d clients that do not read", grown>>20, clients)
	}
}

// TestUnrequestedSwitchRefused: a backend's 101 to a request that asked
// for no upgrade is answered 502 and its connection is never reused.
func TestUnrequestedSwitchRefused(t *testing.T) {
	var conns atomic.Int64
	leaked := make(chan string, 10)
	addr := testkit.RawBackend(t, func(c net.Conn) {
		first := conns.Add(1) == 1
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if first {
				io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n")
				// Whatever comes now went into the switched stream.
				c.SetReadDeadline(time.Now().Add(30 * time.Second))
				b := make([]byte, 512)
				if n, _ := br.Read(b); n > 0 {
					leaked <- string(b[:n])
				}
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+fmt.Sprint(len(req.URL.Path))+"\r\n\r\n"+req.URL.Path)
		}
	})
	p := newPool(t, "chat", balance.LeastConn, map[string]string{"b": addr})
	e := startEdge(t, edgeConfig{opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
	c := e.rawConn(t)
	br := bufio.NewReader(c)
	resp, _ := rawExchange(t, c, br, "GET /one HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("unrequested 101: got %d, want 502", resp.StatusCode)
	}
	resp, body := rawRequest(t, e, "GET /two HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 200 || body != "/two" {
		t.Fatalf("next request: got %d %q, want 200 /two", resp.StatusCode, body)
	}
	select {
	case s := <-leaked:
		t.Fatalf("a request went into the switched stream: %q", s)
	default:
	}
}

// TestNoReplay: a request after which the backend resets the connection
// reaches exactly one backend once, even on a reused connection.
func TestNoReplay(t *testing.T) {
	var deaths atomic.Int64
	handle := func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if req.URL.Path == "/die" {
				deaths.Add(1)
				c.(*net.TCPConn).SetLinger(0)
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	}
	a1, a2 := testkit.RawBackend(t, handle), testkit.RawBackend(t, handle)
	p := newPool(t, "chat", balance.LeastConn, map[string]string{"b1": a1, "b2": a2})
	p.Retries = 2
	e := startEdge(t, edgeConfig{opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
	// Warm both backends' keep-alive connections so the next request goes
	// out on a reused one.
	for range 4 {
		if resp, _ := rawRequest(t, e, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 200 {
			t.Fatalf("warm-up: %d", resp.StatusCode)
		}
	}
	resp, _ := rawRequest(t, e, "GET /die HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("reset after the head: got %d, want 502", resp.StatusCode)
	}
	if n := deaths.Load(); n != 1 {
		t.Fatalf("the request reached backends %d times, want 1", n)
	}
	if f := e.obs.dialFailures(); len(f) != 1 {
		t.Fatalf("backend failures: %v, want exactly one", f)
	}
}

// TestOversizedResponseNotBackendFailure: a response over edge's own bound
// is edge's limit, not the backend's failure.
func TestOversizedResponseNotBackendFailure(t *testing.T) {
	addr := testkit.RawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4096\r\n\r\n"+strings.Repeat("x", 4096))
		}
	})
	p := newPool(t, "chat", balance.LeastConn, map[string]string{"b": addr})
	p.MaxBodyBytes = 1024
	e := startEdge(t, edgeConfig{opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
	for range 3 {
		if resp, _ := rawRequest(t, e, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("oversized response: got %d, want 502", resp.StatusCode)
		}
	}
	if f := e.obs.dialFailures(); len(f) != 0 {
		t.Fatalf("edge's own limit counted as backend failures: %v", f)
	}
}

// TestDeadBackendCounts: a refused connect is the backend's failure, and
// the request goes to another backend (nothing was sent).
func TestDeadBackendCounts(t *testing.T) {
	b := startBackend(t, "b1")
	p := newPool(t, "chat", balance.LeastConn, map[string]string{"b1": b.Addr(), "dead": testkit.ClosedPort(t)})
	p.Retries = 1
	e := startEdge(t, edgeConfig{opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
	// The pick is random between two idle backends: ask until the dead
	// one has been tried (each try has even odds; 64 misses in a row
	// would mean it is never picked at all).
	for i := 0; i < 64 && len(e.obs.dialFailures()) == 0; i++ {
		resp, body := rawRequest(t, e, "POST /whoami HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx")
		if resp.StatusCode != 200 || body != "b1" {
			t.Fatalf("got %d %q, want 200 b1", resp.StatusCode, body)
		}
	}
	for _, id := range e.obs.dialFailures() {
		if id != "dead" {
			t.Fatalf("failure counted against %s", id)
		}
	}
	if len(e.obs.dialFailures()) == 0 {
		t.Fatal("a refused connect was not counted")
	}
}

// TestBackendsFault: what counts against a backend when no response came.
func TestBackendsFault(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	for _, tc := range []struct {
		name          string
		err           error
		wrote, reused bool
		want          bool
	}{
		{"connect refused", &dialError{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}}, false, false, true},
		{"out of descriptors", &dialError{&net.OpError{Op: "dial", Err: os.NewSyscallError("socket", syscall.EMFILE)}}, false, false, false},
		{"out of ports", &dialError{&net.OpError{Op: "dial", Err: syscall.EADDRNOTAVAIL}}, false, false, false},
		{"reset after the head", syscall.ECONNRESET, true, true, true},
		{"edge's request timeout", fmt.Errorf("roundtrip: %w", context.DeadlineExceeded), true, false, false},
		{"stale pooled connection, nothing sent", io.EOF, false, true, false},
	} {
		if got := backendsFault(r, nil, tc.err, tc.wrote, tc.reused); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestBareLFHeadRegenerated: net/http accepts a bare LF as a line end
// (RFC 9112 §2.2 allows it); edge never forwards those bytes, it writes a
// head of its own with CRLF line ends, so a backend cannot read the
// request differently from edge.
func TestBareLFHeadRegenerated(t *testing.T) {
	heads := make(chan string, 1)
	addr := testkit.RawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		var head strings.Builder
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			head.WriteString(line)
			if line == "\r\n" || line == "\n" {
				break
			}
		}
		heads <- head.String()
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	p := newPool(t, "chat", balance.LeastConn, map[string]string{"b": addr})
	e := startEdge(t, edgeConfig{opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
	resp, _ := rawRequest(t, e, "GET /lf HTTP/1.1\nHost: x\nX-A: 1\n\n")
	if resp.StatusCode != 200 {
		t.Fatalf("got %d", resp.StatusCode)
	}
	head := <-heads
	if strings.Count(head, "\n") != strings.Count(head, "\r\n") || !strings.Contains(head, "X-A: 1\r\n") {
		t.Fatalf("backend got a head with bare LF or without the header: %q", head)
	}
}

// TestNonReadingClientCut: a client that stops reading an answer loses its
// connection after the pool's write timeout, and its slot with it.
func TestNonReadingClientCut(t *testing.T) {
	const size = 8 << 20
	payload := make([]byte, size)
	addr := testkit.RawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", size)
		c.Write(payload)
	})
	p := newPool(t, "chat", balance.LeastConn, map[string]string{"b": addr})
	p.WriteTimeout = 200 * time.Millisecond
	e := startEdge(t, edgeConfig{opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
	c := e.rawConn(t)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	var line [12]byte
	if _, err := io.ReadFull(c, line[:]); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the stalled answer given up", func() bool { return e.srv.inflight.Load() == 0 })
}
