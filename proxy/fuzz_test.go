package proxy

import (
	"bufio"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/testbackend"
	"github.com/edgelb/edge/internal/testkit"
)

// FuzzUpgradeRequest: validation never panics, and whatever it accepts
// really is a GET with the upgrade tokens and a 16-byte key.
func FuzzUpgradeRequest(f *testing.F) {
	// A canonical RFC 6455 handshake.
	f.Add("GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + testkit.Key + "\r\n\r\n")
	// Tokens in another case and order, split over lines.
	f.Add("GET /a HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\nConnection: UPGRADE\r\nUpgrade: h2c, WebSocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + testkit.Key + "\r\n\r\n")
	// Two keys, a wrong version, a POST.
	f.Add("GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: a\r\nSec-WebSocket-Key: b\r\n\r\n")
	f.Add("POST / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 8\r\n\r\n")
	f.Fuzz(func(t *testing.T, raw string) {
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			return
		}
		intent := wantsUpgrade(r.Header)
		e := checkUpgrade(r)
		if e != nil {
			if e.status < 400 || e.status > 499 {
				t.Fatalf("status %d is not a client error", e.status)
			}
			return
		}
		if !intent && r.Header.Get("Upgrade") != "" && strings.Contains(strings.ToLower(r.Header.Get("Upgrade")), "websocket") {
			t.Fatalf("valid upgrade without intent: %q", raw)
		}
		if r.Method != http.MethodGet || !validKey(r.Header.Get("Sec-WebSocket-Key")) || r.Header.Get("Sec-WebSocket-Version") != "13" {
			t.Fatalf("accepted invalid handshake %q", raw)
		}
	})
}

// FuzzForwarded: client identity and forwarded headers never panic; the
// decided client is the peer unless the peer is trusted, and an untrusted
// peer's X-Forwarded-For is exactly the peer.
func FuzzForwarded(f *testing.F) {
	// Untrusted peer with a spoofed chain (gorouter#179).
	f.Add("203.0.113.9:1", "1.2.3.4, 5.6.7.8", "for=1.2.3.4")
	// Trusted peer, IPv6 hops with ports and brackets.
	f.Add("10.0.0.1:1", "[2001:db8::1]:80, 10.0.0.2", `for="[2001:db8::1]"`)
	// Garbage and empty hops.
	f.Add("10.0.0.1:1", ",,garbage,,", "")
	f.Fuzz(func(t *testing.T, remote, xff, fwd string) {
		trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
		id := decideClient(remote, []string{xff}, trusted)
		if !id.trusted && id.client != id.peer {
			t.Fatalf("untrusted peer %v: client %v", id.peer, id.client)
		}
		r, err := http.NewRequest(http.MethodGet, "http://example.com/", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.RemoteAddr = remote
		r.Header.Set("X-Forwarded-For", xff)
		r.Header.Set("Forwarded", fwd)
		lo := ListenerOptions{TrustedProxies: trusted, Forwarded: true}
		h := backendHeader(r, &lo, id)
		if !id.trusted {
			want := ""
			if id.peer.IsValid() {
				want = id.peer.String()
			}
			if got := h.Get("X-Forwarded-For"); got != want {
				t.Fatalf("untrusted X-Forwarded-For: got %q, want %q", got, want)
			}
		}
	})
}

// pipeListener hands out one server end of a net.Pipe whose peer looks
// like a trusted TCP address.
type pipeListener struct{ c chan net.Conn }

type addrConn struct{ net.Conn }

func (addrConn) RemoteAddr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

func (l *pipeListener) Accept() (net.Conn, error) {
	c, ok := <-l.c
	if !ok {
		return nil, net.ErrClosed
	}
	return c, nil
}
func (l *pipeListener) Close() error   { return nil }
func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{} }

// FuzzProxyHeader feeds arbitrary bytes through the listener wrapper: it
// never panics and never blocks past its header timeout.
func FuzzProxyHeader(f *testing.F) {
	// v1 TCP4 header followed by a request line.
	f.Add([]byte("PROXY TCP4 192.0.2.1 192.0.2.2 1000 443\r\nGET / HTTP/1.1\r\n"))
	// v1 UNKNOWN and a truncated v1.
	f.Add([]byte("PROXY UNKNOWN\r\n"))
	f.Add([]byte("PROXY TCP6 ::1"))
	// v2 signature with a LOCAL command and no addresses.
	f.Add([]byte("\r\n\r\n\x00\r\nQUIT\n\x20\x00\x00\x00"))
	// No header at all.
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		pl := &pipeListener{c: make(chan net.Conn, 1)}
		server, client := net.Pipe()
		pl.c <- addrConn{server}
		close(pl.c)
		l := ListenProxyProtocol(pl, []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, 50*time.Millisecond)
		go func() {
			client.SetWriteDeadline(time.Now().Add(time.Second))
			client.Write(data)
			client.Close()
		}()
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(time.Second))
		_ = c.RemoteAddr()
		io.Copy(io.Discard, io.LimitReader(c, int64(len(data))+1))
	})
}

