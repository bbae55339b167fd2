package auth

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// requireTool skips without the tool, or fails when the suite must run
// every third-party client (EDGE_REQUIRE_INTEROP, as scripts/test.sh sets).
func requireTool(t *testing.T, ok bool, what string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("EDGE_REQUIRE_INTEROP") != "" {
		t.Fatalf("%s is required (EDGE_REQUIRE_INTEROP)", what)
	}
	t.Skipf("%s not installed", what)
}

const pyMint = `
import json, sys, time, jwt
from cryptography.hazmat.primitives.asymmetric import rsa, ec, ed25519
from jwt.algorithms import RSAAlgorithm, ECAlgorithm, OKPAlgorithm
now = int(time.time())
claims = {"iss": "https://py.example", "sub": "py-user", "aud": ["chat"], "exp": now + 600, "iat": now, "jti": "py-1", "tenant": "t1"}
keys, tokens = [], {}
rk = rsa.generate_private_key(public_exponent=65537, key_size=2048)
ek = ec.generate_private_key(ec.SECP256R1())
dk = ed25519.Ed25519PrivateKey.generate()
for kid, alg, key, to_jwk in (("r", "RS256", rk, RSAAlgorithm.to_jwk), ("e", "ES256", ek, ECAlgorithm.to_jwk), ("d", "EdDSA", dk, OKPAlgorithm.to_jwk)):
    j = json.loads(to_jwk(key.public_key()))
    j["kid"], j["alg"], j["use"] = kid, alg, "sig"
    keys.append(j)
    tokens[alg] = jwt.encode(claims, key, algorithm=alg, headers={"kid": kid})
secret = b"0123456789abcdef0123456789abcdef"
keys.append({"kty": "oct", "kid": "h", "alg": "HS256", "k": jwt.utils.base64url_encode(secret).decode()})
tokens["HS256"] = jwt.encode(claims, secret, algorithm="HS256", headers={"kid": "h"})
print(json.dumps({"jwks": {"keys": keys}, "tokens": tokens}))
`

// TestPyJWTInterop: tokens and keys made by PyJWT (Debian python3-jwt),
// an implementation edge did not write, verify here for every algorithm;
// a tampered one does not, and an HS256 key from a URL is refused.
func TestPyJWTInterop(t *testing.T) {
	py := "/usr/bin/python3"
	_, err := exec.LookPath(py)
	ok := err == nil && exec.Command(py, "-c", "import jwt, cryptography").Run() == nil
	requireTool(t, ok, "python3-jwt")
	script := filepath.Join(t.TempDir(), "mint.py")
	if err := os.WriteFile(script, []byte(pyMint), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, script).Output()
	if err != nil {
		t.Fatalf("mint.py: %v", err)
	}
	verifyMinted(t, out, "https://py.example", "py-user", []string{RS256, ES256, EdDSA, HS256})
}

// verifyMinted checks the {"jwks":..., "tokens": {alg: token}} a tool
// printed.
func verifyMinted(t *testing.T, out []byte, iss, sub string, algs []string) {
	t.Helper()
	var got struct {
		JWKS   json.RawMessage   `json:"jwks"`
		Tokens map[string]string `json:"tokens"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("tool output: %v", err)
	}
	ks, err := ParseJWKS(got.JWKS, true)
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewVerifier(&Provider{Name: "tool", Issuer: iss, Audiences: []string{"chat"}, Algorithms: algs, Keys: StaticKeys{ks}})
	if err != nil {
		t.Fatal(err)
	}
	for _, alg := range algs {
		tok := got.Tokens[alg]
		c, _, err := v.Verify(tok, time.Now())
		if err != nil {
			t.Fatalf("%s: %v", alg, err)
		}
		if c.Subject != sub {
			t.Fatalf("%s: sub %q", alg, c.Subject)
		}
		p := strings.Split(tok, ".")
		tampered := p[0] + "." + p[1] + "." + flip(p[2])
		if _, _, err := v.Verify(tampered, time.Now()); err == nil {
			t.Fatalf("%s: a tampered signature verified", alg)
		}
	}
	if _, err := ParseJWKS(got.JWKS, false); err != nil {
		// Without secrets allowed the asymmetric keys still parse.
		t.Fatalf("asymmetric keys without secrets: %v", err)
	}
}

// flip changes the signature's first character to another valid one.
func flip(s string) string {
	if s[0] == 'A' {
		return "B" + s[1:]
	}
	return "A" + s[1:]
}

const joseMint = `
import * as jose from %q;
const now = Math.floor(Date.now() / 1000);
const claims = { sub: "js-user", tenant: "t2", jti: "js-1" };
const keys = [], tokens = {};
for (const [kid, alg] of [["e", "ES256"], ["d", "EdDSA"], ["r", "RS256"]]) {
  const { publicKey, privateKey } = await jose.generateKeyPair(alg, { extractable: true });
  const jwk = await jose.exportJWK(publicKey);
  Object.assign(jwk, { kid, alg, use: "sig" });
  keys.push(jwk);
  tokens[alg] = await new jose.SignJWT(claims).setProtectedHeader({ alg, kid }).setIssuer("https://js.example")
    .setAudience("chat").setIssuedAt(now).setExpirationTime(now + 600).sign(privateKey);
}
console.log(JSON.stringify({ jwks: { keys }, tokens }));
`

// joseDir is where npm's jose is: EDGE_JOSE_DIR, else the interop clients'
// node_modules (scripts/test.sh installs them).
func joseDir() string {
	if d := os.Getenv("EDGE_JOSE_DIR"); d != "" {
		return d
	}
	abs, _ := filepath.Abs("../internal/interop/js/node_modules/jose")
	return abs
}

// TestJoseInterop: tokens and keys made by npm jose, in Node, verify.
func TestJoseInterop(t *testing.T) {
	entry := filepath.Join(joseDir(), "dist", "webapi", "index.js")
	_, err := os.Stat(entry)
	_, nodeErr := exec.LookPath("node")
	requireTool(t, err == nil && nodeErr == nil, "node and npm jose")
	script := filepath.Join(t.TempDir(), "mint.mjs")
	if err := os.WriteFile(script, []byte(strings.Replace(joseMint, "%q", strconvQuote("file://"+entry), 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("node", script).Output()
	if err != nil {
		t.Fatalf("mint.mjs: %v", err)
	}
	verifyMinted(t, out, "https://js.example", "js-user", []string{ES256, EdDSA, RS256})
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }
