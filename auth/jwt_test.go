package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// signer mints tokens for the tests, as an issuer would.
type signer struct {
	rsa *rsa.PrivateKey
	ec  *ecdsa.PrivateKey
	ed  ed25519.PrivateKey
	hs  []byte
}

func newSigner(t testing.TB) *signer {
	t.Helper()
	r, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	hs := make([]byte, 32)
	rand.Read(hs)
	return &signer{rsa: r, ec: e, ed: ed, hs: hs}
}

func (s *signer) keys() *Keys {
	return NewKeys(
		Key{ID: "r1", Alg: RS256, Public: &s.rsa.PublicKey},
		Key{ID: "e1", Alg: ES256, Public: &s.ec.PublicKey},
		Key{ID: "d1", Alg: EdDSA, Public: s.ed.Public()},
		Key{ID: "h1", Alg: HS256, Secret: s.hs},
	)
}

func seg(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

// mint signs claims with the key of alg under kid.
func (s *signer) mint(t testing.TB, alg, kid string, claims map[string]any) string {
	t.Helper()
	h := map[string]any{"alg": alg, "typ": "JWT"}
	if kid != "" {
		h["kid"] = kid
	}
	signed := seg(h) + "." + seg(claims)
	sum := sha256.Sum256([]byte(signed))
	var sig []byte
	switch alg {
	case RS256:
		sig, _ = rsa.SignPKCS1v15(rand.Reader, s.rsa, crypto.SHA256, sum[:])
	case ES256:
		r, ss, _ := ecdsa.Sign(rand.Reader, s.ec, sum[:])
		sig = append(r.FillBytes(make([]byte, 32)), ss.FillBytes(make([]byte, 32))...)
	case EdDSA:
		sig = ed25519.Sign(s.ed, []byte(signed))
	case HS256:
		m := hmac.New(sha256.New, s.hs)
		m.Write([]byte(signed))
		sig = m.Sum(nil)
	}
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig)
}

var now = time.Unix(1_800_000_000, 0)

func claims(extra map[string]any) map[string]any {
	c := map[string]any{"iss": "https://id.example", "sub": "alice", "aud": "chat",
		"exp": now.Add(time.Hour).Unix(), "iat": now.Add(-time.Minute).Unix(), "jti": "t-1"}
	for k, v := range extra {
		if v == nil {
			delete(c, k)
			continue
		}
		c[k] = v
	}
	return c
}

