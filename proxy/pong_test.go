package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/edgelb/edge/internal/wswire"
)

// pongEdge starts an edge over TLS pinging silent clients every interval
// (frames limited to frameLimit, 0: pings only) in front of a raw backend that writes first behind its 101; the reader
// it returns holds what edge forwarded to the backend.
func pongEdge(t *testing.T, sp splicePath, interval time.Duration, first []byte, frameLimit int64) (*edge, *bufio.Reader) {
	t.Helper()
	pr, pw := io.Pipe()
	t.Cleanup(func() { pr.Close() })
	addr := testkit.RawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		_, resp := testkit.ReadUpgrade(t, br)
		io.WriteString(c, resp)
		c.Write(first)
		io.Copy(pw, br)
		pw.Close()
	})
	p := newPool(t, "raw", balance.LeastConn, map[string]string{"raw": addr})
	p.PingInterval = interval
	p.PingTimeout = time.Minute
	p.MaxFrameBytes = frameLimit
	e := startEdge(t, edgeConfig{splice: sp, tls: true, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
	return e, bufio.NewReader(pr)
}

var emptyPong = maskedFrameN(wswire.OpPong, true, nil)

// wantFrame reads the next frame edge forwarded to the backend.
func wantFrame(t *testing.T, br *bufio.Reader, op byte, payload string) {
	t.Helper()
	if gop, gp := testkit.ReadFrame(t, br); gop != op || string(gp) != payload {
		t.Fatalf("backend got opcode %d %q, want %d %q", gop, gp, op, payload)
	}
}

// TestPongToEdgePingNotForwarded: a silent client pinged by edge answers
// with a pong; the backend gets the message behind it, not the pong.
func TestPongToEdgePingNotForwarded(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		for _, limit := range []int64{1 << 20, 0} {
			e, backend := pongEdge(t, sp, 20*time.Millisecond, nil, limit)
			c, br := rawUpgraded(t, e)
			if op, pl := testkit.ReadFrame(t, br); op != wswire.OpPing || len(pl) != 0 {
				t.Fatalf("first frame: opcode %d %q, want edge's ping", op, pl)
			}
			c.Write(append(append([]byte{}, emptyPong...), maskedFrameN(wswire.OpText, true, []byte("after"))...))
			wantFrame(t, backend, wswire.OpText, "after")
		}
	})
}

// TestPongToBackendPingForwarded: with the backend's ping outstanding, the
// client's pong goes to the backend even though edge's ping is out too; a
// second pong then answers edge's and stays.
func TestPongToBackendPingForwarded(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		first := append(serverFrame(wswire.OpPing, true, nil), serverFrame(wswire.OpText, true, []byte("pinged"))...)
		e, backend := pongEdge(t, sp, 20*time.Millisecond, first, 1<<20)
		c, br := rawUpgraded(t, e)
		// Read until the backend's ping (before its text) and one of
		// edge's were both seen.
		pings, text := 0, false
		for pings < 2 || !text {
			switch op, pl := testkit.ReadFrame(t, br); {
			case op == wswire.OpPing:
				pings++
			case op == wswire.OpText && string(pl) == "pinged":
				text = true
			default:
				t.Fatalf("client got opcode %d %q", op, pl)
			}
		}
		c.Write(append(append([]byte{}, emptyPong...), maskedFrameN(wswire.OpText, true, []byte("one"))...))
		wantFrame(t, backend, wswire.OpPong, "")
		wantFrame(t, backend, wswire.OpText, "one")
		c.Write(append(append([]byte{}, emptyPong...), maskedFrameN(wswire.OpText, true, []byte("two"))...))
		wantFrame(t, backend, wswire.OpText, "two")
	})
}

// TestUnsolicitedPongForwarded: a pong with no ping out from edge goes on.
func TestUnsolicitedPongForwarded(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		e, backend := pongEdge(t, sp, time.Hour, nil, 1<<20)
		c, _ := rawUpgraded(t, e)
		c.Write(emptyPong)
		wantFrame(t, backend, wswire.OpPong, "")
	})
}

// TestSplitPongForwardedIntact: a pong to edge's ping whose header comes
// in two TLS records, read apart, goes on whole: its first bytes already
// went by the time the rest arrives.
func TestSplitPongForwardedIntact(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		e, backend := pongEdge(t, sp, 20*time.Millisecond, nil, 1<<20)
		c, br := rawUpgraded(t, e)
		if op, _ := testkit.ReadFrame(t, br); op != wswire.OpPing {
			t.Fatalf("first frame: opcode %d, want edge's ping", op)
		}
		c.Write(emptyPong[:3])
		got := make([]byte, len(emptyPong))
		if _, err := io.ReadFull(backend, got[:3]); err != nil {
			t.Fatalf("backend read: %v", err)
		}
		c.Write(emptyPong[3:])
		if _, err := io.ReadFull(backend, got[3:]); err != nil {
			t.Fatalf("backend read: %v", err)
		}
		if !bytes.Equal(got, emptyPong) {
			t.Fatalf("backend got % x, want % x", got, emptyPong)
		}
		c.Write(maskedFrameN(wswire.OpText, true, []byte("after")))
		wantFrame(t, backend, wswire.OpText, "after")
	})
}
