package proxy

import (
	"bufio"
	"bytes"
	"compress/flate"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/testkit"
	"github.com/edgelb/edge/internal/wswire"
)

// compressedFrame is a client text frame holding msg compressed as a
// permessage-deflate sender does (RFC 7692 §7.2.1, no context takeover).
func compressedFrame(t *testing.T, msg []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestCompression)
	w.Write(msg)
	w.Flush()
	c := bytes.TrimSuffix(buf.Bytes(), []byte{0, 0, 0xff, 0xff})
	f := testkit.MaskedFrame(wswire.OpText, c)
	f[0] |= 0x40 // RSV1: compressed (§6)
	return f
}

// deflateRawBackend accepts permessage-deflate and reports the byte
// counts it reads.
func deflateRawBackend(t *testing.T, got chan<- int) string {
	return testkit.RawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		_, resp := testkit.ReadUpgrade(t, br)
		io.WriteString(c, strings.TrimSuffix(resp, "\r\n")+"Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		buf := make([]byte, 64<<10)
		for {
			n, err := br.Read(buf)
			if n > 0 {
				got <- n
			}
			if err != nil {
				return
			}
		}
	})
}

// readCloseCode reads one unmasked server frame and returns its close
// code (-1: not a close frame).
func readCloseCode(br *bufio.Reader) int {
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return -1
	}
	p := make([]byte, h[1]&0x7f)
	if _, err := io.ReadFull(br, p); err != nil || h[0]&0x0f != wswire.OpClose || len(p) < 2 {
		return -1
	}
	return int(p[0])<<8 | int(p[1])
}

// TestHandoffDeflate: a connection that negotiated permessage-deflate
// under the limit policy moves between two messages, and B still counts
// its messages inflated (a bomb after the move gets 1009, reason
// message_too_big_inflated, in B). One that sits in the middle of a
// compressed message does not move: its counting inflater is mid-stream,
// and it gets a 1012.
func TestHandoffDeflate(t *testing.T) {
	tune := func(p *Pool) { p.MaxMessageBytes = 1 << 20 }
	offer := "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits"
	t.Run("between messages", func(t *testing.T) {
		got := make(chan int, 1024)
		pr := startPair(t, deflateRawBackend(t, got), tune, edgeConfig{})
		conn := pr.a.rawConn(t)
		conn.Write([]byte(testkit.RawUpgrade("/", "x", offer)))
		br := testkit.Read101(t, conn)
		small := compressedFrame(t, []byte(strings.Repeat("hello ", 100)))
		conn.Write(small)
		for n := 0; n < len(small); n += <-got {
		}
		if moved, _, _ := pr.handoff(t, time.Second); moved != 1 {
			t.Fatalf("moved %d, want 1", moved)
		}
		conn.Write(compressedFrame(t, bytes.Repeat([]byte{'a'}, 8<<20)))
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		if c := readCloseCode(br); c != CloseMessageTooBig {
			t.Fatalf("after the bomb: close %d, want 1009", c)
		}
		if r := pr.b.obs.waitClosed(t); r != string(ReasonMessageTooBigInflated) {
			t.Fatalf("B closed it for %q, want %q", r, ReasonMessageTooBigInflated)
		}
		// B's access line shows the extension and what the bomb inflated
		// to before the close: the limit.
		var line map[string]any
		for _, l := range accessLines(t, pr.logB) {
			if l["kind"] == "ws" {
				line = l
			}
		}
		if line["deflate"] != "limit" || line["deflate_inflated_in"] != float64(1<<20) {
			t.Fatalf("access line %v: want deflate limit and deflate_inflated_in %d", line, 1<<20)
		}
	})
	t.Run("mid-message", func(t *testing.T) {
		got := make(chan int, 1024)
		pr := startPair(t, deflateRawBackend(t, got), tune, edgeConfig{})
		conn := pr.a.rawConn(t)
		conn.Write([]byte(testkit.RawUpgrade("/", "x", offer)))
		br := testkit.Read101(t, conn)
		f := compressedFrame(t, []byte(strings.Repeat("mid-message ", 1000)))
		conn.Write(f[:len(f)/2])
		for n := 0; n < len(f)/2; n += <-got {
		}
		code := make(chan int, 1)
		go func() {
			// The hand-off ends once the connection does: read the close
			// and close, as a client does.
			conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			c := readCloseCode(br)
			conn.Close()
			code <- c
		}()
		if moved, closed, _ := pr.handoff(t, 0); moved != 0 || closed != 1 {
			t.Fatalf("moved %d closed %d, want 0 and 1", moved, closed)
		}
		if c := <-code; c != CloseServiceRestart {
			t.Fatalf("client got %d, want a close frame 1012", c)
		}
	})
}