// FuzzLookalikeHeaders: whatever name a client sends, no header reaching
// the backend folds to a managed one unless it is edge's own canonical
// spelling, and the client-certificate header is never the client's.
func FuzzLookalikeHeaders(f *testing.F) {
	// CGI-style spellings of managed headers.
	f.Add("X_Forwarded_For", "6.6.6.6")
	f.Add("x_client-CERT", "admin")
	f.Add("X_Real_IP", "1.2.3.4")
	// X-Request-Id is edge's to write (kept from a trusted proxy's valid value):
	// its lookalikes are dropped.
	f.Add("X_Request_Id", "abc")
	// A header edge does not manage passes.
	f.Add("X_Trace_Id", "abc")
	f.Fuzz(func(t *testing.T, name, value string) {
		r, err := http.NewRequest(http.MethodGet, "http://example.com/", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.RemoteAddr = "203.0.113.9:1"
		r.Header[name] = []string{value}
		lo := ListenerOptions{ClientCertHeader: "X-Client-Cert"}
		h := backendHeader(r, &lo, decideClient(r.RemoteAddr, nil, nil))
		for k := range h {
			if foldsTo(k, "X-Client-Cert") {
				t.Fatalf("client-sent %q reached the backend as %q", name, k)
			}
			for _, m := range managedHeaders {
				if foldsTo(k, m) && k != m {
					t.Fatalf("lookalike %q of %s reached the backend", k, m)
				}
			}
		}
	})
}

// FuzzClientIdentity: the escaped identity is printable ASCII (one legal
// header value), has no unescaped RFC 4514 special, and unescapes back to
// the certificate's name.
func FuzzClientIdentity(f *testing.F) {
	f.Add("alice")
	f.Add("evil\r\nX-Admin: 1")
	f.Add(`a,O=b+c;"d"<e>\f`)
	f.Add(" #lead and trail ")
	f.Add("é\x00\x7f")
	f.Fuzz(func(t *testing.T, cn string) {
		got := escapeRFC4514(cn)
		var out []byte
		for i := 0; i < len(got); i++ {
			c := got[i]
			if c < 0x20 || c >= 0x7f {
				t.Fatalf("escape(%q) = %q holds byte %#x", cn, got, c)
			}
			if strings.IndexByte(`"+,;<>=`, c) >= 0 {
				t.Fatalf("escape(%q) = %q holds an unescaped %q", cn, got, c)
			}
			if c != '\\' {
				out = append(out, c)
				continue
			}
			if i+1 >= len(got) {
				t.Fatalf("escape(%q) = %q ends in a lone backslash", cn, got)
			}
			if b, err := hex.DecodeString(got[i+1 : min(i+3, len(got))]); err == nil && len(b) == 1 {
				out = append(out, b[0])
				i += 2
				continue
			}
			out = append(out, got[i+1])
			i++
		}
		if string(out) != cn {
			t.Fatalf("escape(%q) = %q unescapes to %q", cn, got, out)
		}
	})
}

// FuzzPlainRequest: a whole request through the handler to a real backend.
// Whatever validation accepts has a valid Host, no fragment, no dot
// segment and is no CONNECT; what it refuses is a 400 that reaches no
// backend; and the path a backend receives is the path that was routed.
func FuzzPlainRequest(f *testing.F) {
	// Ordinary, escaped, absolute-form and IPv6 requests.
	f.Add("GET /a/b?x=1 HTTP/1.1\r\nHost: chat.example.com\r\n\r\n")
	f.Add("GET /a%2Fb/%7Ec HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n")
	f.Add("GET http://chat.example.com//p HTTP/1.1\r\nHost: other\r\n\r\n")
	f.Add("POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
	// Refused: fragment, dot segments, CONNECT, bad Host, empty Host.
	f.Add("GET /a#f HTTP/1.1\r\nHost: x\r\n\r\n")
	f.Add("GET /a/%2e%2e/b HTTP/1.1\r\nHost: x\r\n\r\n")
	f.Add("CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n")
	f.Add("GET / HTTP/1.1\r\nHost: [x%25]\r\n\r\n")
	f.Add("GET / HTTP/1.1\r\nHost:\r\n\r\n")
	b, err := testbackend.Start("b")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(b.Close)
	p := newPool(f, "chat", balance.LeastConn, map[string]string{"b": b.Addr()})
	p.MaxBodyBytes = 1 << 10
	s, err := New(Options{Routes: []Route{{Default: true, Pool: p}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	h := s.Handler(ListenerOptions{Name: "fuzz", ReadBodyTimeout: time.Second})
	f.Fuzz(func(t *testing.T, raw string) {
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil || wantsUpgrade(r.Header) {
			return
		}
		r.RemoteAddr = "127.0.0.1:1"
		reason := invalidRequest(r)
		if reason == "" {
			if !validHost(r.Host) || strings.Contains(r.RequestURI, "#") || r.Method == http.MethodConnect || hasDotSegment(r.URL.Path) {
				t.Fatalf("accepted %q", raw)
			}
		}
		w := httptest.NewRecorder()
		func() {
			defer func() {
				if v := recover(); v != nil && v != http.ErrAbortHandler {
					panic(v)
				}
			}()
			h.ServeHTTP(w, r)
		}()
		if reason != "" {
			if w.Code != http.StatusBadRequest {
				t.Fatalf("refused (%s) %q answered %d", reason, raw, w.Code)
			}
			return
		}
		if body := w.Body.String(); w.Code == 200 && strings.HasPrefix(body, "b /") {
			want := r.URL.Path
			if want == "" {
				want = "/" // RFC 9112 §3.2.1: an empty path is sent as "/"
			}
			if got := strings.TrimSuffix(strings.TrimPrefix(body, "b "), "\n"); got != want {
				t.Fatalf("%q: routed path %q, backend got %q", raw, r.URL.Path, got)
			}
		}
	})
}

// FuzzBackendResponseHead: the reader of a backend's answer to the upgrade
// never panics, never reads more than its limit before the final head, and
// returns only a final (non-interim) response.
func FuzzBackendResponseHead(f *testing.F) {
	// A 101, the usual answer.
	f.Add("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n\x81\x02hi")
	// Interim answers before it (RFC 9110 §15.2).
	f.Add("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 101 Switching Protocols\r\n\r\n")
	// A refusal with a body; a malformed status line; an endless header.
	f.Add("HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nabc")
	f.Add("HTTP/1.1 abc\r\n\r\n")
	f.Add("HTTP/1.1 101 OK\r\nX: " + strings.Repeat("a", 600))
	// Bare LF line endings, and a folded header line.
	f.Add("HTTP/1.1 101 Switching Protocols\nUpgrade: websocket\n\n")
	f.Add("HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n")
	const limit = 512
	f.Fuzz(func(t *testing.T, raw string) {
		var read int
		lim := &headLimit{r: strings.NewReader(raw), n: limit, hook: func(n int) { read += n }}
		resp, err := readFinalResponse(bufio.NewReaderSize(lim, 4096))
		if read > limit {
			t.Fatalf("read %d bytes, limit %d", read, limit)
		}
		if err != nil {
			return
		}
		if c := resp.StatusCode; c >= 100 && c < 200 && c != http.StatusSwitchingProtocols {
			t.Fatalf("interim status %d returned as final", c)
		}
	})
}

// FuzzRequestID: the id edge logs and forwards is always one bounded
// token of visible ASCII; a valid id from a trusted proxy is kept as it
// is, any other peer's is replaced by a generated one and comes back
// only to be logged apart.
func FuzzRequestID(f *testing.F) {
	f.Add("abc-123")
	f.Add("")
	f.Add("has space")
	f.Add("caf\xc3\xa9")
	f.Add(strings.Repeat("a", 129))
	f.Fuzz(func(t *testing.T, in string) {
		h := http.Header{"X-Request-Id": {in}}
		id, client := requestID(h, true)
		if !validRequestID(id) || client != "" {
			t.Fatalf("trusted peer: id %q, client %q for %q; want a valid id and no client value", id, client, in)
		}
		if validRequestID(in) && id != in {
			t.Fatalf("trusted peer: valid id %q replaced by %q", in, id)
		}
		id, client = requestID(h, false)
		if !generatedID.MatchString(id) {
			t.Fatalf("untrusted peer: id %q for %q, want a generated one", id, in)
		}
		if want := map[bool]string{true: in}[validRequestID(in)]; client != want {
			t.Fatalf("untrusted peer: client value %q for %q, want %q", client, in, want)
		}
	})
}
