package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/testkit"
)

// TestNon101RelayNonReadingClientCut: a backend's non-101 answer to an
// upgrade request, too long to hold (over maxRelayBody), is streamed to a
// client that never reads. The pool's write timeout must end the relay and
// close the backend connection, as on the plain leg; until then the relay
// holds its admission slot, so stalled relays cannot pile up backend
// connections past the pool's max_connections.
func TestNon101RelayNonReadingClientCut(t *testing.T) {
	const size = 8 << 20
	payload := make([]byte, size)
	wrote := make(chan error, 4)
	addr := testkit.RawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if r.URL.Path != "/big" {
			io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
			return
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", size)
		_, err = c.Write(payload)
		wrote <- err
	})
	p := newPool(t, "chat", balance.LeastConn, map[string]string{"b": addr})
	// Long enough that the second upgrade below surely falls inside the
	// stalled relay even on a slow machine; the waits below bound the rest.
	p.WriteTimeout = 3 * time.Second
	p.HandshakeTimeout = 5 * time.Second
	p.MaxConns = 1
	e := startEdge(t, edgeConfig{opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
	c := e.rawConn(t)
	defer c.Close()
	// A tiny receive buffer: the client's kernel takes little of the answer.
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetReadBuffer(4096)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	io.WriteString(c, testkit.RawUpgrade("/big", "x"))
	var line [12]byte
	if _, err := io.ReadFull(c, line[:]); err != nil {
		t.Fatal(err)
	}
	if string(line[:]) != "HTTP/1.1 200" {
		t.Fatalf("status line %q", line)
	}
	// While the answer is being relayed, the pool's only slot is taken.
	resp, _ := rawRequest(t, e, testkit.RawUpgrade("/other", "x"))
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("second upgrade during a stalled relay: got %d, want 503 (pool_max_conns)", resp.StatusCode)
	}
	select {
	case <-wrote:
	case <-time.After(20 * time.Second):
		t.Fatal("the backend connection of a relay to a non-reading client was never closed")
	}
	testkit.WaitFor(t, "the stalled relay given up", func() bool { return e.srv.inflight.Load() == 0 })
}
