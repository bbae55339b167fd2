package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/testkit"
)

// lookalikes are client-sent spellings of headers edge manages: every one
// folds to a managed name (ASCII case, '_' for '-').
var lookalikes = []string{
	"X_Forwarded_For: 6.6.6.6",
	"X_Real_IP: 6.6.6.6",
	"X_Forwarded_Proto: gopher",
	"X-Forwarded_Host: evil.example",
	"x_forwarded_port: 1",
	"X_Client_Cert: admin",
	"x-client_cert: admin",
	"Proxy_Authorization: Basic Zm9vOmJhcg==",
}

// rawRequest sends one request with extra header lines on a raw socket to
// the edge and returns the decoded JSON body of the backend's answer.
func rawHeaders(t *testing.T, e *edge, upgrade bool) map[string][]string {
	t.Helper()
	c := e.rawConn(t)
	var req string
	if upgrade {
		req = testkit.RawUpgrade("/", "chat.example.com", lookalikes...)
	} else {
		req = "GET /headers HTTP/1.1\r\nHost: chat.example.com\r\n" + strings.Join(lookalikes, "\r\n") + "\r\n\r\n"
	}
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("response: %v", err)
	}
	var body []byte
	if upgrade {
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("status %d, want 101", resp.StatusCode)
		}
		if _, err := c.Write(testkit.MaskedFrame(1, []byte("headers"))); err != nil {
			t.Fatal(err)
		}
		_, body = testkit.ReadFrame(t, br)
	} else {
		if body, err = io.ReadAll(resp.Body); err != nil {
			t.Fatal(err)
		}
	}
	var h map[string][]string
	if err := json.Unmarshal(body, &h); err != nil {
		t.Fatalf("headers JSON %q: %v", body, err)
	}
	return h
}

// TestManagedHeaderLookalikesDropped: a client cannot reach a CGI-style
// backend through X_Forwarded_For, X_Real_IP or X_Client_Cert, which such
// backends read as HTTP_X_FORWARDED_FOR and friends, on either leg.
func TestManagedHeaderLookalikesDropped(t *testing.T) {
	forEachPath(t, func(t *testing.T, sp splicePath) {
		e, _ := oneBackendEdge(t, sp, false, func(_ *Pool, cfg *edgeConfig) {
			cfg.lo.ClientCertHeader = "X-Client-Cert"
		})
		for _, upgrade := range []bool{true, false} {
			h := rawHeaders(t, e, upgrade)
			for k, v := range h {
				if k != "RemoteAddr" && strings.ContainsRune(k, '_') {
					t.Errorf("upgrade=%v: backend got %s: %q", upgrade, k, v)
				}
			}
			if got := strings.Join(h["X-Forwarded-For"], ","); got != "127.0.0.1" {
				t.Errorf("upgrade=%v: X-Forwarded-For %q, want 127.0.0.1", upgrade, got)
			}
			if got := h["X-Client-Cert"]; got != nil {
				t.Errorf("upgrade=%v: X-Client-Cert %q without a client certificate", upgrade, got)
			}
		}
	})
}

// wsgiBackend is Python's stdlib WSGI server answering every request with
// the JSON of its HTTP_* environment: what a CGI-style application sees.
const wsgiBackend = `
import json, sys
from wsgiref.simple_server import make_server, WSGIRequestHandler
class Quiet(WSGIRequestHandler):
    def log_message(self, *a): pass
def app(environ, start):
    body = json.dumps({k: v for k, v in environ.items() if k.startswith("HTTP_")}).encode()
    start("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
srv = make_server("127.0.0.1", 0, app, handler_class=Quiet)
print(srv.server_port, flush=True)
srv.serve_forever()
`

// TestWSGIBackendSeesEdgeForwardedFor runs the plain leg against
// wsgiref: HTTP_X_FORWARDED_FOR, HTTP_X_REAL_IP and HTTP_X_CLIENT_CERT are
// edge's values (or absent), never the client's underscore spellings.
func TestWSGIBackendSeesEdgeForwardedFor(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	cmd := exec.Command(py, "-c", wsgiBackend)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	port, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("wsgiref port: %v", err)
	}
	addr := "127.0.0.1:" + strings.TrimSpace(port)

	p := newPool(t, "wsgi", balance.LeastConn, map[string]string{"py": addr})
	e := startEdge(t, edgeConfig{
		opts: Options{Routes: []Route{{Default: true, Pool: p}}},
		lo:   ListenerOptions{ClientCertHeader: "X-Client-Cert"},
	})
	c := e.rawConn(t)
	req := "GET /env HTTP/1.1\r\nHost: chat.example.com\r\n" + strings.Join(lookalikes, "\r\n") + "\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("response: %v", err)
	}
	var env map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		t.Fatalf("status %d: %v", resp.StatusCode, err)
	}
	want := map[string]string{
		"HTTP_X_FORWARDED_FOR":     "127.0.0.1",
		"HTTP_X_REAL_IP":           "127.0.0.1",
		"HTTP_X_FORWARDED_PROTO":   "http",
		"HTTP_X_FORWARDED_HOST":    "chat.example.com",
		"HTTP_X_CLIENT_CERT":       "",
		"HTTP_PROXY_AUTHORIZATION": "",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
}

