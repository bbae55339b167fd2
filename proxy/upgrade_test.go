package proxy

import (
	"bufio"
	"net/http"
	"strings"
	"testing"

	"github.com/edgelb/edge/internal/testkit"
	"github.com/edgelb/edge/internal/wswire"
)

func TestCheckUpgradeTokens(t *testing.T) {
	for _, conn := range []string{"Upgrade", "upgrade", "UPGRADE", "keep-alive, Upgrade", "Upgrade, keep-alive", "keep-alive,upgrade"} {
		for _, up := range []string{"websocket", "WebSocket", "WEBSOCKET", "foo, websocket"} {
			raw := "GET / HTTP/1.1\r\nHost: x\r\nConnection: " + conn + "\r\nUpgrade: " + up +
				"\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + testkit.Key + "\r\n\r\n"
			r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
			if err != nil {
				t.Fatal(err)
			}
			if !wantsUpgrade(r.Header) {
				t.Errorf("Upgrade %q: no upgrade intent", up)
			}
			if e := checkUpgrade(r); e != nil {
				t.Errorf("Connection %q Upgrade %q: got %d, want valid", conn, up, e.status)
			}
		}
	}
	if got, want := wswire.AcceptKey(testkit.Key), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="; got != want {
		t.Fatalf("acceptKey: got %q, want %q (RFC 6455 §1.3)", got, want)
	}
}
