package testkit

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/wswire"
)

// Key is a valid Sec-WebSocket-Key: the example of RFC 6455 §1.3.
const Key = "dGhlIHNhbXBsZSBub25jZQ=="

// clientMask is the masking key of MaskedFrame's frames; any key will do
// (RFC 6455 §5.3), a fixed one keeps the bytes reproducible.
var clientMask = [4]byte{1, 2, 3, 4}

// RawUpgrade renders a WebSocket upgrade request (RFC 6455 §4.1) for path
// on host with Key, followed by the extra header lines.
func RawUpgrade(path, host string, extra ...string) string {
	var b strings.Builder
	b.WriteString("GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\n")
	b.WriteString("Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + Key + "\r\n")
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

// MaskedFrame renders a final client frame: masked, as RFC 6455 §5.3
// requires of a client.
func MaskedFrame(opcode byte, payload []byte) []byte {
	m := clientMask
	return wswire.AppendFrame(nil, opcode, payload, &m)
}

// ReadFrame reads one frame from br and returns its opcode and payload
// (unmasked if it was masked), failing the test on a short read or a bad
// header.
func ReadFrame(t testing.TB, br *bufio.Reader) (byte, []byte) {
	t.Helper()
	hdr := make([]byte, 2, wswire.MaxHeader)
	if _, err := io.ReadFull(br, hdr); err != nil {
		t.Fatalf("read frame header: %v", err)
	}
	rest := 0
	switch hdr[1] & 0x7f {
	case 126:
		rest = 2
	case 127:
		rest = 8
	}
	if hdr[1]&0x80 != 0 {
		rest += 4
	}
	hdr = hdr[:2+rest]
	if _, err := io.ReadFull(br, hdr[2:]); err != nil {
		t.Fatalf("read frame header: %v", err)
	}
	h, err := wswire.ParseHeader(hdr)
	if err != nil || h.Size != len(hdr) {
		t.Fatalf("frame header % x: %v", hdr, err)
	}
	if h.Length > 64<<20 {
		t.Fatalf("frame of %d bytes: more than a test sends", h.Length)
	}
	p := make([]byte, h.Length)
	if _, err := io.ReadFull(br, p); err != nil {
		t.Fatalf("read frame payload: %v", err)
	}
	if h.Masked {
		key := hdr[h.Size-4 : h.Size]
		for i := range p {
			p[i] ^= key[i%4]
		}
	}
	return h.Opcode, p
}

// Read101 reads the answer to the upgrade request written on c, within
// thirty seconds, and fails the test unless it is a 101; the reader holds
// what came after it.
func Read101(t testing.TB, c net.Conn) *bufio.Reader {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %v %v", resp, err)
	}
	return br
}

// ReadUpgrade reads an upgrade request on a raw backend and returns it
// with the 101 answer for it (RFC 6455 §4.2.2). It reports a failure with
// Errorf and returns nil, since it runs on a backend's goroutine.
func ReadUpgrade(t testing.TB, br *bufio.Reader) (*http.Request, string) {
	req, err := http.ReadRequest(br)
	if err != nil {
		t.Errorf("backend read request: %v", err)
		return nil, ""
	}
	return req, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
		wswire.AcceptKey(req.Header.Get("Sec-WebSocket-Key")) + "\r\n\r\n"
}