// TestMappedTrustedProxyMatches: a trusted entry written as an
// IPv4-mapped IPv6 prefix trusts the IPv4 peer it names.
func TestMappedTrustedProxyMatches(t *testing.T) {
	e, _ := oneBackendEdge(t, spliceReadiness, false, func(_ *Pool, cfg *edgeConfig) {
		cfg.lo.TrustedProxies = mustPrefixes("::ffff:127.0.0.0/104")
	})
	req, _ := http.NewRequest(http.MethodGet, e.httpURL("/headers"), nil)
	req.Header.Set("X-Forwarded-For", "198.51.100.7")
	resp, err := e.httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h map[string][]string
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(h["X-Real-Ip"], ","); got != "198.51.100.7" {
		t.Fatalf("X-Real-Ip %q, want 198.51.100.7 (peer 127.0.0.1 trusted through ::ffff:127.0.0.0/104)", got)
	}
	if got := strings.Join(h["X-Forwarded-For"], ","); got != "198.51.100.7, 127.0.0.1" {
		t.Fatalf("X-Forwarded-For %q, want the chain extended", got)
	}
}

func TestUnmapPrefix(t *testing.T) {
	for in, want := range map[string]string{
		"::ffff:10.0.0.0/104": "10.0.0.0/8",
		"::ffff:10.1.2.3/128": "10.1.2.3/32",
		"10.0.0.0/8":          "10.0.0.0/8",
		"fd00::/8":            "fd00::/8",
		"::ffff:0.0.0.0/80":   "::ffff:0.0.0.0/80",
	} {
		if got := unmapPrefix(mustPrefixes(in)[0]).String(); got != want {
			t.Errorf("unmapPrefix(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestClientIdentity(t *testing.T) {
	u, _ := url.Parse("spiffe://example.org/ns/a")
	for _, tc := range []struct {
		name string
		cert *x509.Certificate
		want string
	}{
		{"common name", &x509.Certificate{Subject: pkix.Name{CommonName: "svc-a"}, DNSNames: []string{"a.example"}}, "svc-a"},
		{"first DNS SAN", &x509.Certificate{DNSNames: []string{"a.example", "b.example"}}, "a.example"},
		{"email SAN", &x509.Certificate{EmailAddresses: []string{"ops@example.org"}}, "ops@example.org"},
		{"URI SAN", &x509.Certificate{URIs: []*url.URL{u}}, "spiffe://example.org/ns/a"},
		{"IP SAN", &x509.Certificate{IPAddresses: []net.IP{net.IPv4(192, 0, 2, 1)}}, "192.0.2.1"},
		{"CR LF escaped", &x509.Certificate{Subject: pkix.Name{CommonName: "evil\r\nX-Admin: 1"}}, `evil\0D\0AX-Admin: 1`},
		{"RFC 4514 specials", &x509.Certificate{Subject: pkix.Name{CommonName: `a,O=b+c;"d"<e>\f`}}, `a\,O\=b\+c\;\"d\"\<e\>\\f`},
		{"leading hash and spaces", &x509.Certificate{Subject: pkix.Name{CommonName: "#a b "}}, `\#a b\ `},
		{"non-ASCII as UTF-8 hex pairs", &x509.Certificate{Subject: pkix.Name{CommonName: "é"}}, `\C3\A9`},
		{"nothing", &x509.Certificate{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := clientIdentity(tc.cert); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// mtlsEdge is an edge whose listener requires a client certificate signed
// by the returned CA, the way edgetls configures mutual TLS.
func mtlsEdge(t *testing.T, lo ListenerOptions, strict bool) (addr string, roots *x509.CertPool, issue func(cn string) tls.Certificate) {
	t.Helper()
	b := startBackend(t, "b1")
	p := newPool(t, "app", balance.LeastConn, map[string]string{"b1": b.Addr()})
	s, err := New(Options{Routes: []Route{{Default: true, Pool: p}}})
	if err != nil {
		t.Fatal(err)
	}
	ca := testkit.NewCA(t, "test CA")
	cas := ca.Pool()
	issue = func(cn string) tls.Certificate {
		return ca.Issue(t, testkit.CertOptions{CN: cn, Hosts: []string{"edge.test", "other.test"},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}).TLS()
	}
	lo.TLS = true
	lo.StrictSNIHost = strict
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tl := tls.NewListener(WrapListener(ln), &tls.Config{
		Certificates: []tls.Certificate{issue("edge.test")}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: cas,
		NextProtos: []string{"http/1.1"},
	})
	hs := &http.Server{Handler: s.Handler(lo), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); hs.Serve(tl) }()
	t.Cleanup(func() { hs.Close(); s.Close(); <-done })
	return ln.Addr().String(), cas, issue
}

// TestClientCertHeaderEscapedOnBothLegs: a client certificate whose CN
// carries CR/LF and commas reaches the backend as one escaped value, on
// the upgrade and on the plain leg, and injects no header.
func TestClientCertHeaderEscapedOnBothLegs(t *testing.T) {
	addr, roots, issue := mtlsEdge(t, ListenerOptions{ClientCertHeader: "X-Client-Cert"}, false)
	cn := "alice\r\nX-Admin: 1, O=root"
	want := `alice\0D\0AX-Admin: 1\, O\=root`
	cfg := &tls.Config{RootCAs: roots, ServerName: "edge.test", Certificates: []tls.Certificate{issue(cn)}}

	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}
	resp, err := hc.Get("https://" + addr + "/headers")
	if err != nil {
		t.Fatal(err)
	}
	var h map[string][]string
	err = json.NewDecoder(resp.Body).Decode(&h)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(h["X-Client-Cert"], "|"); got != want || h["X-Admin"] != nil {
		t.Errorf("plain leg: X-Client-Cert %q (X-Admin %q), want %q", got, h["X-Admin"], want)
	}

	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, testkit.RawUpgrade("/", "edge.test")); err != nil {
		t.Fatal(err)
	}
	br := testkit.Read101(t, c)
	if _, err := c.Write(testkit.MaskedFrame(1, []byte("headers"))); err != nil {
		t.Fatal(err)
	}
	_, body := testkit.ReadFrame(t, br)
	h = nil
	if err := json.Unmarshal(body, &h); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(h["X-Client-Cert"], "|"); got != want || h["X-Admin"] != nil {
		t.Errorf("upgrade leg: X-Client-Cert %q (X-Admin %q), want %q", got, h["X-Admin"], want)
	}
}

// TestStrictSNIHost: with StrictSNIHost a TLS request whose Host is not
// the SNI name is answered 421 (RFC 9110 §15.5.20); without it, as before,
// it is served.
func TestStrictSNIHost(t *testing.T) {
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprint("strict=", strict), func(t *testing.T) {
			addr, roots, issue := mtlsEdge(t, ListenerOptions{}, strict)
			cfg := &tls.Config{RootCAs: roots, ServerName: "edge.test", Certificates: []tls.Certificate{issue("c")}}
			hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}
			status := func(host string) int {
				req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/whoami", nil)
				req.Host = host
				resp, err := hc.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			for _, host := range []string{"edge.test", "EDGE.test.", "edge.test:443"} {
				if got := status(host); got != http.StatusOK {
					t.Errorf("Host %q = SNI: status %d, want 200", host, got)
				}
			}
			want := http.StatusOK
			if strict {
				want = http.StatusMisdirectedRequest
			}
			if got := status("other.test"); got != want {
				t.Errorf("Host other.test, SNI edge.test: status %d, want %d", got, want)
			}
		})
	}
}

// TestPerClientRefusalSparesPoolTokens: one client over its own rate is
// refused 429 without spending the pool-wide admission tokens, so another
// client is still admitted.
func TestPerClientRefusalSparesPoolTokens(t *testing.T) {
	e, _ := oneBackendEdge(t, spliceReadiness, false, func(p *Pool, cfg *edgeConfig) {
		p.Admission = balance.NewBucket(0.001, 3, nil)
		p.Limiter = balance.NewLimiter(balance.LimiterOptions{Rate: 0.001, Burst: 1})
		cfg.lo.TrustedProxies = mustPrefixes("127.0.0.1/32")
	})
	get := func(client string) int {
		req, _ := http.NewRequest(http.MethodGet, e.httpURL("/whoami"), nil)
		req.Header.Set("X-Forwarded-For", client)
		resp, err := e.httpClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get("198.51.100.1"); got != http.StatusOK {
		t.Fatalf("first request of client A: %d, want 200", got)
	}
	for i := 0; i < 5; i++ {
		if got := get("198.51.100.1"); got != http.StatusTooManyRequests {
			t.Fatalf("client A over its rate, request %d: %d, want 429", i+2, got)
		}
	}
	if got := get("198.51.100.2"); got != http.StatusOK {
		t.Fatalf("client B after client A's burst: %d, want 200 (the pool's tokens are untouched)", got)
	}
}
