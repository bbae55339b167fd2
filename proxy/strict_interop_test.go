package proxy

import (
	"bufio"
	"bytes"
	"compress/flate"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/interop"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/edgelb/edge/internal/wswire"
)

// aiohttpBackend starts the lenient backend of testdata/aiohttpbackend.py
// (aiohttp, max_msg_size=0, permessage-deflate answered) and returns its
// address and the lines it prints after its port: one per message it
// assembled, and "closed" at each connection's end.
func aiohttpBackend(t *testing.T) (string, <-chan string) {
	t.Helper()
	cmd := interop.PythonWith(t, interopCtx(t), "aiohttp", "python3-aiohttp", "testdata/aiohttpbackend.py")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 64)
	sc := bufio.NewScanner(out)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "port ") {
		t.Fatalf("aiohttp backend did not start: %q", sc.Text())
	}
	port := strings.TrimPrefix(sc.Text(), "port ")
	go func() {
		defer close(lines)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return "127.0.0.1:" + port, lines
}

// deflated is msg compressed as a permessage-deflate message (RFC 7692
// §7.2.1: flushed, the empty block's four octets removed).
func deflated(t *testing.T, msg []byte) []byte {
	var b bytes.Buffer
	w, _ := flate.NewWriter(&b, flate.BestCompression)
	w.Write(msg)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte{0, 0, 0xff, 0xff})
}

// frameOf is a frame with the first header byte b0, masked unless
// unmasked.
func frameOf(b0 byte, payload []byte, unmasked bool) []byte {
	var k *[4]byte
	if !unmasked {
		k = &[4]byte{0x5a, 0x17, 0xc3, 0x2e}
	}
	f := wswire.AppendFrame(nil, b0&0x0f, payload, k)
	f[0] = b0
	return f
}

// TestLenientBackendNeverAssemblesPastTheLimit: the three framings that
// took an aiohttp backend past max_message_bytes (an unmasked client
// frame, RSV1 on a continuation after a ping, a new text frame inside an
// unfinished message) are refused with a close 1002, and what aiohttp
// assembles stays within the limit, on both splice drivers.
func TestLenientBackendNeverAssemblesPastTheLimit(t *testing.T) {
	const limit = 65536
	bomb := deflated(t, bytes.Repeat([]byte{'a'}, 20<<20))
	chunk := bytes.Repeat([]byte{'b'}, 60000)
	attacks := map[string][]byte{
		"unmasked frame": append(frameOf(0xC1, deflated(t, []byte("hello")), false), frameOf(0xC1, bomb, true)...),
		"RSV1 on a continuation after a ping": append(append(frameOf(0x01, nil, false),
			frameOf(0x89, nil, false)...), frameOf(0xC0, bomb, false)...),
		"text frame inside an unfinished message": func() []byte {
			var s []byte
			for range 40 {
				s = append(s, frameOf(0x01, chunk, false)...)
			}
			return append(s, frameOf(0x80, chunk[:1000], false)...)
		}(),
	}
	forEachPath(t, func(t *testing.T, sp splicePath) {
		addr, lines := aiohttpBackend(t)
		p := newPool(t, "lenient", balance.LeastConn, map[string]string{"aio": addr})
		p.MaxMessageBytes = limit
		e := startEdge(t, edgeConfig{splice: sp, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
		for name, attack := range attacks {
			t.Run(name, func(t *testing.T) {
				c, br := dialDeflate(t, e.addr)
				go func() { _, _ = c.Write(attack) }()
				// What aiohttp assembled, until edge closed its connection.
				for done := false; !done; {
					select {
					case line := <-lines:
						t.Logf("aiohttp: %s", line)
						f := strings.Fields(line)
						if n, _ := strconv.Atoi(f[len(f)-1]); n > limit {
							t.Fatalf("aiohttp assembled %s bytes through a limit of %d", f[len(f)-1], limit)
						}
						done = line == "closed"
					case <-time.After(30 * time.Second):
						t.Fatal("aiohttp's connection did not end within 30 s")
					}
				}
				if code := readClose(t, c, br); code != 1002 {
					t.Errorf("close %d from edge, want 1002", code)
				}
			})
		}
	})
}

// readClose reads frames from edge until a close and returns its code.
func readClose(t *testing.T, c net.Conn, br *bufio.Reader) int {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		op, p := testkit.ReadFrame(t, br)
		if op == wswire.OpClose {
			if len(p) < 2 {
				return 1005
			}
			return int(p[0])<<8 | int(p[1])
		}
	}
}

// TestNodeWSNeverInflatesTheTailPastTheLimit: the four octets a receiver
// appends to a compressed message (RFC 7692 §7.2.2) inflate too: inside
// the block midblock-1 leaves open they are 258-byte matches. With the
// pool's limit at what the message holds without them, a Node ws backend
// (maxPayload 128 MiB) used to deliver it whole, past the limit; now its
// last byte stays back, the client gets a close, and the backend never
// delivers the message.
func TestNodeWSNeverInflatesTheTailPastTheLimit(t *testing.T) {
	m1, err := os.ReadFile("internal/wsession/testdata/midblock-1.deflate")
	if err != nil {
		t.Fatal(err)
	}
	// What a decoder makes of the message alone, without the tail.
	without, _ := io.Copy(io.Discard, flate.NewReader(bytes.NewReader(m1)))
	with, _ := io.Copy(io.Discard, flate.NewReader(bytes.NewReader(append(append([]byte{}, m1...), 0, 0, 0xff, 0xff))))
	if with <= without {
		t.Fatalf("the fixture: %d bytes with the tail, %d without; want more with", with, without)
	}
	forEachPath(t, func(t *testing.T, sp splicePath) {
		b := startNodeBackend(t)
		p := newPool(t, "tail", balance.LeastConn, map[string]string{"node": b.addr})
		p.MaxMessageBytes = max(without, 1)
		e := startEdge(t, edgeConfig{splice: sp, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
		c, br := dialDeflate(t, e.addr)
		if _, err := c.Write(frameOf(0xC2, m1, false)); err != nil {
			t.Fatal(err)
		}
		if code := readClose(t, c, br); code != 1009 && code != 1007 {
			t.Errorf("close %d from edge, want 1009 (or 1007)", code)
		}
		_, _ = c.Write(frameOf(0x88, []byte{0x03, 0xe8}, false)) // the close handshake's answer: edge stops lingering
		e.obs.waitClosed(t)
		for {
			select {
			case ev := <-b.events:
				if ev.Event == "message" {
					t.Fatalf("Node ws delivered a message of %d bytes through a limit of %d", ev.Size, p.MaxMessageBytes)
				}
				if ev.Event != "close" && ev.Event != "error" {
					continue
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the backend's connection did not end")
			}
			break
		}
	})
}

// dialDeflate opens a raw WebSocket to edge at addr offering
// permessage-deflate and returns it after the 101; it closes with the test.
func dialDeflate(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte(testkit.RawUpgrade("/", "edge.test", "Sec-WebSocket-Extensions: permessage-deflate"))); err != nil {
		t.Fatal(err)
	}
	return c, testkit.Read101(t, c)
}
