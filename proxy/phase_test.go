package proxy

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/testkit"
)

// TestWaitHTTPPhase: the wait returns once every counted socket is a live
// WebSocket, woken by the upgrade that makes the last one live, and by a
// socket that closes in its HTTP phase; while one is still in it, the wait
// holds until its context ends.
func TestWaitHTTPPhase(t *testing.T) {
	var n ListenerConns
	e, _ := oneBackendEdge(t, spliceGoroutines, false, func(_ *Pool, cfg *edgeConfig) {
		cfg.wrap = func(ln net.Listener) net.Listener { return WrapListenerCount(ln, nil, &n) }
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.dialWS(t, "/", nil)
	if err := e.srv.WaitHTTPPhase(ctx, &n); err != nil {
		t.Fatalf("only a live WebSocket open: %v", err)
	}

	// A socket that sent nothing yet is in its HTTP phase.
	raw, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	testkit.WaitFor(t, "the socket counted", func() bool { return n.Open() == 2 })
	short, stop := context.WithTimeout(ctx, 100*time.Millisecond)
	err = e.srv.WaitHTTPPhase(short, &n)
	stop()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a socket in its HTTP phase: got %v, want the wait held until its context ended", err)
	}

	// It becomes a WebSocket: the registration wakes the wait.
	done := make(chan error, 1)
	go func() { done <- e.srv.WaitHTTPPhase(ctx, &n) }()
	req := "GET / HTTP/1.1\r\nHost: edge.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := raw.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(raw), nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("after the upgrade: %v", err)
	}

	// A socket that closes in its HTTP phase wakes it too.
	idle, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the socket counted", func() bool { return n.Open() == 3 })
	go func() { done <- e.srv.WaitHTTPPhase(ctx, &n) }()
	idle.Close()
	if err := <-done; err != nil {
		t.Fatalf("after the close: %v", err)
	}
}
