package health

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/testkit"
)

func FuzzReadFrame(f *testing.F) {
	// Unmasked pong with 2 bytes of data.
	f.Add([]byte{0x8a, 0x02, 'h', 'i'})
	// Text frame with a 16-bit length, truncated.
	f.Add([]byte{0x81, 0x7e, 0x01, 0x00, 'x'})
	// 64-bit length far beyond the budget.
	f.Add([]byte{0x82, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	// Masked frame from a server (invalid).
	f.Add([]byte{0x8a, 0x80, 0, 0, 0, 0})
	// Control frame claiming 126 bytes.
	f.Add([]byte{0x89, 0x7e, 0x00, 0x7e})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		budget := int64(maxProbeRead)
		for range 64 {
			op, payload, n, err := readFrame(r, budget)
			if err != nil {
				return
			}
			if n < 2 || n > budget {
				t.Fatalf("consumed %d bytes, budget %d", n, budget)
			}
			if op >= 0x8 && len(payload) > 125 {
				t.Fatalf("control payload of %d bytes", len(payload))
			}
			budget -= n
		}
	})
}

func TestReadFrame(t *testing.T) {
	tests := []struct {
		name    string
		in      []byte
		op      byte
		payload string
		wantErr bool
	}{
		{"pong", []byte{0x8a, 0x02, 'h', 'i'}, opPong, "hi", false},
		{"text skipped", []byte{0x81, 0x7e, 0x00, 0x03, 'a', 'b', 'c'}, 0x1, "", false},
		{"masked", []byte{0x8a, 0x80, 0, 0, 0, 0}, 0, "", true},
		{"too long", []byte{0x82, 0x7f, 0, 0, 0, 0, 0x10, 0, 0, 0}, 0, "", true},
		{"truncated", []byte{0x8a, 0x05, 'h'}, 0, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op, payload, _, err := readFrame(bufio.NewReader(bytes.NewReader(tt.in)), maxProbeRead)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error: got %v, want error=%v", err, tt.wantErr)
			}
			if err == nil && (op != tt.op || string(payload) != tt.payload) {
				t.Errorf("got op %#x payload %q, want %#x %q", op, payload, tt.op, tt.payload)
			}
		})
	}
}

// TestProbeEndlessHeader: a backend answering a probe with a header that
// never ends fails the probe at the head limit: the prober stops reading
// there, so the backend gets rid of a few MiB at most (the limit plus the
// loopback socket buffers), not the 256 MiB it would send.
func TestProbeEndlessHeader(t *testing.T) {
	var sent atomic.Int64
	ended := make(chan struct{}, 64) // a client may retry (fasthttp does)
	addr := testkit.RawBackend(t, func(c net.Conn) {
		defer func() { ended <- struct{}{} }()
		http.ReadRequest(bufio.NewReader(c))
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nX-Endless: ")
		chunk := []byte(strings.Repeat("a", 32<<10))
		c.SetWriteDeadline(time.Now().Add(20 * time.Second))
		for range 8 << 10 { // 256 MiB at most; stops when the prober closes
			n, err := c.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	for _, tc := range []struct {
		name string
		p    prober
	}{
		{"websocket", wsProber{path: "/", maxHead: 64 << 10}},
		{"http", newHTTPProber("/", "", 200, 64<<10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			err := tc.p.probe(ctx, addr)
			if err == nil {
				t.Fatal("probe passed, want a failure")
			}
			if ctx.Err() != nil {
				t.Fatalf("probe ended by its deadline after %v (%v), not by the head limit", time.Since(start), err)
			}
			<-ended
			if got := sent.Swap(0); got > 32<<20 {
				t.Fatalf("the prober took %d MiB of the endless header", got>>20)
			}
		})
	}
}
