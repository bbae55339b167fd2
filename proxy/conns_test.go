package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/edgelb/edge/internal/wswire"
	"github.com/gorilla/websocket"
)

// TestSpoofedForwardedForDiscarded (gorouter#179), end to end.
func TestSpoofedForwardedForDiscarded(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		for _, tc := range []struct {
			name    string
			trusted []string
			wantXFF string
			wantIP  string
		}{
			{"untrusted peer", nil, "127.0.0.1", "127.0.0.1"},
			{"trusted peer", []string{"127.0.0.0/8"}, "1.2.3.4, 127.0.0.1", "1.2.3.4"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e, _ := oneBackendEdge(t, sp, false, func(_ *Pool, cfg *edgeConfig) {
					cfg.lo.TrustedProxies = mustPrefixes(tc.trusted...)
					cfg.lo.Forwarded = true
				})
				c, _ := e.dialWS(t, "/", http.Header{"X-Forwarded-For": {"1.2.3.4"}, "X-Real-Ip": {"1.2.3.4"}})
				h := testkit.AskHeaders(t, c)
				if got := strings.Join(h["X-Forwarded-For"], ", "); got != tc.wantXFF {
					t.Errorf("X-Forwarded-For: got %q, want %q", got, tc.wantXFF)
				}
				if got := strings.Join(h["X-Real-Ip"], ","); got != tc.wantIP {
					t.Errorf("X-Real-Ip: got %q, want %q", got, tc.wantIP)
				}
				if got := strings.Join(h["Forwarded"], ","); !strings.HasPrefix(got, "for=127.0.0.1;proto=http;host=") {
					t.Errorf("Forwarded: got %q", got)
				}
				if got := strings.Join(h["Sec-Websocket-Key"], ","); got == "" {
					t.Errorf("Sec-WebSocket-Key not passed through: %v", h)
				}
			})
		}
	})
}

// flushConn collects writes while hold is set and sends them in one write.
type flushConn struct {
	net.Conn
	mu   sync.Mutex
	hold bool
	buf  bytes.Buffer
}

func (f *flushConn) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hold {
		return f.buf.Write(p)
	}
	return f.Conn.Write(p)
}

func (f *flushConn) flush() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hold = false
	_, err := f.Conn.Write(f.buf.Bytes())
	return err
}

// TestTLSBufferedRecords: the handshake and the first frame arrive as two
// TLS records in one TCP segment. net/http reads one record; the second
// stays inside crypto/tls, where no readiness event will ever report it,
// so the splice must drain it before waiting.
func TestTLSBufferedRecords(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		e, _ := oneBackendEdge(t, sp, true, nil)
		raw, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		fc := &flushConn{Conn: raw}
		c := tls.Client(fc, e.tlsConfig())
		if err := c.Handshake(); err != nil {
			t.Fatal(err)
		}
		fc.mu.Lock()
		fc.hold = true
		fc.mu.Unlock()
		io.WriteString(c, testkit.RawUpgrade("/", "x"))
		c.Write(testkit.MaskedFrame(1, []byte("whoami")))
		if err := fc.flush(); err != nil {
			t.Fatal(err)
		}
		br := testkit.Read101(t, c)
		if _, p := testkit.ReadFrame(t, br); string(p) != "b1" {
			t.Fatalf("got %q, want b1", p)
		}
	})
}

// TestDrainBetweenFrames: a close requested while a backend frame is half
// sent goes out after that frame, never inside it.
func TestDrainBetweenFrames(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		rest := make(chan struct{})
		addr := testkit.RawBackend(t, func(c net.Conn) {
			br := bufio.NewReader(c)
			_, resp := testkit.ReadUpgrade(t, br)
			payload := bytes.Repeat([]byte{'a'}, 100)
			c.Write(append(append([]byte(resp), 0x82, 100), payload[:50]...))
			<-rest
			c.Write(payload[50:])
			c.Write([]byte{0x81, 5, 'l', 'a', 't', 'e', 'r'}) // after the close: dropped
			io.Copy(io.Discard, br)
		})
		p := newPool(t, "raw", balance.LeastConn, map[string]string{"raw": addr})
		e := startEdge(t, edgeConfig{splice: sp, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
		c := e.rawConn(t)
		io.WriteString(c, testkit.RawUpgrade("/", "x"))
		br := testkit.Read101(t, c)
		head := make([]byte, 52)
		if _, err := io.ReadFull(br, head); err != nil {
			t.Fatalf("first half: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		go e.srv.Drain(ctx, 0)
		testkit.WaitFor(t, "close request", func() bool { return e.srv.closeRequested() == 1 })
		close(rest)
		tail := make([]byte, 50)
		if _, err := io.ReadFull(br, tail); err != nil || !bytes.Equal(tail, bytes.Repeat([]byte{'a'}, 50)) {
			t.Fatalf("second half: got %q %v", tail, err)
		}
		op, pl := testkit.ReadFrame(t, br)
		if op != wswire.OpClose || int(pl[0])<<8|int(pl[1]) != CloseGoingAway {
			t.Fatalf("after the frame: got opcode %d %q, want close 1001", op, pl)
		}
		// The client's close reply still reaches the backend, which ends.
		c.Write(testkit.MaskedFrame(wswire.OpClose, []byte{0x03, 0xe9}))
		if b, _ := io.ReadAll(br); len(b) != 0 {
			t.Fatalf("after close: got %q, want nothing", b)
		}
	})
}

// logCounter counts access-log records.
type logCounter struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCounter) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.recs = append(l.recs, r)
	l.mu.Unlock()
	return nil
}
func (l *logCounter) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCounter) WithGroup(string) slog.Handler      { return l }
func (l *logCounter) count() int                         { l.mu.Lock(); defer l.mu.Unlock(); return len(l.recs) }