func testVerifier(t testing.TB, s *signer, algs ...string) *Verifier {
	t.Helper()
	v, err := NewVerifier(&Provider{Name: "corp", Issuer: "https://id.example", Audiences: []string{"chat"},
		Algorithms: algs, Leeway: 30 * time.Second, Required: []string{"sub"}, Keys: StaticKeys{s.keys()}})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestVerifyEachAlgorithm: a token of each algorithm verifies with its
// key, and its claims come out.
func TestVerifyEachAlgorithm(t *testing.T) {
	s := newSigner(t)
	v := testVerifier(t, s, RS256, ES256, EdDSA, HS256)
	for alg, kid := range map[string]string{RS256: "r1", ES256: "e1", EdDSA: "d1", HS256: "h1"} {
		c, p, err := v.Verify(s.mint(t, alg, kid, claims(map[string]any{"tenant": "t9", "roles": []string{"a", "b"}})), now)
		if err != nil {
			t.Fatalf("%s: %v", alg, err)
		}
		if p.Name != "corp" || c.Subject != "alice" || c.ID != "t-1" || c.Audience[0] != "chat" || !c.Expiry.Equal(now.Add(time.Hour)) {
			t.Fatalf("%s: claims %+v", alg, c)
		}
		if v, ok := c.Claim("tenant"); !ok || v != "t9" {
			t.Fatalf("tenant %q %v", v, ok)
		}
		if v, ok := c.Claim("roles"); !ok || v != "a,b" {
			t.Fatalf("roles %q %v", v, ok)
		}
		if v, ok := c.Claim("exp"); !ok || v != "1800003600" {
			t.Fatalf("exp rendered %q", v)
		}
	}
}

// TestVerifyRefusals: every way a token must fail, with its outcome.
func TestVerifyRefusals(t *testing.T) {
	s := newSigner(t)
	v := testVerifier(t, s, ES256, RS256)
	good := s.mint(t, ES256, "e1", claims(nil))
	parts := strings.Split(good, ".")
	other := newSigner(t)
	// The algorithm confusion: an HS256 token whose secret is the RSA
	// public key's bytes, which an RS256-allowing verifier that took the
	// key for a secret would accept.
	pubDER, _ := x509.MarshalPKIXPublicKey(&s.rsa.PublicKey)
	confused := &signer{hs: pubDER}
	vHS := testVerifier(t, s, RS256, HS256)
	cases := []struct {
		name, token string
		v           *Verifier
		want        error
	}{
		{"bad signature", parts[0] + "." + parts[1] + "." + strings.Split(other.mint(t, ES256, "e1", claims(nil)), ".")[2], v, ErrSignature},
		{"payload changed", parts[0] + "." + seg(claims(map[string]any{"sub": "root"})) + "." + parts[2], v, ErrSignature},
		{"alg none", seg(map[string]any{"alg": "none"}) + "." + parts[1] + ".", v, ErrAlgorithm},
		{"alg not allowed", s.mint(t, EdDSA, "d1", claims(nil)), v, ErrAlgorithm},
		{"RSA key as HMAC secret", confused.mint(t, HS256, "r1", claims(nil)), vHS, ErrUnknownKey},
		{"kid of another algorithm", s.mint(t, ES256, "r1", claims(nil)), v, ErrUnknownKey},
		{"unknown kid", s.mint(t, ES256, "nope", claims(nil)), v, ErrUnknownKey},
		{"wrong issuer", s.mint(t, ES256, "e1", claims(map[string]any{"iss": "https://evil"})), v, ErrUnknownIssuer},
		{"wrong audience", s.mint(t, ES256, "e1", claims(map[string]any{"aud": []string{"billing"}})), v, ErrAudience},
		{"expired", s.mint(t, ES256, "e1", claims(map[string]any{"exp": now.Add(-31 * time.Second).Unix()})), v, ErrExpired},
		{"not yet valid", s.mint(t, ES256, "e1", claims(map[string]any{"nbf": now.Add(31 * time.Second).Unix()})), v, ErrNotYetValid},
		{"issued in the future", s.mint(t, ES256, "e1", claims(map[string]any{"iat": now.Add(time.Minute).Unix()})), v, ErrNotYetValid},
		{"no exp", s.mint(t, ES256, "e1", claims(map[string]any{"exp": nil})), v, ErrMissingClaim},
		{"no sub", s.mint(t, ES256, "e1", claims(map[string]any{"sub": nil})), v, ErrMissingClaim},
		{"crit", seg(map[string]any{"alg": "ES256", "kid": "e1", "crit": []string{"exp"}}) + "." + parts[1] + "." + parts[2], v, ErrMalformed},
		{"too long", strings.Repeat("a", MaxTokenBytes+1), v, ErrMalformed},
		{"two parts", parts[0] + "." + parts[1], v, ErrMalformed},
		{"DER signature", parts[0] + "." + parts[1] + "." + base64.RawURLEncoding.EncodeToString(make([]byte, 70)), v, ErrSignature},
		{"array payload", parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte("[1]")) + "." + parts[2], v, ErrMalformed},
		{"huge exp", s.mint(t, ES256, "e1", claims(map[string]any{"exp": 1e300})), v, ErrMalformed},
	}
	for _, c := range cases {
		_, _, err := c.v.Verify(c.token, now)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), c.token) && len(c.token) > 0 {
			t.Errorf("%s: the error carries the token", c.name)
		}
	}
	// The leeway: 29 s past exp still verifies.
	if _, _, err := v.Verify(s.mint(t, ES256, "e1", claims(map[string]any{"exp": now.Add(-29 * time.Second).Unix()})), now); err != nil {
		t.Errorf("within the leeway: %v", err)
	}
}

