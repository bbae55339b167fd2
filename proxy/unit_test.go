package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/wswire"
)

func TestRouteMatch(t *testing.T) {
	bp, _ := balance.NewPool(balance.PoolOptions{})
	pools := map[string]*Pool{}
	p := func(n string) *Pool {
		if pools[n] == nil {
			pools[n] = &Pool{Name: n, Balancer: bp}
		}
		return pools[n]
	}
	tbl, err := compileRoutes([]Route{
		{Hosts: []string{"chat.example.com"}, Pool: p("chat")},
		{Hosts: []string{"chat.example.com"}, PathPrefix: "/admin", Pool: p("admin")},
		{Hosts: []string{"*.example.com"}, Pool: p("wild")},
		{Hosts: []string{"*.eu.example.com"}, Pool: p("eu")},
		{PathPrefix: "/any", Pool: p("any")},
		{Default: true, Pool: p("default")},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ host, path, want string }{
		{"chat.example.com", "/", "chat"},
		{"Chat.Example.Com:443", "/x", "chat"},
		{"chat.example.com.", "/x", "chat"},
		{"chat.example.com", "/admin", "admin"},
		{"chat.example.com", "/admin/users", "admin"},
		{"chat.example.com", "/administrator", "chat"},
		{"chat.example.com", "/x/../admin", "admin"},
		{"a.example.com", "/", "wild"},
		{"a.b.example.com", "/", "wild"},
		{"x.eu.example.com", "/", "eu"},
		{"example.com", "/", "default"},
		{"other.org", "/any/thing", "any"},
		{"other.org", "/", "default"},
		{"[::1]:8443", "/", "default"},
	} {
		r := tbl.match(tc.host, tc.path)
		if r == nil || r.Pool.Name != tc.want {
			got := "<nil>"
			if r != nil {
				got = r.Pool.Name
			}
			t.Errorf("match(%q, %q): got %s, want %s", tc.host, tc.path, got, tc.want)
		}
	}

	noDefault, _ := compileRoutes([]Route{{Hosts: []string{"a.example.com"}, Pool: p("a")}})
	if r := noDefault.match("b.example.com", "/"); r != nil {
		t.Errorf("unknown host without default: got %s, want nil (421)", r.Pool.Name)
	}

	for _, bad := range [][]Route{
		{{Default: true, Pool: p("a")}, {Default: true, Pool: p("b")}},
		{{Hosts: []string{"a.*.com"}, Pool: p("a")}},
		{{Hosts: []string{"*"}, Pool: p("a")}},
		{{Hosts: []string{"a.com"}, Pool: nil}},
		{{Hosts: []string{"a.com"}, PathPrefix: "x", Pool: p("a")}},
		{{Hosts: []string{"a.com"}, Pool: p("a")}, {Hosts: []string{"A.com"}, Pool: p("b")}},
	} {
		if _, err := compileRoutes(bad); err == nil {
			t.Errorf("compileRoutes(%+v): got nil error", bad)
		}
	}
}

// TestRouteTiersFileFirst: a declared route never takes a host the file
// names (exactly or by a wildcard, whatever the path or the spelling), a
// path the file routes for any host, nor more than the hosts it declares
// from the default route; a declared route that duplicates or breaks never
// makes the table fail.
func TestRouteTiersFileFirst(t *testing.T) {
	bp, _ := balance.NewPool(balance.PoolOptions{})
	p := func(n string) *Pool { return &Pool{Name: n, Balancer: bp} }
	tbl, err := compileRoutes([]Route{
		{Hosts: []string{"chat.example.com"}, PathPrefix: "/ws", Pool: p("file-chat")},
		{Hosts: []string{"*.corp.example.com"}, PathPrefix: "/", Pool: p("file-corp")},
		{PathPrefix: "/metrics", Pool: p("file-metrics")},
		{Default: true, Pool: p("default")},
		{Hosts: []string{"chat.example.com"}, PathPrefix: "/api", Declared: true, Pool: p("decl-chat-api")},
		{Hosts: []string{"x.corp.example.com"}, PathPrefix: "/", Declared: true, Pool: p("decl-corp")},
		{Hosts: []string{"*.example.com"}, PathPrefix: "/", Declared: true, Pool: p("decl-wild")},
		{Hosts: []string{"new.example.com"}, PathPrefix: "/", Declared: true, Pool: p("decl-new")},
		{Hosts: []string{"New.Example.com."}, PathPrefix: "/", Declared: true, Pool: p("decl-new-again")},
		{Hosts: []string{"a.*.example.com"}, Declared: true, Pool: p("decl-bad")},
		{Default: true, Declared: true, Pool: p("decl-default")},
	})
	if err != nil {
		t.Fatalf("declared routes made the table fail: %v", err)
	}
	for _, tc := range []struct{ host, path, want string }{
		{"chat.example.com", "/ws", "file-chat"},
		{"chat.example.com", "/api", "default"}, // the file names the host: declared routes never see it
		{"CHAT.example.com.:443", "/api/x", "default"},
		{"x.corp.example.com", "/", "file-corp"},
		{"new.example.com", "/", "decl-new"},
		{"new.example.com", "/metrics", "file-metrics"},
		{"other.example.com", "/", "decl-wild"},
		{"other.org", "/", "default"},
	} {
		r := tbl.match(tc.host, tc.path)
		if r == nil || r.Pool.Name != tc.want {
			got := "<nil>"
			if r != nil {
				got = r.Pool.Name
			}
			t.Errorf("match(%q, %q): got %s, want %s", tc.host, tc.path, got, tc.want)
		}
	}
	if len(tbl.dropped) != 3 {
		t.Errorf("dropped: got %q, want the duplicate, the bad pattern and the declared default", tbl.dropped)
	}
}

func TestDecideClient(t *testing.T) {
	trusted := mustPrefixes("10.0.0.0/8", "fd00::/8")
	for _, tc := range []struct {
		name   string
		remote string
		xff    []string
		want   string
	}{
		{"untrusted peer ignores spoofed XFF (gorouter#179)", "203.0.113.9:1234", []string{"1.2.3.4"}, "203.0.113.9"},
		{"trusted peer, one hop", "10.0.0.1:1234", []string{"198.51.100.7"}, "198.51.100.7"},
		{"trusted chain, right-most untrusted", "10.0.0.1:1", []string{"6.6.6.6, 198.51.100.7, 10.0.0.2"}, "198.51.100.7"},
		{"several header lines", "10.0.0.1:1", []string{"6.6.6.6", "198.51.100.7,10.1.1.1"}, "198.51.100.7"},
		{"all trusted", "10.0.0.1:1", []string{"10.9.9.9, 10.0.0.2"}, "10.9.9.9"},
		{"garbage stops at last trusted", "10.0.0.1:1", []string{"garbage, 10.0.0.2"}, "10.0.0.2"},
		{"hop with port", "10.0.0.1:1", []string{"198.51.100.7:5555"}, "198.51.100.7"},
		{"ipv6 hop", "[fd00::1]:1", []string{"[2001:db8::1]:80"}, "2001:db8::1"},
		{"trusted peer, no XFF", "10.0.0.1:1", nil, "10.0.0.1"},
		{"v4-mapped peer", "[::ffff:203.0.113.9]:1", nil, "203.0.113.9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decideClient(tc.remote, tc.xff, trusted).client.String()
			if got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestBackendHeader(t *testing.T) {
	trusted := mustPrefixes("10.0.0.0/8")
	for _, tc := range []struct {
		name   string
		remote string
		tls    bool
		lo     ListenerOptions
		in     http.Header
		want   map[string]string // "" means absent
	}{
		{
			name: "untrusted peer: claims replaced", remote: "203.0.113.9:1",
			in:   http.Header{"X-Forwarded-For": {"1.2.3.4"}, "X-Forwarded-Proto": {"https"}, "X-Real-Ip": {"1.2.3.4"}, "Forwarded": {"for=1.2.3.4"}},
			want: map[string]string{"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "http", "X-Real-Ip": "203.0.113.9", "Forwarded": "", "X-Forwarded-Host": "chat.example.com", "X-Forwarded-Port": "80"},
		},
		{
			name: "trusted peer: chain extended, proto kept", remote: "10.0.0.1:1", lo: ListenerOptions{TrustedProxies: trusted},
			in:   http.Header{"X-Forwarded-For": {"198.51.100.7"}, "X-Forwarded-Proto": {"https"}},
			want: map[string]string{"X-Forwarded-For": "198.51.100.7, 10.0.0.1", "X-Forwarded-Proto": "https", "X-Real-Ip": "198.51.100.7"},
		},
		{
			name: "forwarded header, ipv6, tls", remote: "[2001:db8::1]:1", tls: true, lo: ListenerOptions{Forwarded: true},
			in:   http.Header{"Forwarded": {"for=6.6.6.6"}},
			want: map[string]string{"Forwarded": `for="[2001:db8::1]";proto=https;host=chat.example.com`, "X-Forwarded-Proto": "https", "X-Forwarded-Port": "443"},
		},
		{
			name: "forwarded header appended for trusted peer", remote: "10.0.0.1:1", lo: ListenerOptions{Forwarded: true, TrustedProxies: trusted},
			in:   http.Header{"Forwarded": {"for=198.51.100.7"}},
			want: map[string]string{"Forwarded": "for=198.51.100.7, for=10.0.0.1;proto=http;host=chat.example.com"},
		},
		{
			name: "hop-by-hop removed, named ones too", remote: "203.0.113.9:1",
			in:   http.Header{"Connection": {"keep-alive, X-Secret"}, "X-Secret": {"1"}, "Keep-Alive": {"5"}, "Te": {"trailers"}, "Sec-Websocket-Protocol": {"chat"}},
			want: map[string]string{"Connection": "", "X-Secret": "", "Keep-Alive": "", "Te": "", "Sec-Websocket-Protocol": "chat"},
		},
		{
			name: "client cert header spoof removed", remote: "203.0.113.9:1", lo: ListenerOptions{ClientCertHeader: "X-Client-Cert"},
			in:   http.Header{"X-Client-Cert": {"admin"}},
			want: map[string]string{"X-Client-Cert": ""},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "http://chat.example.com/ws", nil)
			r.RemoteAddr = tc.remote
			r.Header = tc.in
			if tc.tls {
				r.TLS = &tls.ConnectionState{}
			}
			id := decideClient(r.RemoteAddr, r.Header["X-Forwarded-For"], tc.lo.TrustedProxies)
			h := backendHeader(r, &tc.lo, id)
			for k, want := range tc.want {
				if got := strings.Join(h[k], ", "); got != want {
					t.Errorf("%s: got %q, want %q", k, got, want)
				}
			}
		})
	}

	// A verified client certificate is named by its CN.
	r := httptest.NewRequest(http.MethodGet, "https://chat.example.com/", nil)
	r.Header.Set("X-Client-Cert", "spoof")
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: "alice"}}
	r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}, VerifiedChains: [][]*x509.Certificate{{cert}}}
	lo := ListenerOptions{ClientCertHeader: "X-Client-Cert"}
	h := backendHeader(r, &lo, decideClient(r.RemoteAddr, nil, nil))
	if got, want := h.Get("X-Client-Cert"), "alice"; got != want {
		t.Fatalf("client cert header: got %q, want %q", got, want)
	}
}

func TestCheckUpgradeTokens(t *testing.T) {
	for _, conn := range []string{"Upgrade", "upgrade", "UPGRADE", "keep-alive, Upgrade", "Upgrade, keep-alive", "keep-alive,upgrade"} {
		for _, up := range []string{"websocket", "WebSocket", "WEBSOCKET", "foo, websocket"} {
			raw := "GET / HTTP/1.1\r\nHost: x\r\nConnection: " + conn + "\r\nUpgrade: " + up +
				"\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + testKey + "\r\n\r\n"
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
	if got, want := wswire.AcceptKey(testKey), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="; got != want {
		t.Fatalf("acceptKey: got %q, want %q (RFC 6455 §1.3)", got, want)
	}
}

func TestPeerAddr(t *testing.T) {
	for in, want := range map[string]netip.Addr{
		"1.2.3.4:5":   netip.MustParseAddr("1.2.3.4"),
		"[::1]:5":     netip.MustParseAddr("::1"),
		"@":           {},
		"1.2.3.4":     netip.MustParseAddr("1.2.3.4"),
		"garbage:123": {},
	} {
		if got := peerAddr(in); got != want {
			t.Errorf("peerAddr(%q): got %v, want %v", in, got, want)
		}
	}
}
