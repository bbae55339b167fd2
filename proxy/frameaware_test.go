package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/edgelb/edge/internal/wswire"
	"github.com/gorilla/websocket"
)

// maskedFrameN renders a masked client frame, final or not.
func maskedFrameN(opcode byte, fin bool, payload []byte) []byte {
	mask := [4]byte{9, 8, 7, 6}
	return unfinished(wswire.AppendFrame(nil, opcode, payload, &mask), fin)
}

// serverFrame renders an unmasked backend frame, final or not.
func serverFrame(opcode byte, fin bool, payload []byte) []byte {
	return unfinished(wswire.AppendFrame(nil, opcode, payload, nil), fin)
}

// unfinished clears the FIN bit of frame f unless fin (RFC 6455 §5.2).
func unfinished(f []byte, fin bool) []byte {
	if !fin {
		f[0] &^= 0x80
	}
	return f
}

// closeCodeOf returns the close code carried by a gorilla read error.
func closeCodeOf(err error) int {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		return ce.Code
	}
	return 0
}

// sinkBackend is a raw backend that answers the upgrade, then reads and
// drops whatever edge forwards until the connection ends.
func sinkBackend(t *testing.T) string {
	t.Helper()
	return testkit.RawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		_, resp := testkit.ReadUpgrade(t, br)
		io.WriteString(c, resp)
		io.Copy(io.Discard, br)
	})
}

// rawUpgraded dials the edge without an HTTP client and completes the
// upgrade; the reader then holds whatever follows the 101.
func rawUpgraded(t *testing.T, e *edge) (net.Conn, *bufio.Reader) {
	t.Helper()
	c := e.rawConn(t)
	io.WriteString(c, testkit.RawUpgrade("/", "x"))
	return c, testkit.Read101(t, c)
}

// TestMaxFrameBytesClient: a client frame over the limit is answered with
// close 1009 and ends the backend connection; a frame exactly at the limit
// passes, and another connection on the same server is not disturbed.
func TestMaxFrameBytesClient(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		b := startBackend(t, "b1")
		p := newPool(t, "chat", balance.LeastConn, map[string]string{"b1": b.Addr()})
		p.MaxFrameBytes = 100
		e := startEdge(t, edgeConfig{splice: sp, tls: true, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
		other, _ := e.dialWS(t, "/", nil)
		c, _ := e.dialWS(t, "/", nil)
		testkit.WaitFor(t, "two backend connections", func() bool { return b.Conns() == 2 })

		atLimit := string(bytes.Repeat([]byte{'a'}, 100))
		if got := testkit.Ask(t, c, atLimit); got != atLimit {
			t.Fatalf("frame at the limit: got %d bytes back, want %d", len(got), len(atLimit))
		}
		if err := c.WriteMessage(websocket.TextMessage, bytes.Repeat([]byte{'b'}, 101)); err != nil {
			t.Fatalf("write over the limit: %v", err)
		}
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, _, err := c.ReadMessage()
		if got, want := closeCodeOf(err), CloseMessageTooBig; got != want {
			t.Fatalf("close code: got %d (%v), want %d", got, err, want)
		}
		if got, want := e.obs.waitClosed(t), "frame_too_big"; got != want {
			t.Fatalf("reason: got %q, want %q", got, want)
		}
		testkit.WaitFor(t, "the backend connection to end", func() bool { return b.Conns() == 1 })
		if got, want := testkit.Ask(t, other, "whoami"), "b1"; got != want {
			t.Fatalf("other connection: got %q, want %q", got, want)
		}
	})
}

