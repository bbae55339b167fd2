package testkit

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// ClientTLS is a client TLS configuration trusting roots and verifying
// serverName ("" for the host dialled).
func ClientTLS(roots *x509.CertPool, serverName string) *tls.Config {
	return &tls.Config{RootCAs: roots, ServerName: serverName}
}

// Dialer is a WebSocket dialer trusting roots (nil for the system's),
// verifying serverName ("" for the host dialled), with a bounded handshake.
func Dialer(roots *x509.CertPool, serverName string) *websocket.Dialer {
	return &websocket.Dialer{TLSClientConfig: ClientTLS(roots, serverName), HandshakeTimeout: 30 * time.Second}
}

// HTTPClient is an HTTP client trusting roots (nil for the system's),
// verifying serverName ("" for the host dialled), with a bounded exchange.
func HTTPClient(roots *x509.CertPool, serverName string) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: ClientTLS(roots, serverName)}, Timeout: 30 * time.Second}
}

// Ask sends msg as a text message on c and returns the answer, failing
// the test unless one arrives within thirty seconds.
func Ask(t testing.TB, c *websocket.Conn, msg string) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
	_, b, err := c.ReadMessage()
	if err != nil {
		t.Fatalf("read answer to %q: %v", msg, err)
	}
	return string(b)
}

// AskHeaders asks an internal/testbackend server for the headers of the
// upgrade request it received.
func AskHeaders(t testing.TB, c *websocket.Conn) map[string][]string {
	t.Helper()
	var h map[string][]string
	if err := json.Unmarshal([]byte(Ask(t, c, "headers")), &h); err != nil {
		t.Fatalf("headers JSON: %v", err)
	}
	return h
}
