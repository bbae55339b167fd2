package auth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// issuer is an identity provider on loopback over HTTPS: a discovery
// document and a JWK Set, which a test can rotate or take down.
type issuer struct {
	srv     *httptest.Server
	mu      sync.Mutex
	jwks    []byte
	down    atomic.Bool
	fetches atomic.Int64
	docIss  string
}

func newIssuer(t *testing.T, jwks []byte) *issuer {
	is := &issuer{jwks: jwks}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		iss := is.docIss
		if iss == "" {
			iss = is.srv.URL
		}
		json.NewEncoder(w).Encode(map[string]string{"issuer": iss, "jwks_uri": is.srv.URL + "/keys"})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, r *http.Request) {
		is.fetches.Add(1)
		if is.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		is.mu.Lock()
		defer is.mu.Unlock()
		w.Write(is.jwks)
	})
	is.srv = httptest.NewTLSServer(mux)
	t.Cleanup(is.srv.Close)
	return is
}

func (is *issuer) rotate(jwks []byte) {
	is.mu.Lock()
	is.jwks = jwks
	is.mu.Unlock()
}

// jwksOf is the public JWK Set of s's EC key under kid.
func jwksOf(s *signer, kid string) []byte {
	pt, _ := s.ec.PublicKey.Bytes() // 0x04 || X || Y (SEC 1 §2.3.3)
	x, y := pt[1:33], pt[33:]
	b, _ := json.Marshal(map[string]any{"keys": []any{map[string]string{"kty": "EC", "crv": "P-256", "kid": kid,
		"x": b64url(x), "y": b64url(y)}}})
	return b
}

func b64url(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// TestSourceRotationAndOutage: keys found through OIDC discovery over
// HTTPS verify; after the issuer rotates, a token with the new kid asks
// for an early fetch, which comes no sooner than MinRefresh after the
// last and then verifies it; with the issuer down, the last good keys
// keep verifying and the failure shows in the status.
func TestSourceRotationAndOutage(t *testing.T) {
	old, cur := newSigner(t), newSigner(t)
	is := newIssuer(t, jwksOf(old, "k1"))
	clock := &fakeClock{t: time.Now()}
	src, err := NewSource(SourceOptions{Name: "idp", Discovery: is.srv.URL, Client: is.srv.Client(),
		Refresh: time.Hour, MinRefresh: 50 * time.Millisecond, Now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	v, _ := NewVerifier(&Provider{Name: "idp", Issuer: "https://id.example", Algorithms: []string{ES256}, Keys: src})
	if _, _, err := v.Verify(old.mint(t, ES256, "k1", claims(nil)), now); err != nil {
		t.Fatalf("first key: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); src.Run(ctx) }()
	defer func() { cancel(); <-done }()

	is.rotate(jwksOf(cur, "k2"))
	before := is.fetches.Load()
	tok := cur.mint(t, ES256, "k2", claims(nil))
	if _, _, err := v.Verify(tok, now); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("new kid before the fetch: %v, want unknown key", err)
	}
	// More unknown kids while the fetch is due ask for nothing more.
	for range 100 {
		v.Verify(tok, now)
	}
	clock.advance(time.Second)
	waitFor(t, "the rotated key", func() bool { _, _, err := v.Verify(tok, now); return err == nil })
	if n := is.fetches.Load() - before; n != 1 {
		t.Errorf("%d fetches for 101 unknown kids, want 1", n)
	}

	is.down.Store(true)
	if err := src.Load(context.Background()); err == nil {
		t.Fatal("a fetch from a down issuer succeeded")
	}
	st := src.Status()
	if !st.Failing || st.Failures != 1 || st.Keys != 1 || st.LastError == "" {
		t.Fatalf("status while down: %+v", st)
	}
	if _, _, err := v.Verify(tok, now); err != nil {
		t.Fatalf("the last good keys while the issuer is down: %v", err)
	}
}

// TestSourceRefuses: a discovery document naming another issuer, a set
// over the bound, an HS256 secret from a URL, plain http off loopback.
func TestSourceRefuses(t *testing.T) {
	s := newSigner(t)
	is := newIssuer(t, jwksOf(s, "k"))
	is.docIss = "https://someone.else"
	src, _ := NewSource(SourceOptions{Discovery: is.srv.URL, Client: is.srv.Client()})
	if err := src.Load(context.Background()); err == nil || !strings.Contains(err.Error(), "issuer") {
		t.Errorf("mismatched issuer: %v", err)
	}
	big := newIssuer(t, []byte(`{"keys":[`+strings.Repeat(" ", MaxJWKSBytes)+`]}`))
	src, _ = NewSource(SourceOptions{URL: big.srv.URL + "/keys", Client: big.srv.Client()})
	if err := src.Load(context.Background()); err == nil {
		t.Error("an oversize set was taken")
	}
	secret := newIssuer(t, []byte(`{"keys":[{"kty":"oct","k":"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY"}]}`))
	src, _ = NewSource(SourceOptions{URL: secret.srv.URL + "/keys", Client: secret.srv.Client()})
	if err := src.Load(context.Background()); err == nil {
		t.Error("an HS256 secret was taken from a URL")
	}
	if _, err := NewSource(SourceOptions{URL: "http://keys.example/jwks"}); err == nil {
		t.Error("plain http to a remote host accepted")
	}
	if _, err := NewSource(SourceOptions{URL: "http://127.0.0.1:1/jwks"}); err != nil {
		t.Errorf("plain http to loopback refused: %v", err)
	}
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// waitFor polls cond for up to ten seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
