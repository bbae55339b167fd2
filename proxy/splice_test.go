package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/edgelb/edge/internal/wswire"
	"github.com/gorilla/websocket"
)

func oneBackendEdge(t *testing.T, sp splicePath, tlsOn bool, mod func(p *Pool, cfg *edgeConfig)) (*edge, *Pool) {
	t.Helper()
	b := startBackend(t, "b1")
	p := newPool(t, "chat", balance.LeastConn, map[string]string{"b1": b.Addr()})
	cfg := edgeConfig{tls: tlsOn, lo: ListenerOptions{Name: "public"}, splice: sp}
	if mod != nil {
		mod(p, &cfg)
	}
	cfg.opts.Routes = []Route{{Default: true, Pool: p}}
	return startEdge(t, cfg), p
}

func TestEcho(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		for _, tc := range []struct {
			name string
			tls  bool
		}{{"ws", false}, {"wss", true}} {
			t.Run(tc.name, func(t *testing.T) {
				e, _ := oneBackendEdge(t, sp, tc.tls, nil)
				c, resp := e.dialWS(t, "/echo", nil)
				if got, want := resp.StatusCode, http.StatusSwitchingProtocols; got != want {
					t.Fatalf("status: got %d, want %d", got, want)
				}
				for _, msg := range []string{"hello", strings.Repeat("x", 70000), "again"} {
					if got := testkit.Ask(t, c, msg); got != msg {
						t.Fatalf("echo: got %d bytes, want %d", len(got), len(msg))
					}
				}
				if got, want := testkit.Ask(t, c, "whoami"), "b1"; got != want {
					t.Fatalf("whoami: got %q, want %q", got, want)
				}
				if got, want := e.srv.Active(), 1; got != want {
					t.Fatalf("Active: got %d, want %d", got, want)
				}
				wantReady := 0
				if readinessExpected(sp) {
					wantReady = 1
				}
				if got := e.srv.readyConns(); got != wantReady {
					t.Fatalf("readiness-driven connections: got %d, want %d", got, wantReady)
				}
				c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""))
				if _, _, err := c.ReadMessage(); !websocket.IsCloseError(err, 1000) {
					t.Fatalf("close: got %v, want close 1000", err)
				}
				c.Close()
				e.obs.waitClosed(t)
				testkit.WaitFor(t, "Active 0", func() bool { return e.srv.Active() == 0 })
			})
		}
	})
}

func TestRoutingEndToEnd(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		a, b, d := startBackend(t, "a"), startBackend(t, "b"), startBackend(t, "d")
		pa := newPool(t, "pa", balance.LeastConn, map[string]string{"a": a.Addr()})
		pb := newPool(t, "pb", balance.LeastConn, map[string]string{"b": b.Addr()})
		pd := newPool(t, "pd", balance.LeastConn, map[string]string{"d": d.Addr()})
		routes := []Route{
			{Hosts: []string{"chat.example.com"}, Pool: pa},
			{Hosts: []string{"*.example.com"}, PathPrefix: "/ws", Pool: pb},
		}
		e := startEdge(t, edgeConfig{splice: sp, opts: Options{Routes: routes}})

		for _, tc := range []struct{ host, path, want string }{
			{"chat.example.com", "/", "a"},
			{"CHAT.Example.COM:8080", "/ws", "a"},
			{"x.y.example.com", "/ws/room", "b"},
		} {
			h := http.Header{"Host": {tc.host}}
			_ = h
			d := e.dialer()
			req := e.url(tc.path)
			c, _, err := d.Dial(req, http.Header{})
			if err == nil {
				c.Close()
			}
			// gorilla sets Host from the URL; use a raw request instead.
			conn := e.rawConn(t)
			io.WriteString(conn, testkit.RawUpgrade(tc.path, tc.host))
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("%s%s: %v", tc.host, tc.path, err)
			}
			if resp.StatusCode != 101 {
				t.Fatalf("%s%s: got status %d, want 101", tc.host, tc.path, resp.StatusCode)
			}
			conn.Write(testkit.MaskedFrame(1, []byte("whoami")))
			_, p := testkit.ReadFrame(t, br)
			if got := string(p); got != tc.want {
				t.Errorf("%s%s: got backend %q, want %q", tc.host, tc.path, got, tc.want)
			}
			conn.Close()
		}

		// Unknown host without a default route: 421, never a random backend.
		resp, err := e.httpClient().Get(e.httpURL("/whoami"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got, want := resp.StatusCode, http.StatusMisdirectedRequest; got != want {
			t.Fatalf("unknown host: got %d, want %d", got, want)
		}

		// SetRoutes swaps atomically; a default route then catches it.
		if err := e.srv.SetRoutes(append(routes, Route{Default: true, Pool: pd})); err != nil {
			t.Fatal(err)
		}
		c, _ := e.dialWS(t, "/", nil)
		if got, want := testkit.Ask(t, c, "whoami"), "d"; got != want {
			t.Fatalf("default route: got %q, want %q", got, want)
		}
	})
}