// TestMissingKidAsksEarly: an unknown kid tells the source, a known one
// never does.
func TestMissingKidAsksEarly(t *testing.T) {
	s := newSigner(t)
	src := &countingSource{k: s.keys()}
	v, _ := NewVerifier(&Provider{Name: "p", Algorithms: []string{ES256}, Keys: src})
	v.Verify(s.mint(t, ES256, "e1", claims(nil)), now)
	v.Verify(s.mint(t, ES256, "e2", claims(nil)), now)
	if src.missing != 1 {
		t.Fatalf("Missing called %d times, want 1", src.missing)
	}
}

type countingSource struct {
	k       *Keys
	missing int
}

func (c *countingSource) Keys() *Keys    { return c.k }
func (c *countingSource) Missing(string) { c.missing++ }

// TestNewVerifierRefuses: providers that would make the choice of key
// ambiguous or the allow-list empty.
func TestNewVerifierRefuses(t *testing.T) {
	k := StaticKeys{NewKeys()}
	for name, ps := range map[string][]*Provider{
		"no algorithm":     {{Name: "a", Issuer: "x", Keys: k}},
		"none":             {{Name: "a", Issuer: "x", Algorithms: []string{"none"}, Keys: k}},
		"same issuer":      {{Name: "a", Issuer: "x", Algorithms: []string{ES256}, Keys: k}, {Name: "b", Issuer: "x", Algorithms: []string{ES256}, Keys: k}},
		"issuer-less pair": {{Name: "a", Algorithms: []string{ES256}, Keys: k}, {Name: "b", Issuer: "x", Algorithms: []string{ES256}, Keys: k}},
	} {
		if _, err := NewVerifier(ps...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestRevoked: by subject, by id, issued before, with and without issuer,
// and entries past their until forgotten.
func TestRevoked(t *testing.T) {
	iss := "https://id.example"
	m := func(sub, jti string, iat int64) Mark {
		return MarkOf(&Claims{Issuer: iss, Subject: sub, ID: jti, IssuedAt: time.Unix(iat, 0)}, nil)
	}
	later := now.Add(time.Hour)
	r := CompileRevocations([]Revocation{
		{Subject: "alice", Until: later},
		{ID: "t-9", Issuer: iss, Until: later},
		{Subject: "bob", Before: time.Unix(1000, 0), Until: later},
		{Before: time.Unix(500, 0), Until: later},
		{Subject: "carol", Until: now.Add(-time.Second)},
		{Subject: "dave", Issuer: "https://other", Until: later},
	}, []string{iss}, now)
	for _, c := range []struct {
		m    Mark
		want bool
	}{
		{m("alice", "x", 2000), true},
		{m("zoe", "t-9", 2000), true},
		{m("bob", "x", 999), true},
		{m("bob", "x", 1000), false},
		{m("zoe", "x", 499), true},
		{m("zoe", "x", 2000), false},
		{m("carol", "x", 2000), false},
		{m("dave", "x", 2000), false},
	} {
		if got := r.Revoked(c.m); got != c.want {
			t.Errorf("%+v: revoked %v, want %v", c.m, got, c.want)
		}
	}
	if r.Len() != 5 {
		t.Errorf("Len %d, want 5 in force", r.Len())
	}
}

// BenchmarkVerify is the CPU one upgrade's token costs, by algorithm:
// parsing, the signature, the claims.
func BenchmarkVerify(b *testing.B) {
	s := newSigner(b)
	v := testVerifier(b, s, RS256, ES256, EdDSA, HS256)
	for alg, kid := range map[string]string{RS256: "r1", ES256: "e1", EdDSA: "d1", HS256: "h1"} {
		tok := s.mint(b, alg, kid, claims(nil))
		b.Run(alg, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := v.Verify(tok, now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestClaimsByExactName: a claim is read under its exact name only, so a
// token carrying "sub" and "SUB" has one subject for every reader.
func TestClaimsByExactName(t *testing.T) {
	s := newSigner(t)
	v := testVerifier(t, s, ES256)
	c, _, err := v.Verify(s.mint(t, ES256, "e1", claims(map[string]any{"SUB": "bob", "Iss": "https://evil"})), now)
	if err != nil {
		t.Fatal(err)
	}
	if hdr, _ := c.Claim("sub"); c.Subject != "alice" || hdr != "alice" {
		t.Fatalf("Subject %q, claim sub %q: want alice for both", c.Subject, hdr)
	}
}

// TestValuesKeepCommas: a rule compares whole values, so a group named
// "viewers,admins" is not the group admins.
func TestValuesKeepCommas(t *testing.T) {
	s := newSigner(t)
	v := testVerifier(t, s, ES256)
	c, _, err := v.Verify(s.mint(t, ES256, "e1", claims(map[string]any{"groups": []string{"viewers,admins"}, "role": "a,b"})), now)
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := c.Values("groups"); len(g) != 1 || g[0] != "viewers,admins" {
		t.Fatalf("groups %q", g)
	}
	if r, _ := c.Values("role"); len(r) != 1 || r[0] != "a,b" {
		t.Fatalf("role %q", r)
	}
}

// TestMarkUnderTheProvidersIssuer: a provider without an issuer (it
// accepts any) marks its tokens under "", as a revocation without iss is
// compiled for it, so revoking a subject there revokes it.
func TestMarkUnderTheProvidersIssuer(t *testing.T) {
	s := newSigner(t)
	p := &Provider{Name: "any", Algorithms: []string{ES256}, Keys: StaticKeys{s.keys()}}
	v, err := NewVerifier(p)
	if err != nil {
		t.Fatal(err)
	}
	c, got, err := v.Verify(s.mint(t, ES256, "e1", claims(nil)), now)
	if err != nil {
		t.Fatal(err)
	}
	r := CompileRevocations([]Revocation{{Subject: "alice", Until: now.Add(time.Hour)}}, []string{""}, now)
	if !r.Revoked(MarkOf(c, got)) {
		t.Fatal("a subject revoked for an issuer-less provider is not revoked")
	}
}

// TestRevocationBounded: what a store others write may say is bounded.
func TestRevocationBounded(t *testing.T) {
	for _, r := range []Revocation{
		{Before: now.Add(time.Hour), Until: now.Add(time.Hour)},
		{Subject: "a", Until: now.Add(100 * 24 * time.Hour)},
	} {
		if r.Bounded(now, 25*time.Hour) == nil {
			t.Errorf("%+v accepted", r)
		}
	}
	if err := (&Revocation{Subject: "a", Before: now, Until: now.Add(24 * time.Hour)}).Bounded(now, 25*time.Hour); err != nil {
		t.Errorf("a revocation in bounds: %v", err)
	}
}

// TestShortECCoordinates: a coordinate written without its leading zero byte
// (keycloak/keycloak#14933) is the same point, and is accepted; one with a
// byte too many, or a point off the curve, is not.
func TestShortECCoordinates(t *testing.T) {
	var key *ecdsa.PrivateKey
	var x, y []byte
	for key == nil {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := k.PublicKey.Bytes()
		if raw[1] == 0 || raw[33] == 0 {
			key, x, y = k, raw[1:33], raw[33:]
		}
	}
	trim := func(b []byte) string {
		return base64.RawURLEncoding.EncodeToString(b[len(b)-len(strings.TrimLeft(string(b), "\x00")):])
	}
	doc := func(x, y string) []byte {
		return []byte(`{"keys":[{"kty":"EC","crv":"P-256","kid":"k","x":"` + x + `","y":"` + y + `"}]}`)
	}
	ks, err := ParseJWKS(doc(trim(x), trim(y)), false)
	if err != nil {
		t.Fatalf("short coordinates refused: %v", err)
	}
	if got := ks.find("k", ES256); len(got) != 1 || !got[0].Public.(*ecdsa.PublicKey).Equal(&key.PublicKey) {
		t.Fatalf("short coordinates gave another key: %+v", got)
	}
	long := base64.RawURLEncoding.EncodeToString(append([]byte{0}, x...))
	if _, err := ParseJWKS(doc(long, trim(y)), false); err == nil {
		t.Fatal("a 33-byte coordinate was accepted")
	}
	off := append([]byte{}, y...)
	off[31] ^= 1
	if _, err := ParseJWKS(doc(trim(x), trim(off)), false); err == nil {
		t.Fatal("a point off the curve was accepted")
	}
}
