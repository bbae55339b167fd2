package proxy

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/edgelb/edge/auth"
	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/edgelb/edge/internal/wswire"
	"github.com/edgelb/edge/proxy/internal/wsession"
)

// tokenIssuer signs ES256 tokens for the proxy's tests; the interop with
// tokens other implementations mint is auth's and cmd/edge's to test.
type tokenIssuer struct {
	key *ecdsa.PrivateKey
	v   *auth.Verifier
}

func newTokenIssuer(t testing.TB) *tokenIssuer {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	v, err := auth.NewVerifier(&auth.Provider{Name: "t", Issuer: "iss", Algorithms: []string{auth.ES256},
		Keys: auth.StaticKeys{K: auth.NewKeys(auth.Key{ID: "k", Alg: auth.ES256, Public: &k.PublicKey})}})
	if err != nil {
		t.Fatal(err)
	}
	return &tokenIssuer{key: k, v: v}
}

func (ti *tokenIssuer) mint(sub string, exp time.Time) string {
	return ti.mintClaims(map[string]any{"iss": "iss", "sub": sub, "exp": exp.Unix(), "iat": time.Now().Unix(), "tenant": "t1"})
}

func (ti *tokenIssuer) mintClaims(claims map[string]any) string {
	enc := func(v any) string { b, _ := json.Marshal(v); return base64.RawURLEncoding.EncodeToString(b) }
	signed := enc(map[string]string{"alg": "ES256", "kid": "k"}) + "." + enc(claims)
	sum := sha256.Sum256([]byte(signed))
	r, s, _ := ecdsa.Sign(rand.Reader, ti.key, sum[:])
	return signed + "." + base64.RawURLEncoding.EncodeToString(append(r.FillBytes(make([]byte, 32)), s.FillBytes(make([]byte, 32))...))
}

// TestExpirySpreadEvenly: 10,000 connections whose tokens share one exp
// close at no more than N/spread per second, plus one in ten: the
// places in the spread follow a low-discrepancy sequence, not chance.
func TestExpirySpreadEvenly(t *testing.T) {
	s := &Server{}
	a := compileAuth(&Auth{Spread: 10 * time.Second, Grace: 5 * time.Second})
	exp := time.Unix(1_800_000_000, 0)
	const n = 10000
	perSecond := map[int64]int{}
	for range n {
		at := s.expiryAt(exp, a)
		d := time.Duration(at - exp.UnixNano())
		if d < a.Grace || d >= a.Grace+a.Spread {
			t.Fatalf("an expiry %s after exp, want within [grace, grace+spread)", d)
		}
		perSecond[int64(d/time.Second)]++
	}
	limit := n / 10 * 11 / 10
	for sec, c := range perSecond {
		if c > limit {
			t.Errorf("second %d after exp: %d closes, want at most %d (N/spread x 1.1)", sec, c, limit)
		}
	}
	if len(perSecond) != 10 {
		t.Errorf("closes fall in %d seconds, want the 10 of the spread", len(perSecond))
	}
}

