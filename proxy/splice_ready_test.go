package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/gorilla/websocket"
	"github.com/pires/go-proxyproto"
)

// TestWriteTimeoutReapsStuckClient: a client that stops reading while the
// backend keeps sending is closed once a write (a queue, on the readiness
// path) has not drained within WriteTimeout (traefik#10627).
func TestWriteTimeoutReapsStuckClient(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		addr := floodingBackend(t, nil)
		p := newPool(t, "raw", balance.LeastConn, map[string]string{"raw": addr})
		p.WriteTimeout = 300 * time.Millisecond
		e := startEdge(t, edgeConfig{splice: sp, tls: true, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
		c := e.rawConn(t)
		io.WriteString(c, testkit.RawUpgrade("/", "x"))
		testkit.Read101(t, c)
		// The client reads nothing more.
		if got, want := e.obs.waitClosed(t), "write_timeout"; got != want {
			t.Fatalf("reason: got %q, want %q", got, want)
		}
	})
}

// TestWriteTimeoutZeroIsTheDefault: a pool whose WriteTimeout is 0 gets
// the default the option names (the handshake timeout) on both drivers:
// the goroutine splice used to write with no deadline at all, so the same
// pool reaped a stuck client on one driver and held it for ever on the
// other.
func TestWriteTimeoutZeroIsTheDefault(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		addr := floodingBackend(t, nil)
		p := newPool(t, "raw", balance.LeastConn, map[string]string{"raw": addr})
		p.WriteTimeout = 0
		p.HandshakeTimeout = 2 * time.Second
		e := startEdge(t, edgeConfig{splice: sp, tls: true, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
		c := e.rawConn(t)
		io.WriteString(c, testkit.RawUpgrade("/", "x"))
		testkit.Read101(t, c)
		// The client reads nothing more.
		if got, want := e.obs.waitClosed(t), "write_timeout"; got != want {
			t.Fatalf("reason: got %q, want %q", got, want)
		}
	})
}

// TestBulkBothWays: megabytes in both directions at once, so sockets fill
// and (on the readiness path) queues and pauses come into play; every
// message comes back whole and in order.
func TestBulkBothWays(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		e, _ := oneBackendEdge(t, sp, true, nil)
		c, _ := e.dialWS(t, "/", nil)
		const n, size = 64, 60000
		msg := func(i int) []byte {
			return bytes.Repeat([]byte(fmt.Sprintf("%05d", i)), size/5)
		}
		werr := make(chan error, 1)
		go func() {
			for i := range n {
				if err := c.WriteMessage(websocket.TextMessage, msg(i)); err != nil {
					werr <- err
					return
				}
			}
			werr <- nil
		}()
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		for i := range n {
			_, got, err := c.ReadMessage()
			if err != nil {
				t.Fatalf("read %d: %v", i, err)
			}
			if !bytes.Equal(got, msg(i)) {
				t.Fatalf("message %d: got %d bytes starting %q, want %d bytes of %05d", i, len(got), got[:min(len(got), 10)], size, i)
			}
		}
		if err := <-werr; err != nil {
			t.Fatalf("write: %v", err)
		}
	})
}

// TestProxyProtocolUpgradeFirstFrame: PROXY header, upgrade request and a
// first frame in one segment; the frame reaches the backend whichever
// layer (PROXY reader, net/http's buffer) held it at the takeover.
func TestProxyProtocolUpgradeFirstFrame(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		e, _ := oneBackendEdge(t, sp, false, func(_ *Pool, cfg *edgeConfig) {
			cfg.wrap = func(l net.Listener) net.Listener {
				return ListenProxyProtocol(l, mustPrefixes("127.0.0.0/8"), time.Second)
			}
		})
		c := e.rawConn(t)
		h := proxyproto.HeaderProxyFromAddrs(1, &net.TCPAddr{IP: net.ParseIP("192.0.2.10"), Port: 4000}, &net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 443})
		var buf bytes.Buffer
		h.WriteTo(&buf)
		buf.WriteString(testkit.RawUpgrade("/", "x"))
		buf.Write(testkit.MaskedFrame(1, []byte("whoami")))
		if _, err := c.Write(buf.Bytes()); err != nil {
			t.Fatal(err)
		}
		br := testkit.Read101(t, c)
		if _, p := testkit.ReadFrame(t, br); string(p) != "b1" {
			t.Fatalf("got %q, want b1", p)
		}
	})
}

