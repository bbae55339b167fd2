package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

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