// TestMaxFrameBytesSplitWrites: headers and payloads arriving a byte at a
// time are tracked exactly: a frame at the limit passes, one byte more
// gets close 1009.
func TestMaxFrameBytesSplitWrites(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		b := startBackend(t, "b1")
		p := newPool(t, "chat", balance.LeastConn, map[string]string{"b1": b.Addr()})
		p.MaxFrameBytes = 200
		e := startEdge(t, edgeConfig{splice: sp, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
		c, br := rawUpgraded(t, e)
		trickle := func(f []byte) {
			for i := range f {
				if _, err := c.Write(f[i : i+1]); err != nil {
					t.Fatalf("write byte %d: %v", i, err)
				}
			}
		}
		want := bytes.Repeat([]byte{'x'}, 200)
		for range 3 {
			trickle(maskedFrameN(websocket.BinaryMessage, true, want))
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			if op, got := testkit.ReadFrame(t, br); op != websocket.BinaryMessage || !bytes.Equal(got, want) {
				t.Fatalf("echo: got opcode %d, %d bytes; want binary, %d bytes", op, len(got), len(want))
			}
		}
		// The header alone (2 bytes, 16-bit length, mask key) decides.
		trickle(maskedFrameN(websocket.BinaryMessage, true, append(want, 'y'))[:8])
		op, pl := testkit.ReadFrame(t, br)
		if op != wswire.OpClose || len(pl) < 2 || int(pl[0])<<8|int(pl[1]) != CloseMessageTooBig {
			t.Fatalf("after a frame over the limit: got opcode %d %q, want close 1009", op, pl)
		}
		if got, want := e.obs.waitClosed(t), "frame_too_big"; got != want {
			t.Fatalf("reason: got %q, want %q", got, want)
		}
	})
}

// TestMaxFrameBytesBackend: a backend frame over the limit closes both
// sides; frames up to the limit pass.
func TestMaxFrameBytesBackend(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		backendDone := make(chan error, 1)
		addr := testkit.RawBackend(t, func(c net.Conn) {
			br := bufio.NewReader(c)
			_, resp := testkit.ReadUpgrade(t, br)
			io.WriteString(c, resp)
			c.Write(serverFrame(websocket.TextMessage, true, bytes.Repeat([]byte{'a'}, 100)))
			// Only the header of the frame over the limit: its length
			// alone must be enough.
			c.Write([]byte{0x82, 126, 0x10, 0x00})
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, err := io.Copy(io.Discard, br)
			backendDone <- err
		})
		p := newPool(t, "raw", balance.LeastConn, map[string]string{"raw": addr})
		p.MaxFrameBytes = 100
		e := startEdge(t, edgeConfig{splice: sp, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
		c, _ := e.dialWS(t, "/", nil)
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, m, err := c.ReadMessage(); err != nil || len(m) != 100 {
			t.Fatalf("frame at the limit: got %d bytes, %v", len(m), err)
		}
		if _, _, err := c.ReadMessage(); err == nil {
			t.Fatal("read after a backend frame over the limit succeeded")
		}
		if got, want := e.obs.waitClosed(t), "backend_frame_too_big"; got != want {
			t.Fatalf("reason: got %q, want %q", got, want)
		}
		select {
		case err := <-backendDone:
			if err != nil && !testkit.IsClosed(err) {
				t.Fatalf("backend: got %v, want the proxy to close it", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("backend connection still open")
		}
	})
}

// TestPingKeepsAnsweringClient: a silent client is pinged, and one that
// answers (gorilla replies with a pong while it reads) stays connected
// across many intervals, well past PingTimeout.
func TestPingKeepsAnsweringClient(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		e, _ := oneBackendEdge(t, sp, true, func(p *Pool, _ *edgeConfig) {
			p.PingInterval = 20 * time.Millisecond
			// Generous, so a loaded test machine delaying one pong does
			// not close the connection; the pings below still span more
			// than this.
			p.PingTimeout = 3 * time.Second
		})
		c, _ := e.dialWS(t, "/", nil)
		pings := make(chan struct{}, 200)
		c.SetPingHandler(func(data string) error {
			select {
			case pings <- struct{}{}:
			default:
			}
			return c.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
		})
		msgs := make(chan string, 1)
		go func() {
			defer close(msgs)
			for {
				_, m, err := c.ReadMessage()
				if err != nil {
					return
				}
				msgs <- string(m)
			}
		}()
		const want = 200 // at least 4 s of silence answered only by pongs
		deadline := time.After(30 * time.Second)
		for i := range want {
			select {
			case <-pings:
			case <-deadline:
				t.Fatalf("got %d pings, want %d", i, want)
			}
		}
		if err := c.WriteMessage(websocket.TextMessage, []byte("whoami")); err != nil {
			t.Fatalf("write: %v", err)
		}
		select {
		case got := <-msgs:
			if want := "b1"; got != want {
				t.Fatalf("answer: got %q, want %q", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no answer after the pings")
		}
		select {
		case r := <-e.obs.closeCh:
			t.Fatalf("connection closed with reason %q", r)
		default:
		}
		e.obs.mu.Lock()
		sent := e.obs.pings
		e.obs.mu.Unlock()
		if sent < want {
			t.Fatalf("Observer pings: got %d, want at least the %d received", sent, want)
		}
	})
}

// TestPingTimeoutReapsSilentClient: a client that sends nothing after our
// ping (a half-open mobile socket, traefik#10627) is closed.
func TestPingTimeoutReapsSilentClient(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		e, _ := oneBackendEdge(t, sp, true, func(p *Pool, _ *edgeConfig) {
			p.PingInterval = 20 * time.Millisecond
			p.PingTimeout = 60 * time.Millisecond
		})
		_, br := rawUpgraded(t, e)
		if op, pl := testkit.ReadFrame(t, br); op != websocket.PingMessage || len(pl) > 125 {
			t.Fatalf("first frame: got opcode %d %q, want a ping", op, pl)
		}
		if got, want := e.obs.waitClosed(t), "ping_timeout"; got != want {
			t.Fatalf("reason: got %q, want %q", got, want)
		}
	})
}