func TestAccessLogOneLine(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		lc := &logCounter{}
		e, _ := oneBackendEdge(t, sp, false, func(_ *Pool, cfg *edgeConfig) { cfg.opts.AccessLog = slog.New(lc) })
		c, _ := e.dialWS(t, "/", nil)
		testkit.Ask(t, c, "x")
		c.Close()
		e.obs.waitClosed(t)
		resp, err := e.httpClient().Get(e.httpURL("/whoami"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		_, resp, _ = e.dialer().Dial(e.url("/reject"), nil)
		if resp == nil || resp.StatusCode != 403 {
			t.Fatalf("reject: got %v", resp)
		}
		// The refusal's line follows its answer (serveWebSocket relays,
		// then logs): wait for it, then require exactly three.
		testkit.WaitFor(t, "three access lines", func() bool { return lc.count() >= 3 })
		if got, want := lc.count(), 3; got != want {
			t.Fatalf("access lines: got %d, want %d", got, want)
		}
		attrs := map[string]string{}
		lc.recs[0].Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		for _, k := range []string{"client", "route", "backend", "status", "dur_s", "bytes_in", "bytes_out", "reason"} {
			if _, ok := attrs[k]; !ok {
				t.Errorf("access line lacks %q: %v", k, attrs)
			}
		}
		if attrs["status"] != "101" || attrs["reason"] != "client_closed" || attrs["backend"] != "b1" {
			t.Errorf("ws line: %v", attrs)
		}
	})
}

// TestCloseBackend: connections on a leaving backend get close 1012, and
// so does one that registers after the close was asked for (it was picked
// before the backend left and was still being set up).
func TestCloseBackend(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		e, p := oneBackendEdge(t, sp, false, nil)
		c, _ := e.dialWS(t, "/", nil)
		testkit.Ask(t, c, "x")
		be := p.Balancer.Snapshot().ByID("b1")
		if got := e.srv.CloseBackend(be, 0); got != 1 {
			t.Fatalf("CloseBackend: got %d, want 1", got)
		}
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, _, err := c.ReadMessage(); !websocket.IsCloseError(err, CloseServiceRestart) {
			t.Fatalf("got %v, want close 1012", err)
		}
		late, _ := e.dialWS(t, "/", nil)
		late.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, _, err := late.ReadMessage(); !websocket.IsCloseError(err, CloseServiceRestart) {
			t.Fatalf("connection registered after CloseBackend: got %v, want close 1012", err)
		}
	})
}

// TestCloseConnsOnOnePoolOnly: an operator drain closes (1012) only the
// connections of the one *Backend, not a member of another pool that has
// the same ID, and Connections lists what is placed on it.
func TestCloseConnsOnOnePoolOnly(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		b := startBackend(t, "b1")
		pa := newPool(t, "a", balance.LeastConn, map[string]string{"b1": b.Addr()})
		pb := newPool(t, "b", balance.LeastConn, map[string]string{"b1": b.Addr()})
		cfg := edgeConfig{lo: ListenerOptions{Name: "public"}, splice: sp}
		cfg.opts.Routes = []Route{{PathPrefix: "/a", Pool: pa}, {Default: true, Pool: pb}}
		e := startEdge(t, cfg)
		ca, _ := e.dialWS(t, "/a/chat", nil)
		cb, _ := e.dialWS(t, "/b", nil)
		testkit.Ask(t, ca, "x")
		testkit.Ask(t, cb, "x")
		be := pa.Balancer.Snapshot().ByID("b1")
		conns := e.srv.Connections(be)
		if len(conns) != 1 || conns[0].Path != "/a/chat" || conns[0].Listener != "public" || conns[0].Client != "127.0.0.1" || conns[0].Closing {
			t.Fatalf("Connections: got %+v, want one open /a/chat from 127.0.0.1 on public", conns)
		}
		if got := e.srv.CloseConnsOn(be, CloseServiceRestart, 0, ReasonAdminDrain); got != 1 {
			t.Fatalf("CloseConnsOn: got %d, want 1", got)
		}
		ca.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, _, err := ca.ReadMessage(); !websocket.IsCloseError(err, CloseServiceRestart) {
			t.Fatalf("pool a: got %v, want close 1012", err)
		}
		if got := testkit.Ask(t, cb, "still"); got != "still" {
			t.Errorf("pool b's connection: got %q after draining pool a's b1", got)
		}
	})
}
