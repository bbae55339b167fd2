package auth

import (
	"strings"
	"testing"
)

// FuzzVerify: any string a client sends is refused or verified without a
// panic, and nothing verifies but the tokens the key signed (the seeds'
// own, unchanged).
func FuzzVerify(f *testing.F) {
	s := newSigner(f)
	v := testVerifier(f, s, RS256, ES256, EdDSA, HS256)
	signed := map[string]bool{}
	for alg, kid := range map[string]string{RS256: "r1", ES256: "e1", EdDSA: "d1", HS256: "h1"} {
		tok := s.mint(f, alg, kid, claims(nil))
		signed[tok] = true
		f.Add(tok)
	}
	f.Add("e30.e30.")
	f.Add("eyJhbGciOiJub25lIn0.eyJleHAiOjF9.")
	f.Add(strings.Repeat(".", 3))
	f.Fuzz(func(t *testing.T, tok string) {
		c, _, err := v.Verify(tok, now)
		if err == nil && !signed[tok] {
			// A token the fuzzer changed verified: only its signature
			// segment's base64 padding bits may differ.
			p := strings.Split(tok, ".")
			ok := false
			for orig := range signed {
				q := strings.Split(orig, ".")
				if p[0] == q[0] && p[1] == q[1] {
					ok = true
				}
			}
			if !ok {
				t.Fatalf("an unsigned token verified: %q (%+v)", tok, c)
			}
		}
	})
}

// FuzzParseJWKS: any document is parsed or refused without a panic, and
// every key it yields has an algorithm and a key of that algorithm.
func FuzzParseJWKS(f *testing.F) {
	s := newSigner(f)
	f.Add(jwksOf(s, "k"))
	f.Add([]byte(`{"keys":[{"kty":"oct","k":"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"EC","crv":"P-256","x":"","y":""}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ks, err := ParseJWKS(data, true)
		if err != nil {
			return
		}
		for _, k := range ks.keys {
			if !ValidAlgorithm(k.Alg) || (k.Alg == HS256) != (k.Public == nil) {
				t.Fatalf("key %+v", k)
			}
		}
	})
}