func TestUpgradeValidation(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		e, _ := oneBackendEdge(t, sp, false, nil)
		const ok = "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + testkit.Key + "\r\n"
		for _, tc := range []struct {
			name    string
			req     string
			want    int
			wantHdr string // header that must be present
		}{
			{"canonical", "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" + ok, 101, ""},
			{"tokens any case and order", "GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, UPGRADE\r\nUpgrade: WebSocket\r\n" + ok, 101, ""},
			{"connection split over lines", "GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\nConnection: upgrade\r\nUpgrade: foo, websocket\r\n" + ok, 101, ""},
			{"no connection upgrade", "GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\nUpgrade: websocket\r\n" + ok, 400, ""},
			{"missing key", "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n", 400, ""},
			{"short key", "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: c2hvcnQ=\r\n", 400, ""},
			{"bad version", "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 8\r\nSec-WebSocket-Key: " + testkit.Key + "\r\n", 426, "Sec-Websocket-Version"},
			{"missing version", "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: " + testkit.Key + "\r\n", 426, "Sec-Websocket-Version"},
			{"POST", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" + ok, 405, "Allow"},
			{"HTTP/1.0", "GET / HTTP/1.0\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" + ok, 400, ""},
			{"plain request is proxied", "GET /whoami HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n", 200, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c := e.rawConn(t)
				io.WriteString(c, tc.req+"\r\n")
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatalf("read response: %v", err)
				}
				resp.Body.Close()
				if got := resp.StatusCode; got != tc.want {
					t.Fatalf("status: got %d, want %d", got, tc.want)
				}
				if tc.wantHdr != "" && resp.Header.Get(tc.wantHdr) == "" {
					t.Fatalf("header %s missing in %v", tc.wantHdr, resp.Header)
				}
				if tc.want == 426 {
					if got, want := resp.Header.Get("Sec-WebSocket-Version"), "13"; got != want {
						t.Fatalf("Sec-WebSocket-Version: got %q, want %q", got, want)
					}
				}
			})
		}
	})
}

// TestHeaderLimits checks the http.Server settings cmd/edge uses: headers
// over MaxHeaderBytes get 431 from net/http itself.
func TestHeaderLimits(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		e, _ := oneBackendEdge(t, sp, false, func(_ *Pool, cfg *edgeConfig) { cfg.maxHeaderBytes = 4096 })
		c := e.rawConn(t)
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 16<<10)+"\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("read response: %v", err)
		}
		if got, want := resp.StatusCode, http.StatusRequestHeaderFieldsTooLarge; got != want {
			t.Fatalf("status: got %d, want %d", got, want)
		}
	})
}

// TestSlowHeaders: a client trickling its headers is closed by
// ReadHeaderTimeout and does not hold up another connection.
func TestSlowHeaders(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		// Long enough for the fast upgrade below on a slow machine; the
		// slow client never finishes its head.
		e, _ := oneBackendEdge(t, sp, false, func(_ *Pool, cfg *edgeConfig) { cfg.readHeaderTimeout = time.Second })
		slow := e.rawConn(t)
		io.WriteString(slow, "GET / HTTP/1.1\r\nHost: x\r\n")
		c, _ := e.dialWS(t, "/", nil)
		if got := testkit.Ask(t, c, "fast"); got != "fast" {
			t.Fatalf("echo: got %q", got)
		}
		slow.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err := io.ReadAll(slow)
		if err != nil && !testkit.IsClosed(err) {
			t.Fatalf("slow conn: got %v, want closed by the server", err)
		}
		if got := testkit.Ask(t, c, "still"); got != "still" {
			t.Fatalf("echo after slow close: got %q", got)
		}
	})
}