// TestTokenPolicyOnTheProxy: a pool requiring tokens refuses a missing or
// bad one before dialling (the backend sees no connection), takes the
// token out of what the backend receives and forwards the claims, checks
// plain HTTP requests alike, and caps one subject's WebSockets.
func TestTokenPolicyOnTheProxy(t *testing.T) {
	b := startBackend(t, "b1")
	ti := newTokenIssuer(t)
	p := newPool(t, "app", balance.LeastConn, map[string]string{"b1": b.Addr()})
	p.Auth = &Auth{Verifier: ti.v, Claims: []ClaimHeader{{Claim: "tenant", Header: "X-Tenant"}}, MaxConnsPerSubject: 2}
	e := startEdge(t, edgeConfig{opts: Options{Routes: []Route{{Default: true, Pool: p}}}})

	bearer := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }
	before := b.Accepts()
	for name, h := range map[string]http.Header{
		"missing": nil,
		"garbage": bearer("a.b.c"),
		"expired": bearer(ti.mint("x", time.Now().Add(-time.Hour))),
		"foreign": bearer(newTokenIssuer(t).mint("x", time.Now().Add(time.Hour))),
		// Valid for an hour more, but issued 30 days ago with 31 days of
		// life: a revocation kept 24 hours would have let it back.
		"long-lived": bearer(ti.mintClaims(map[string]any{"iss": "iss", "sub": "x", "iat": time.Now().Add(-30 * 24 * time.Hour).Unix(),
			"exp": time.Now().Add(time.Hour).Unix()})),
		"no iat": bearer(ti.mintClaims(map[string]any{"iss": "iss", "sub": "x", "exp": time.Now().Add(time.Hour).Unix()})),
	} {
		_, resp, err := e.dialer().Dial(e.url("/"), h)
		if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: %v %v, want 401", name, resp, err)
		}
	}
	if n := b.Accepts() - before; n != 0 {
		t.Fatalf("%d backend connections for refused upgrades", n)
	}

	tok := ti.mint("alice", time.Now().Add(time.Hour))
	c1, _, err := e.dialer().Dial(e.url("/"), http.Header{"Authorization": {"Bearer " + tok}, "X-Tenant": {"forged"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c1.WriteMessage(1, []byte("headers"))
	_, msg, _ := c1.ReadMessage()
	var seen map[string][]string
	json.Unmarshal(msg, &seen)
	if len(seen["Authorization"]) != 0 || len(seen["X-Tenant"]) != 1 || seen["X-Tenant"][0] != "t1" {
		t.Errorf("the backend saw Authorization %q and X-Tenant %q; want none and t1", seen["Authorization"], seen["X-Tenant"])
	}
	c2, _, err := e.dialer().Dial(e.url("/"), bearer(tok))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, resp, err := e.dialer().Dial(e.url("/"), bearer(tok)); err == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a third connection of one subject: %v %v, want 429", resp, err)
	}
	c2.Close()
	testkit.WaitFor(t, "the subject's second connection to end", func() bool { return e.srv.Active() == 1 })
	c3, _, err := e.dialer().Dial(e.url("/"), bearer(tok))
	if err != nil {
		t.Fatalf("after one closed, the subject's connection: %v", err)
	}
	c3.Close()

	// Plain HTTP: refused without a token, passed with one.
	req, _ := http.NewRequest("GET", e.httpURL("/headers"), nil)
	if resp, err := e.httpClient().Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("plain request without a token: %v %v", resp, err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := e.httpClient().Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("plain request with a token: %v %v", resp, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	json.Unmarshal(body, &seen)
	if len(seen["Authorization"]) != 0 || seen["X-Tenant"][0] != "t1" {
		t.Errorf("plain request: the backend saw %s", body)
	}
}

// TestRevokedLiveConnectionCloses: SetRevoked closes a live connection
// of the revoked subject with the pool's code and leaves the others.
func TestRevokedLiveConnectionCloses(t *testing.T) {
	b := startBackend(t, "b1")
	ti := newTokenIssuer(t)
	p := newPool(t, "app", balance.LeastConn, map[string]string{"b1": b.Addr()})
	p.Auth = &Auth{Verifier: ti.v, CloseCode: 4001}
	forEachPath(t, func(t *testing.T, sp splicePath) {
		e := startEdge(t, edgeConfig{splice: sp, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
		h := func(sub string) http.Header {
			return http.Header{"Authorization": {"Bearer " + ti.mint(sub, time.Now().Add(time.Hour))}}
		}
		bad, _, err := e.dialer().Dial(e.url("/"), h("mallory"))
		if err != nil {
			t.Fatal(err)
		}
		good, _, err := e.dialer().Dial(e.url("/"), h("alice"))
		if err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, "both registered", func() bool { return e.srv.Active() == 2 })
		r := auth.CompileRevocations([]auth.Revocation{{Subject: "mallory", Until: time.Now().Add(time.Hour)}}, []string{"iss"}, time.Now())
		if n := e.srv.SetRevoked(r); n != 1 {
			t.Fatalf("SetRevoked asked %d to close, want 1", n)
		}
		_, _, err = bad.ReadMessage()
		if code := closeCodeOf(err); code != 4001 {
			t.Fatalf("revoked connection: %v, want close 4001", err)
		}
		good.WriteMessage(1, []byte("whoami"))
		if _, m, err := good.ReadMessage(); err != nil || string(m) != "b1" {
			t.Fatalf("the other subject's connection: %q %v", m, err)
		}
		good.Close()
		bad.Close()
	})
}

// rawBackend is a backend that answers the upgrade itself: held tells it
// the request arrived (and waits for release before the 101, when set),
// then it streams one 1 MiB binary frame a byte every 50 ms, so no frame
// boundary ever comes.
func rawBackend(t *testing.T, held chan<- struct{}, release <-chan struct{}) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				if held != nil {
					held <- struct{}{}
				}
				if release != nil {
					<-release
				}
				fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
					wswire.AcceptKey(req.Header.Get("Sec-WebSocket-Key")))
				go io.Copy(io.Discard, c)
				if _, err := c.Write([]byte{0x82, 127, 0, 0, 0, 0, 0, 0x10, 0, 0}); err != nil {
					return
				}
				for {
					time.Sleep(50 * time.Millisecond) // a trickle: the stream's shape, not synchronisation
					if _, err := c.Write([]byte{'x'}); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

var revokeMallory = []auth.Revocation{{Subject: "mallory", Until: time.Now().Add(time.Hour)}}

// TestRevokedMidFrameEnds: a revoked connection whose backend never
// reaches a frame boundary cannot get its close frame; it is ended
// wsession.FinTimeout after the revocation, not at its token's end.
func TestRevokedMidFrameEnds(t *testing.T) {
	revokedConnEnds(t, rawBackend(t, nil, nil), "the revoked connection to end mid-frame")
}

// TestRevokedUnansweredCloseEnds: a revoked connection whose close frame
// goes out but whose client never answers it (nor reads) is ended
// wsession.FinTimeout after the revocation: the holder of a revoked token
// cannot keep the connection by staying silent.
func TestRevokedUnansweredCloseEnds(t *testing.T) {
	revokedConnEnds(t, startBackend(t, "b1").Addr(), "the revoked connection to end, its close unanswered")
}

// revokedConnEnds opens one connection of mallory's through backend,
// which neither reads nor answers afterwards, revokes mallory, and awaits
// the connection's end (what) on both splices.
func revokedConnEnds(t *testing.T, backend, what string) {
	t.Helper()
	ti := newTokenIssuer(t)
	p := newPool(t, "app", balance.LeastConn, map[string]string{"b1": backend})
	p.Auth = &Auth{Verifier: ti.v}
	forEachPath(t, func(t *testing.T, sp splicePath) {
		e := startEdge(t, edgeConfig{splice: sp, opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
		c, _, err := e.dialer().Dial(e.url("/"), http.Header{"Authorization": {"Bearer " + ti.mint("mallory", time.Now().Add(time.Hour))}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		testkit.WaitFor(t, "the connection registered", func() bool { return e.srv.Active() == 1 })
		if n := e.srv.SetRevoked(auth.CompileRevocations(revokeMallory, []string{"iss"}, time.Now())); n != 1 {
			t.Fatalf("SetRevoked asked %d to close", n)
		}
		// FinTimeout after the revocation, with room for a loaded machine:
		// the bound proves the end comes, not how soon.
		testkit.Await(t, wsession.FinTimeout+50*time.Second, what, func() (bool, string) {
			return e.srv.Active() == 0, ""
		})
	})
}

// TestRevokedWhileUpgrading: a revocation made while a connection's
// backend handshake is under way reaches that connection once it is
// registered.
func TestRevokedWhileUpgrading(t *testing.T) {
	ti := newTokenIssuer(t)
	held, release := make(chan struct{}, 1), make(chan struct{})
	p := newPool(t, "app", balance.LeastConn, map[string]string{"b1": rawBackend(t, held, release)})
	p.Auth = &Auth{Verifier: ti.v}
	e := startEdge(t, edgeConfig{opts: Options{Routes: []Route{{Default: true, Pool: p}}}})
	dialed := make(chan error, 1)
	go func() {
		c, _, err := e.dialer().Dial(e.url("/"), http.Header{"Authorization": {"Bearer " + ti.mint("mallory", time.Now().Add(time.Hour))}})
		if err == nil {
			defer c.Close()
		}
		dialed <- err
	}()
	<-held
	if n := e.srv.SetRevoked(auth.CompileRevocations(revokeMallory, []string{"iss"}, time.Now())); n != 0 {
		t.Fatalf("SetRevoked found %d registered", n)
	}
	close(release)
	if err := <-dialed; err != nil {
		t.Fatal(err)
	}
	testkit.Await(t, wsession.FinTimeout+50*time.Second, "the connection revoked during its upgrade to end", func() (bool, string) {
		return e.srv.Active() == 0, ""
	})
}

// TestStripKeepsTheRest: the token is removed however the client spells
// its place (a cookie name with blanks around it, as net/http reads it; a
// query parameter escaped or repeated), and what is around it stays as
// written.
func TestStripKeepsTheRest(t *testing.T) {
	h := http.Header{"Cookie": {"a=1; tok =secret; b=2", "tok\t=other"}}
	stripCookie(h, "tok")
	if got := h.Get("Cookie"); got != "a=1; b=2" {
		t.Errorf("cookies left: %q", got)
	}
	r, _ := http.NewRequest("GET", "/ws?z=9&%61ccess_token=x&a=b%2Fc&access_token=y", nil)
	r.RequestURI = r.URL.RequestURI()
	stripQuery(r, "access_token")
	if r.URL.RawQuery != "z=9&a=b%2Fc" || r.RequestURI != "/ws?z=9&a=b%2Fc" {
		t.Errorf("query left: %q, request URI %q", r.URL.RawQuery, r.RequestURI)
	}
}

// TestAccessLogSubject: the access line of a connection made with a
// token names its subject by hash, or by name in a pool that logs
// subjects; and the name is let go with the last connection holding it.
func TestAccessLogSubject(t *testing.T) {
	ti := newTokenIssuer(t)
	for _, plain := range []bool{false, true} {
		lc := &logCounter{}
		e, _ := oneBackendEdge(t, spliceReadiness, false, func(p *Pool, cfg *edgeConfig) {
			p.Auth = &Auth{Verifier: ti.v, LogSubject: plain}
			cfg.opts.AccessLog = slog.New(lc)
		})
		c, _ := e.dialWS(t, "/", http.Header{"Authorization": {"Bearer " + ti.mint("alice", time.Now().Add(time.Hour))}})
		testkit.Ask(t, c, "x")
		c.Close()
		testkit.WaitFor(t, "the access line", func() bool { return lc.count() == 1 })
		want := fmt.Sprintf("%016x", auth.SubjectHash("iss", "alice"))
		if plain {
			want = "alice"
		}
		if got := lc.attrs(0)["sub"].String(); got != want {
			t.Errorf("plain %v: sub %q, want %q", plain, got, want)
		}
		e.srv.subjects.mu.Lock()
		left := len(e.srv.subjects.names)
		e.srv.subjects.mu.Unlock()
		if left != 0 {
			t.Errorf("plain %v: %d names held after the last connection", plain, left)
		}
	}
}

// FuzzStripToken: whatever a client puts in the places a token may be
// (header, cookies, subprotocols, query), once edge strips them no token
// is left where the same parsers look, so none reaches the backend, and
// a token is found only where one was put.
func FuzzStripToken(f *testing.F) {
	f.Add("Bearer a.b.c", "tok=a.b.c; x=1", "chat, bearer.a.b.c", "tok=a.b.c&z=1")
	f.Add("bearer   x", "tok =x;tok\t=y", "bearer.eHl6", "%74ok=x&tok=y&tok")
	f.Add("", "a=1; tok=", "bearer.", "tok")
	from := []TokenSource{{Kind: TokenHeader}, {Kind: TokenCookie, Name: "tok"}, {Kind: TokenProtocol, Name: "bearer."}, {Kind: TokenQuery, Name: "tok"}}
	f.Fuzz(func(t *testing.T, authz, cookie, proto, query string) {
		r, err := http.NewRequest("GET", "/ws", nil)
		if err != nil {
			t.Skip()
		}
		r.URL.RawQuery = query
		r.RequestURI = r.URL.RequestURI()
		r.Header = http.Header{"Authorization": {authz}, "Cookie": {cookie}, "Sec-Websocket-Protocol": {proto}}
		stripToken(r, from)
		for _, src := range from {
			if tok := tokenIn(r, src); tok != "" {
				t.Fatalf("after the strip, %v still holds %q (request %q %v)", src, tok, r.RequestURI, r.Header)
			}
		}
		if u, err := url.ParseRequestURI(r.RequestURI); err == nil && u.Query().Has("tok") {
			t.Fatalf("the request line still carries tok: %q", r.RequestURI)
		}
	})
}
