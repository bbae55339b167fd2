package main

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/testkit"
	"github.com/gorilla/websocket"
)

// TestStalledClientsAreClosed: a TLS handshake that never starts and a
// request head that never ends are each closed after their timeout, while
// another client is served normally meanwhile.
func TestStalledClientsAreClosed(t *testing.T) {
	bs := backends(t, "b1")
	s := newSetup(t, bs, "least_conn", "")
	body := strings.Replace(readFile(t, s.cfg), "    address: \""+s.ws+"\"\n", "    address: \""+s.ws+"\"\n    read_header_timeout: 1s\n", 1)
	body = strings.Replace(body, "      certificates:", "      certificates:", 1)
	body = strings.Replace(body, "  - name: wss\n", "  - name: wss\n    tls_handshake_timeout: 1s\n", 1)
	writeFile(t, s.cfg, body)
	startEdge(t, s.cfg)

	stalledTLS, err := net.Dial("tcp", s.wss)
	if err != nil {
		t.Fatal(err)
	}
	defer stalledTLS.Close()
	slowHeaders, err := net.Dial("tcp", s.ws)
	if err != nil {
		t.Fatal(err)
	}
	defer slowHeaders.Close()
	if _, err := io.WriteString(slowHeaders, "GET / HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}

	c, _, err := s.dialer().Dial("wss://"+s.wss+"/", nil)
	if err != nil {
		t.Fatalf("a normal client was not served while others stalled: %v", err)
	}
	if got := testkit.Ask(t, c, "hi"); got != "hi" {
		t.Errorf("got %q, want hi", got)
	}
	c.Close()

	for name, conn := range map[string]net.Conn{"stalled TLS handshake": stalledTLS, "slow headers": slowHeaders} {
		_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
		_, err := io.ReadAll(conn)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Errorf("%s: the edge never closed the connection", name)
		}
	}
}

// TestHeadersTooLarge: a request head over max_header_bytes gets 431.
func TestHeadersTooLarge(t *testing.T) {
	bs := backends(t, "b1")
	s := newSetup(t, bs, "least_conn", "")
	body := strings.Replace(readFile(t, s.cfg), "    address: \""+s.ws+"\"\n", "    address: \""+s.ws+"\"\n    max_header_bytes: 1024\n", 1)
	writeFile(t, s.cfg, body)
	startEdge(t, s.cfg)
	req, _ := http.NewRequest("GET", "http://"+s.ws+"/", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 8192))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("got %d, want 431", resp.StatusCode)
	}
}

// TestProxyProtocolFromTrustedPeer: an L4 balancer on a trusted address
// sends a PROXY v1 header; the backend sees the original client.
func TestProxyProtocolFromTrustedPeer(t *testing.T) {
	bs := backends(t, "b1")
	s := newSetup(t, bs, "least_conn", "")
	body := strings.Replace(readFile(t, s.cfg), "    address: \""+s.ws+"\"\n", "    address: \""+s.ws+"\"\n    proxy_protocol: {enabled: true, trusted: [127.0.0.1]}\n", 1)
	writeFile(t, s.cfg, body)
	startEdge(t, s.cfg)

	conn, err := net.Dial("tcp", s.ws)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PROXY TCP4 203.0.113.7 127.0.0.1 40000 80\r\nGET /headers HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"X-Forwarded-For":["203.0.113.7"]`) {
		t.Errorf("backend did not see the PROXY-protocol client: %s", b)
	}
}

// TestTLSDefaults: TLS 1.2 minimum and ALPN http/1.1 on the public port.
func TestTLSDefaults(t *testing.T) {
	bs := backends(t, "b1")
	s := newSetup(t, bs, "least_conn", "")
	startEdge(t, s.cfg)
	_, err := tls.Dial("tcp", s.wss, &tls.Config{RootCAs: s.roots, MaxVersion: tls.VersionTLS11, MinVersion: tls.VersionTLS10})
	if err == nil {
		t.Error("a TLS 1.1 client was accepted")
	}
	c, err := tls.Dial("tcp", s.wss, &tls.Config{RootCAs: s.roots, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.ConnectionState().NegotiatedProtocol; got != "http/1.1" {
		t.Errorf("ALPN: got %q, want http/1.1", got)
	}
}

// TestFrameLimitFromConfig: pools[].websocket.max_frame_bytes reaches the
// splice; an oversized client frame gets close 1009 (base/base#2655).
func TestFrameLimitFromConfig(t *testing.T) {
	bs := backends(t, "b1")
	s := newSetup(t, bs, "least_conn", "    websocket: {max_frame_bytes: 1024, ping_interval: 1s, ping_timeout: 1s}\n")
	startEdge(t, s.cfg)
	c, _, err := s.dialer().Dial("wss://"+s.wss+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := testkit.Ask(t, c, strings.Repeat("a", 1024)); len(got) != 1024 {
		t.Fatalf("a frame at the limit: got %d bytes back, want 1024", len(got))
	}
	if err := c.WriteMessage(websocket.TextMessage, []byte(strings.Repeat("b", 2048))); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _, err = c.ReadMessage()
	ce, ok := err.(*websocket.CloseError)
	if !ok || ce.Code != websocket.CloseMessageTooBig {
		t.Errorf("after an oversized frame: got %v, want close 1009", err)
	}
}

// TestPoolConnectionRateFromConfig: pools[].limits.connection_rate caps new
// connections from all clients together (a reconnect storm, field note 11);
// the refused get 503 and a Retry-After, the admitted keep working.
func TestPoolConnectionRateFromConfig(t *testing.T) {
	bs := backends(t, "b1")
	s := newSetup(t, bs, "least_conn", "    limits: {connection_rate: 0.1, connection_burst: 2}\n")
	startEdge(t, s.cfg)
	var conns []*websocket.Conn
	for i := range 2 {
		c, _, err := s.dialer().Dial("wss://"+s.wss+"/", nil)
		if err != nil {
			t.Fatalf("connection %d of the burst: %v", i+1, err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	_, resp, err := s.dialer().Dial("wss://"+s.wss+"/", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third connection: got %v (%v), want 503 with Retry-After", resp, err)
	}
	for _, c := range conns {
		if got := testkit.Ask(t, c, "still here"); got == "" {
			t.Fatal("an admitted connection stopped answering")
		}
	}
}