func TestStickyCookie(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		b1, b2 := startBackend(t, "b1"), startBackend(t, "b2")
		p := newPool(t, "chat", balance.Cookie, map[string]string{"b1": b1.Addr(), "b2": b2.Addr()})
		p.Cookie = CookieSettings{Name: "sticky", Path: "/", MaxAge: time.Hour, SameSite: http.SameSiteLaxMode}
		e := startEdge(t, edgeConfig{splice: sp, tls: true, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})

		// traefik#3343: the cookie must be on the 101 itself.
		c, resp := e.dialWS(t, "/", nil)
		var cookie *http.Cookie
		for _, ck := range resp.Cookies() {
			if ck.Name == "sticky" {
				cookie = ck
			}
		}
		if cookie == nil {
			t.Fatalf("no sticky cookie on the 101: %v", resp.Header)
		}
		raw := resp.Header.Get("Set-Cookie")
		for _, want := range []string{"HttpOnly", "Secure", "SameSite=Lax", "Path=/", "Max-Age=3600"} {
			if !strings.Contains(raw, want) {
				t.Errorf("Set-Cookie %q lacks %s", raw, want)
			}
		}
		first := testkit.Ask(t, c, "whoami")
		c.Close()

		// Stickiness holds across reconnects, even with the other backend less loaded.
		for i := range 5 {
			c, resp := e.dialWS(t, "/", http.Header{"Cookie": {cookie.Name + "=" + cookie.Value}})
			if got := testkit.Ask(t, c, "whoami"); got != first {
				t.Fatalf("reconnect %d: got backend %q, want %q", i, got, first)
			}
			if resp.Header.Get("Set-Cookie") != "" {
				t.Errorf("reconnect %d: cookie reissued though valid", i)
			}
			c.Close()
		}

		// Plain HTTP gets the same stickiness.
		hc := e.httpClient()
		resp2, err := hc.Get(e.httpURL("/whoami"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp2.Body)
		resp2.Body.Close()
		if len(resp2.Cookies()) == 0 {
			t.Fatalf("plain HTTP: no sticky cookie: %v", resp2.Header)
		}
		who := string(body)
		ck := resp2.Cookies()[0]
		for i := range 3 {
			req, _ := http.NewRequest(http.MethodGet, e.httpURL("/whoami"), nil)
			req.AddCookie(ck)
			r, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if string(b) != who {
				t.Fatalf("plain reconnect %d: got %q, want %q", i, b, who)
			}
		}
	})
}