// TestPingNeverInsideFrame: while the backend streams large fragmented
// messages slowly, due pings go between frames only, so the client's
// parser sees a valid stream and every message arrives whole. The backend
// streams until the client has seen a ping (bounded), so a slow machine
// cannot end the stream before a ping fell due.
func TestPingNeverInsideFrame(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		const frags, fragSize, piece, maxMsgs = 40, 4000, 500, 50
		var pings atomic.Int32
		addr := testkit.RawBackend(t, func(c net.Conn) {
			br := bufio.NewReader(c)
			_, resp := testkit.ReadUpgrade(t, br)
			io.WriteString(c, resp)
			pongs := make(chan struct{})
			go func() { // the client's pongs
				defer close(pongs)
				io.Copy(io.Discard, br)
			}()
			for m := 0; m < maxMsgs && pings.Load() == 0; m++ {
				for i := range frags {
					op := byte(websocket.BinaryMessage)
					if i > 0 {
						op = 0 // continuation
					}
					f := serverFrame(op, i == frags-1, bytes.Repeat([]byte{byte('a' + i%26)}, fragSize))
					for len(f) > 0 {
						k := min(piece, len(f))
						if _, err := c.Write(f[:k]); err != nil {
							return
						}
						f = f[k:]
						// Pacing, not synchronisation: pings fall due
						// while frames are half sent.
						time.Sleep(time.Millisecond)
					}
				}
			}
			c.Write(serverFrame(websocket.TextMessage, true, []byte("done")))
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			<-pongs
		})
		p := newPool(t, "raw", balance.LeastConn, map[string]string{"raw": addr})
		p.PingInterval = 10 * time.Millisecond
		e := startEdge(t, edgeConfig{splice: sp, tls: true, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
		c, _ := e.dialWS(t, "/", nil)
		c.SetPingHandler(func(data string) error {
			pings.Add(1)
			return c.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
		})
		for n := 0; ; n++ {
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			typ, m, err := c.ReadMessage()
			if err != nil {
				t.Fatalf("read message %d: %v", n, err)
			}
			if typ == websocket.TextMessage && string(m) == "done" {
				break
			}
			if typ != websocket.BinaryMessage || len(m) != frags*fragSize {
				t.Fatalf("message %d: got type %d, %d bytes; want binary, %d bytes", n, typ, len(m), frags*fragSize)
			}
			for i := range frags {
				if want := bytes.Repeat([]byte{byte('a' + i%26)}, fragSize); !bytes.Equal(m[i*fragSize:(i+1)*fragSize], want) {
					t.Fatalf("message %d: fragment %d corrupted", n, i)
				}
			}
		}
		if pings.Load() == 0 {
			t.Fatalf("got no ping while %d messages streamed", maxMsgs)
		}
	})
}
