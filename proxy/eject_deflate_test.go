package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
)

// gorillaDeflateBackend is a real gorilla/websocket server with
// compression on: it accepts every permessage-deflate offer with
// server_no_context_takeover and client_no_context_takeover and ignores
// the offer's window parameters.
func gorillaDeflateBackend(t *testing.T) string {
	t.Helper()
	up := websocket.Upgrader{EnableCompression: true}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestClientWindowRequestEjectsNothing: a client that asks for
// server_max_window_bits (RFC 7692 §7.1.2.1) from a backend that ignores
// it gets an answer it would have to refuse; whose choice that was is the
// client's, so it is no strike against the backend, however many clients
// ask.
func TestClientWindowRequestEjectsNothing(t *testing.T) {
	p := ejectingPool(t, map[string]string{"a": gorillaDeflateBackend(t), "b": gorillaDeflateBackend(t)})
	p.MaxMessageBytes = 1 << 20 // the limit policy: the answer is checked
	e := startEdge(t, edgeConfig{opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
	for i := range 4 {
		resp, _ := upgradeAnswer(t, e, "/", "Sec-WebSocket-Extensions: permessage-deflate; server_max_window_bits=10")
		if resp.StatusCode == http.StatusSwitchingProtocols {
			t.Fatalf("request %d: 101 with %q, which the client asked not to get", i, resp.Header.Get("Sec-WebSocket-Extensions"))
		}
	}
	if got := ejectedIDs(p); len(got) != 0 {
		t.Fatalf("ejected after clients asked for a window the backend ignores: %v", got)
	}
	if got := e.obs.dialFailures(); len(got) != 0 {
		t.Fatalf("dial failures counted: %v", got)
	}
	// The same backends still serve a client that asks for nothing special.
	resp, _ := upgradeAnswer(t, e, "/", "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits")
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("plain offer: status %d", resp.StatusCode)
	}
}