// TestRetryOnDialFailure: the cookie names a backend whose port is closed;
// the connection lands on the other one and the failure is counted.
func TestRetryOnDialFailure(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		live := startBackend(t, "live")
		p := newPool(t, "chat", balance.Cookie, map[string]string{"dead": testkit.ClosedPort(t), "live": live.Addr()})
		p.Retries = 1
		e := startEdge(t, edgeConfig{splice: sp, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
		var dead *balance.Backend
		for _, b := range p.Balancer.Snapshot().Backends {
			if b.ID() == "dead" {
				dead = b
			}
		}
		c, _ := e.dialWS(t, "/", http.Header{"Cookie": {defaultCookieName + "=" + dead.CookieValue()}})
		if got, want := testkit.Ask(t, c, "whoami"), "live"; got != want {
			t.Fatalf("backend: got %q, want %q", got, want)
		}
		if got := e.obs.dialFailures(); len(got) != 1 || got[0] != "dead" {
			t.Fatalf("dial failures: got %v, want [dead]", got)
		}
		if got := dead.Active(); got != 0 {
			t.Fatalf("dead backend Active: got %d, want 0", got)
		}

		// Plain HTTP (idempotent GET) retries the same way.
		req, _ := http.NewRequest(http.MethodGet, e.httpURL("/whoami"), nil)
		req.AddCookie(&http.Cookie{Name: defaultCookieName, Value: dead.CookieValue()})
		resp, err := e.httpClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "live" {
			t.Fatalf("plain retry: got %q, want live", b)
		}
		e.obs.mu.Lock()
		retries := append([]string(nil), e.obs.retries...)
		e.obs.mu.Unlock()
		if !slices.Equal(retries, []string{LegUpgrade, LegPlain}) {
			t.Fatalf("Observer retries: got %q, want [upgrade plain]", retries)
		}

		// No retries and only a dead backend: 502, nothing upgraded.
		pd := newPool(t, "dead", balance.LeastConn, map[string]string{"dead": testkit.ClosedPort(t)})
		e2 := startEdge(t, edgeConfig{splice: sp, opts: Options{Routes: []Route{{Default: true, Pool: pd}}}})
		_, resp, err = e2.dialer().Dial(e2.url("/"), nil)
		if err == nil || resp == nil || resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("dead pool: got %v %v, want 502", err, resp)
		}
	})
}

// TestNon101Relayed: a backend refusing the upgrade is relayed as an
// ordinary response.
func TestNon101Relayed(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		e, _ := oneBackendEdge(t, sp, true, nil)
		_, resp, err := e.dialer().Dial(e.url("/reject"), nil)
		if err == nil {
			t.Fatal("dial succeeded, want refusal")
		}
		if resp == nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("got %v, want 403", resp)
		}
		body, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(body), "rejected by b1") {
			t.Fatalf("body: got %q", body)
		}
		if got := e.srv.Active(); got != 0 {
			t.Fatalf("Active: got %d, want 0", got)
		}
	})
}

// TestClientBufferedBytes: a frame sent in the same write as the handshake
// sits in net/http's bufio.Reader after Hijack and must be forwarded.
func TestClientBufferedBytes(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		for _, tlsOn := range []bool{false, true} {
			e, _ := oneBackendEdge(t, sp, tlsOn, nil)
			c := e.rawConn(t)
			msg := append([]byte(testkit.RawUpgrade("/", "x")), testkit.MaskedFrame(1, []byte("whoami"))...)
			if _, err := c.Write(msg); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != 101 {
				t.Fatalf("tls=%v: handshake: %v %v", tlsOn, resp, err)
			}
			if got, want := resp.Header.Get("Sec-WebSocket-Accept"), wswire.AcceptKey(testkit.Key); got != want {
				t.Fatalf("accept: got %q, want %q", got, want)
			}
			if _, p := testkit.ReadFrame(t, br); string(p) != "b1" {
				t.Fatalf("tls=%v: got %q, want b1", tlsOn, p)
			}
		}
	})
}

// TestBackendBufferedBytes: frames the backend writes together with its
// 101 are read into the handshake's bufio.Reader and must be forwarded.
func TestBackendBufferedBytes(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		addr := testkit.RawBackend(t, func(c net.Conn) {
			br := bufio.NewReader(c)
			_, resp := testkit.ReadUpgrade(t, br)
			c.Write(append([]byte(resp), 0x81, 5, 'h', 'e', 'l', 'l', 'o'))
			io.Copy(io.Discard, br)
		})
		p := newPool(t, "raw", balance.LeastConn, map[string]string{"raw": addr})
		e := startEdge(t, edgeConfig{splice: sp, tls: true, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
		c, _ := e.dialWS(t, "/", nil)
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, msg, err := c.ReadMessage()
		if err != nil || string(msg) != "hello" {
			t.Fatalf("got %q %v, want hello", msg, err)
		}
	})
}

