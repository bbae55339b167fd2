package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/testkit"
	"github.com/pires/go-proxyproto"
)

func TestProxyProtocol(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		for _, tc := range []struct {
			name    string
			trusted []string
			header  bool
			wantOK  bool
			wantIP  string
		}{
			{"trusted with header", []string{"127.0.0.0/8"}, true, true, "192.0.2.10"},
			{"trusted without header", []string{"127.0.0.0/8"}, false, true, "127.0.0.1"},
			{"untrusted with header", []string{"10.0.0.0/8"}, true, false, ""},
			{"untrusted without header", []string{"10.0.0.0/8"}, false, true, "127.0.0.1"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e, _ := oneBackendEdge(t, sp, false, func(_ *Pool, cfg *edgeConfig) {
					cfg.wrap = func(l net.Listener) net.Listener {
						return ListenProxyProtocol(l, mustPrefixes(tc.trusted...), time.Second)
					}
				})
				c := e.rawConn(t)
				if tc.header {
					h := proxyproto.HeaderProxyFromAddrs(2, &net.TCPAddr{IP: net.ParseIP("192.0.2.10"), Port: 4000}, &net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 443})
					if _, err := h.WriteTo(c); err != nil {
						t.Fatal(err)
					}
				}
				io.WriteString(c, "GET /headers HTTP/1.1\r\nHost: x\r\n\r\n")
				c.SetReadDeadline(time.Now().Add(30 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if !tc.wantOK {
					if err == nil {
						t.Fatalf("got %d, want the connection closed", resp.StatusCode)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				if !strings.Contains(string(body), `"X-Real-Ip":["`+tc.wantIP+`"]`) {
					t.Fatalf("backend saw %s, want X-Real-Ip %s", body, tc.wantIP)
				}
			})
		}
	})
}

// TestProxyProtocolSlowHeader: a trusted peer trickling a PROXY header is
// cut off at the header timeout.
func TestProxyProtocolSlowHeader(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		e, _ := oneBackendEdge(t, sp, false, func(_ *Pool, cfg *edgeConfig) {
			cfg.wrap = func(l net.Listener) net.Listener {
				return ListenProxyProtocol(l, mustPrefixes("127.0.0.0/8"), 200*time.Millisecond)
			}
			cfg.readHeaderTimeout = 300 * time.Millisecond
		})
		c := e.rawConn(t)
		io.WriteString(c, "PROXY TCP4 192.0.2.10 ")
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.ReadAll(c); err != nil && !testkit.IsClosed(err) {
			t.Fatalf("got %v, want the connection closed", err)
		}
	})
}
