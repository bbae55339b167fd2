package proxy

import (
	"net/http"
	"strings"
	"testing"
)

// TestDetachKeepsTheRequestFields checks that what a held connection's
// exchange keeps of its request reads the same after detach, the request
// id included, whether edge made it or a trusted proxy sent it.
func TestDetachKeepsTheRequestFields(t *testing.T) {
	made := newRequestID()
	for _, id := range []string{
		made,
		"0123456789abcdef0123456789abcdef",
		"0123456789ABCDEF0123456789ABCDEF", // upper case: kept as it came
		"0123456789abcdef0123456789abcde",  // 31 digits
		"0123456789abcdef0123456789abcdeg",
		"f81d4fae-7dec-11d0-a765-00a0c91e6bf6",
		"",
	} {
		line := "GET /chat?room=1 HTTP/1.1"
		x := &exchange{method: line[:3], host: strings.Clone("example.com:443"), path: line[4:9], reqID: id}
		x.detach()
		if x.method != http.MethodGet || x.host != "example.com:443" || x.path != "/chat" {
			t.Errorf("detached: method %q host %q path %q", x.method, x.host, x.path)
		}
		if got := x.requestID(); got != id {
			t.Errorf("request id %q, after detach %q", id, got)
		}
		if x.ridPacked != (id == made || id == "0123456789abcdef0123456789abcdef") {
			t.Errorf("request id %q: packed %v", id, x.ridPacked)
		}
		x.detach() // a second one changes nothing
		if got := x.requestID(); got != id || x.host != "example.com:443" || x.path != "/chat" {
			t.Errorf("detached twice: id %q host %q path %q", got, x.host, x.path)
		}
	}
}