// TestProxyProtocolReadiness: a connection under the PROXY-protocol
// reader is taken over (what the reader still held is read first) and
// echoes.
func TestProxyProtocolReadiness(t *testing.T) {
	if !readinessExpected(spliceReadiness) {
		t.Skip("readiness splice off or unavailable here")
	}
	e, _ := oneBackendEdge(t, spliceReadiness, false, func(_ *Pool, cfg *edgeConfig) {
		cfg.wrap = func(l net.Listener) net.Listener {
			return ListenProxyProtocol(l, mustPrefixes("127.0.0.0/8"), time.Second)
		}
	})
	c, _ := e.dialWS(t, "/", nil)
	for i := range 20 {
		msg := fmt.Sprintf("m%d", i)
		if got := testkit.Ask(t, c, msg); got != msg {
			t.Fatalf("echo: got %q, want %q", got, msg)
		}
	}
	if got, want := e.srv.readyConns(), 1; got != want {
		t.Fatalf("readiness-driven connections: got %d, want %d", got, want)
	}
}

// TestCloseEndsEverything: Server.Close ends live connections on either
// path, each with one "shutdown" event, and stops the poller and the
// sweeper: the goroutine count returns to what it was before the first
// connection.
func TestCloseEndsEverything(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		e, _ := oneBackendEdge(t, sp, true, nil)
		base := runtime.NumGoroutine()
		var cs []*websocket.Conn
		for range 5 {
			c, _ := e.dialWS(t, "/", nil)
			testkit.Ask(t, c, "x")
			cs = append(cs, c)
		}
		if err := e.srv.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		for range cs {
			if got, want := e.obs.waitClosed(t), "shutdown"; got != want {
				t.Fatalf("reason: got %q, want %q", got, want)
			}
		}
		for i, c := range cs {
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			if _, _, err := c.ReadMessage(); err == nil {
				t.Fatalf("conn %d: read after Close succeeded", i)
			}
		}
		if got := e.srv.Active(); got != 0 {
			t.Fatalf("Active: got %d, want 0", got)
		}
		testkit.WaitGoroutines(t, base)
	})
}

// TestCloseDuringUpgradePairsEvents: an upgrade still waiting for its 101
// when the Server closes ends as "shutdown", and its ConnClosed follows a
// ConnOpened (metrics of opened and closed connections must match).
func TestCloseDuringUpgradePairsEvents(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		got, release := make(chan struct{}), make(chan struct{})
		addr := testkit.RawBackend(t, func(c net.Conn) {
			_, resp := testkit.ReadUpgrade(t, bufio.NewReader(c))
			close(got)
			<-release
			io.WriteString(c, resp)
			io.Copy(io.Discard, c)
		})
		p := newPool(t, "raw", balance.LeastConn, map[string]string{"raw": addr})
		e := startEdge(t, edgeConfig{splice: sp, tls: true, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
		c := e.rawConn(t)
		io.WriteString(c, testkit.RawUpgrade("/", "x"))
		<-got
		e.srv.Close()
		close(release)
		if reason := e.obs.waitClosed(t); reason != "shutdown" {
			t.Fatalf("reason: got %q, want shutdown", reason)
		}
		e.obs.mu.Lock()
		defer e.obs.mu.Unlock()
		if e.obs.opened != len(e.obs.closed) {
			t.Fatalf("ConnOpened %d times, ConnClosed %d times", e.obs.opened, len(e.obs.closed))
		}
	})
}

// floodingBackend is a raw backend that takes the upgrade and, once start
// is closed (at once when nil), writes 64 KiB frames until the proxy
// closes the connection.
func floodingBackend(t *testing.T, start <-chan struct{}) string {
	t.Helper()
	return testkit.RawBackend(t, func(c net.Conn) {
		_, resp := testkit.ReadUpgrade(t, bufio.NewReader(c))
		io.WriteString(c, resp)
		if start != nil {
			<-start
		}
		frame := append([]byte{0x82, 126, 0xff, 0xff}, make([]byte, 0xffff)...)
		for {
			c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Write(frame); err != nil {
				return // the proxy closed the connection
			}
		}
	})
}