// TestHalfClose: the client's FIN reaches the backend as a FIN, and the
// backend can still answer afterwards.
func TestHalfClose(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		addr := testkit.RawBackend(t, func(c net.Conn) {
			br := bufio.NewReader(c)
			_, resp := testkit.ReadUpgrade(t, br)
			io.WriteString(c, resp)
			got, _ := io.ReadAll(br) // returns at the propagated FIN
			c.Write([]byte{0x81, byte(len(got))})
			c.Write(got[:min(len(got), 125)])
		})
		p := newPool(t, "raw", balance.LeastConn, map[string]string{"raw": addr})
		e := startEdge(t, edgeConfig{splice: sp, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
		c := e.rawConn(t).(*net.TCPConn)
		io.WriteString(c, testkit.RawUpgrade("/", "x"))
		br := testkit.Read101(t, c)
		c.Write([]byte("abc"))
		c.CloseWrite()
		if _, p := testkit.ReadFrame(t, br); string(p) != "abc" {
			t.Fatalf("after half-close: got %q, want abc", p)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Fatalf("end: got %v, want EOF", err)
		}
	})
}

// TestNoHTTPErrorAfterHijack: a backend dying after its 101 closes the
// client connection; no HTTP error response follows the 101.
func TestNoHTTPErrorAfterHijack(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		addr := testkit.RawBackend(t, func(c net.Conn) {
			_, resp := testkit.ReadUpgrade(t, bufio.NewReader(c))
			io.WriteString(c, resp)
			c.(*net.TCPConn).SetLinger(0) // RST
		})
		p := newPool(t, "raw", balance.LeastConn, map[string]string{"raw": addr})
		e := startEdge(t, edgeConfig{splice: sp, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
		c := e.rawConn(t)
		io.WriteString(c, testkit.RawUpgrade("/", "x"))
		br := testkit.Read101(t, c)
		rest, _ := io.ReadAll(br)
		if len(rest) != 0 {
			t.Fatalf("after 101: got %q, want nothing", rest)
		}
		c.Close()
		if got, want := e.obs.waitClosed(t), "backend_closed"; got != want {
			t.Fatalf("reason: got %q, want %q", got, want)
		}
	})
}

// TestIdleTimeout: a silent connection is closed and every goroutine and
// buffer of it returns.
func TestIdleTimeout(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		// Long enough for the first Ask's round trip on a slow machine.
		e, _ := oneBackendEdge(t, sp, true, func(p *Pool, _ *edgeConfig) { p.IdleTimeout = time.Second })
		// Warm up once so lazily started goroutines are in the baseline.
		c0, _ := e.dialWS(t, "/", nil)
		testkit.Ask(t, c0, "warm")
		c0.Close()
		e.obs.waitClosed(t)
		base := runtime.NumGoroutine()

		c, _ := e.dialWS(t, "/", nil)
		testkit.Ask(t, c, "hi")
		if got, want := e.obs.waitClosed(t), "idle_timeout"; got != want {
			t.Fatalf("reason: got %q, want %q", got, want)
		}
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, _, err := c.ReadMessage(); err == nil {
			t.Fatal("read after idle timeout succeeded")
		}
		c.Close()
		testkit.WaitGoroutines(t, base)
	})
}

// TestIdleTimeoutOneWayTraffic: a connection where only the backend talks
// is not idle.
func TestIdleTimeoutOneWayTraffic(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		stop := make(chan struct{})
		addr := testkit.RawBackend(t, func(c net.Conn) {
			_, resp := testkit.ReadUpgrade(t, bufio.NewReader(c))
			io.WriteString(c, resp)
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := c.Write([]byte{0x81, 1, 'x'}); err != nil {
						return
					}
				}
			}
		})
		p := newPool(t, "raw", balance.LeastConn, map[string]string{"raw": addr})
		// Ticks twenty to an idle timeout: a slow machine delays some, not
		// all of them.
		const idle = 2 * time.Second
		p.IdleTimeout = idle
		e := startEdge(t, edgeConfig{splice: sp, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
		c, _ := e.dialWS(t, "/", nil)
		// Reading on for an idle timeout and a half: a connection that the
		// backend's messages did not keep alive would be gone by then.
		for end := time.Now().Add(idle * 3 / 2); time.Now().Before(end); {
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			if _, _, err := c.ReadMessage(); err != nil {
				t.Fatalf("read: %v", err)
			}
		}
		close(stop)
	})
}

