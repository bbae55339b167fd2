package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/edgelb/edge/auth"
	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/testkit"
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
	enc := func(v any) string { b, _ := json.Marshal(v); return base64.RawURLEncoding.EncodeToString(b) }
	signed := enc(map[string]string{"alg": "ES256", "kid": "k"}) + "." +
		enc(map[string]any{"iss": "iss", "sub": sub, "exp": exp.Unix(), "iat": time.Now().Unix(), "tenant": "t1"})
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