func TestDrain(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		e, _ := oneBackendEdge(t, sp, true, nil)
		var cs []*websocket.Conn
		for range 5 {
			c, _ := e.dialWS(t, "/", nil)
			testkit.Ask(t, c, "x")
			cs = append(cs, c)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done := make(chan struct{})
		go func() { defer close(done); e.srv.Drain(ctx, 200*time.Millisecond) }()
		for i, c := range cs {
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, _, err := c.ReadMessage() // gorilla answers the close frame itself
			if !websocket.IsCloseError(err, CloseGoingAway) {
				t.Fatalf("conn %d: got %v, want close 1001", i, err)
			}
			c.Close()
		}
		<-done
		if got := e.srv.Active(); got != 0 {
			t.Fatalf("Active after drain: got %d, want 0", got)
		}
		// New requests are refused while draining.
		resp, err := e.httpClient().Get(e.httpURL("/whoami"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !resp.Close {
			t.Fatalf("after drain: got %d close=%v, want 503 with Connection: close", resp.StatusCode, resp.Close)
		}
	})
}

// TestDrainForceClose: a client that never answers the close frame is
// closed when the drain context ends.
func TestDrainForceClose(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		e, _ := oneBackendEdge(t, sp, false, nil)
		c := e.rawConn(t)
		io.WriteString(c, testkit.RawUpgrade("/", "x"))
		br := testkit.Read101(t, c)
		// The close 1001 goes out before the deadline even on a slow machine.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		e.srv.Drain(ctx, 0)
		op, p := testkit.ReadFrame(t, br)
		if op != wswire.OpClose || len(p) < 2 || int(p[0])<<8|int(p[1]) != CloseGoingAway {
			t.Fatalf("got opcode %d payload %v, want close 1001", op, p)
		}
		if _, err := br.ReadByte(); err == nil {
			t.Fatal("connection still open after the drain deadline")
		}
		if got := e.srv.Active(); got != 0 {
			t.Fatalf("Active: got %d, want 0", got)
		}
	})
}

func TestLimits(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		t.Run("global max conns", func(t *testing.T) {
			e, _ := oneBackendEdge(t, sp, false, func(_ *Pool, cfg *edgeConfig) { cfg.opts.MaxConns = 1 })
			c, _ := e.dialWS(t, "/", nil)
			testkit.Ask(t, c, "x")
			_, resp, err := e.dialer().Dial(e.url("/"), nil)
			if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("second conn: got %v, want 503 with Retry-After", resp)
			}
		})
		t.Run("pool max conns", func(t *testing.T) {
			e, _ := oneBackendEdge(t, sp, false, func(p *Pool, _ *edgeConfig) { p.MaxConns = 1 })
			c, _ := e.dialWS(t, "/", nil)
			testkit.Ask(t, c, "x")
			_, resp, err := e.dialer().Dial(e.url("/"), nil)
			if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("second conn: got %v, want 503 with Retry-After", resp)
			}
			c.Close()
			e.obs.waitClosed(t)
			c2, _ := e.dialWS(t, "/", nil) // the slot is free again
			testkit.Ask(t, c2, "y")
		})
		t.Run("rate per client", func(t *testing.T) {
			lim := balance.NewLimiter(balance.LimiterOptions{Rate: 0.001, Burst: 1})
			e, _ := oneBackendEdge(t, sp, false, func(p *Pool, _ *edgeConfig) { p.Limiter = lim })
			c, _ := e.dialWS(t, "/", nil)
			c.Close()
			_, resp, err := e.dialer().Dial(e.url("/"), nil)
			if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("second conn: got %v (%v), want 429 with Retry-After", resp, err)
			}
		})
		t.Run("pool rate", func(t *testing.T) {
			// One new connection per twenty seconds for everyone together.
			const rate = 0.05
			e, _ := oneBackendEdge(t, sp, false, func(p *Pool, _ *edgeConfig) { p.Admission = balance.NewBucket(rate, 1, nil) })
			c, _ := e.dialWS(t, "/", nil)
			testkit.Ask(t, c, "x")
			_, resp, err := e.dialer().Dial(e.url("/"), nil)
			if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("second conn: got %v (%v), want 503", resp, err)
			}
			// The next token is 1/rate s after the first admission, less
			// the time the two took (under half of it even on a slow
			// machine); the answer spreads retries over that to four times it.
			full := int(1 / rate)
			if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < full/2 || ra > 4*full {
				t.Fatalf("Retry-After %q, want %d..%d", resp.Header.Get("Retry-After"), full/2, 4*full)
			}
			testkit.Ask(t, c, "y") // the admitted connection is untouched
		})
	})
}

func TestPlainHTTP(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		e, _ := oneBackendEdge(t, sp, false, nil)
		resp, err := e.httpClient().Post(e.httpURL("/echo?x=1"), "text/plain", strings.NewReader("body"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got, want := string(b), "b1 /echo\n"; resp.StatusCode != 200 || got != want {
			t.Fatalf("got %d %q, want 200 %q", resp.StatusCode, got, want)
		}
		resp, err = e.httpClient().Get(e.httpURL("/status?code=404"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Fatalf("relayed status: got %d, want 404", resp.StatusCode)
		}
	})
}

// TestGoroutinesReturn: after connections end every way they can, the
// goroutine count returns to its baseline.
func TestGoroutinesReturn(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		e, _ := oneBackendEdge(t, sp, true, nil)
		c0, _ := e.dialWS(t, "/", nil)
		testkit.Ask(t, c0, "warm")
		c0.Close()
		e.obs.waitClosed(t)
		base := runtime.NumGoroutine()
		for i := range 10 {
			c, _ := e.dialWS(t, "/", nil)
			testkit.Ask(t, c, "x")
			switch i % 3 {
			case 0:
				c.Close()
			case 1:
				c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""))
				c.ReadMessage()
				c.Close()
			case 2:
				c.WriteMessage(websocket.TextMessage, []byte("close:4000"))
				c.ReadMessage()
				c.Close()
			}
			e.obs.waitClosed(t)
		}
		testkit.WaitGoroutines(t, base)
	})
}

// TestLingerBytesCap: a lingering close discards at most LingerBytes of
// what the client goes on sending and then closes, long before
// LingerTimeout. The client announces one huge frame over the frame
// limit, reads the 1009, and keeps sending the frame's payload without
// end; with a ten-minute LingerTimeout only the byte cap can end it.
func TestLingerBytesCap(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		addr, _ := countingBackend(t)
		p := newPool(t, "capped", balance.LeastConn, map[string]string{"b": addr})
		p.MaxFrameBytes = 1 << 10
		p.LingerTimeout, p.LingerBytes = 10*time.Minute, 256<<10
		e := startEdge(t, edgeConfig{splice: sp, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
		c := e.rawConn(t)
		io.WriteString(c, testkit.RawUpgrade("/", "x"))
		br := testkit.Read101(t, c)
		// A masked binary frame of 2^40 bytes (RFC 6455 §5.2, 64-bit length).
		hdr := []byte{0x82, 0xff, 0, 0, 0x01, 0, 0, 0, 0, 0, 1, 2, 3, 4}
		if _, err := c.Write(hdr); err != nil {
			t.Fatal(err)
		}
		op, pl := testkit.ReadFrame(t, br)
		if op != wswire.OpClose || int(pl[0])<<8|int(pl[1]) != CloseMessageTooBig {
			t.Fatalf("got opcode %d %q, want a close 1009", op, pl)
		}
		sent := make(chan int64, 1)
		go func() {
			chunk := make([]byte, 64<<10)
			var n int64
			c.SetWriteDeadline(time.Now().Add(time.Minute))
			for {
				k, err := c.Write(chunk)
				n += int64(k)
				if err != nil {
					sent <- n
					return
				}
			}
		}()
		if got := e.obs.waitClosed(t); got != "frame_too_big" {
			t.Fatalf("reason: got %q, want frame_too_big", got)
		}
		c.Close()
		if n := <-sent; n < p.LingerBytes {
			t.Fatalf("the client wrote only %d bytes before the close, under LingerBytes %d", n, p.LingerBytes)
		}
	})
}
