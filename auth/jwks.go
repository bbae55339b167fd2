package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
)

// MaxJWKSBytes bounds a JWK Set and an OpenID Connect discovery document:
// whoever answers at the URL must not make edge read without bound.
const MaxJWKSBytes = 1 << 20

// maxKeys bounds the keys of one set; rotation needs two or three.
const maxKeys = 64

// maxCandidates bounds the keys a token without a kid is tried against.
const maxCandidates = 8

// Key is one verification key.
type Key struct {
	// ID is the "kid"; it may be empty.
	ID string
	// Alg is the only algorithm the key verifies: the JWK's "alg", or
	// derived from its type (RSA: RS256, EC P-256: ES256, OKP Ed25519:
	// EdDSA, oct: HS256).
	Alg string
	// Public is an *rsa.PublicKey, an *ecdsa.PublicKey on P-256 or an
	// ed25519.PublicKey; nil for HS256.
	Public crypto.PublicKey
	// Secret is an HS256 key.
	Secret []byte
}

// Keys is an immutable set of keys.
type Keys struct {
	keys []*Key
}

// NewKeys returns the set of keys.
func NewKeys(keys ...Key) *Keys {
	ks := &Keys{}
	for i := range keys {
		k := keys[i]
		ks.keys = append(ks.keys, &k)
	}
	return ks
}

// Len is the number of keys.
func (k *Keys) Len() int {
	if k == nil {
		return 0
	}
	return len(k.keys)
}

// find returns the keys a token of alg naming kid may be signed with: the
// key of that kid and algorithm; without a kid, every key of the
// algorithm, at most maxCandidates.
func (k *Keys) find(kid, alg string) []*Key {
	var out []*Key
	for _, key := range k.keys {
		if key.Alg != alg || kid != "" && key.ID != kid {
			continue
		}
		out = append(out, key)
		if len(out) == maxCandidates {
			break
		}
	}
	return out
}

// jwk is a JSON Web Key (RFC 7517 §4) as far as edge reads it.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	Crv string `json:"crv"`
	N   string `json:"n"`
	E   string `json:"e"`
	X   string `json:"x"`
	Y   string `json:"y"`
	K   string `json:"k"`
}

// ParseJWKS parses a JWK Set (RFC 7517 §5). Keys edge cannot use (another
// type or curve, "use": "enc", an algorithm it does not verify, RSA under
// 2048 bits) are skipped; a set with no usable key is an error. oct keys
// (HS256 secrets) are taken only with allowSecret: from a file the
// operator owns, never from a URL.
func ParseJWKS(data []byte, allowSecret bool) (*Keys, error) {
	if len(data) > MaxJWKSBytes {
		return nil, fmt.Errorf("jwks: %d bytes, more than %d", len(data), MaxJWKSBytes)
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	ks := &Keys{}
	var skipped []error
	for i, raw := range set.Keys {
		if len(ks.keys) == maxKeys {
			break
		}
		var j jwk
		if err := json.Unmarshal(raw, &j); err != nil {
			skipped = append(skipped, fmt.Errorf("key %d: %w", i, err))
			continue
		}
		k, err := keyOf(&j, allowSecret)
		if err != nil {
			skipped = append(skipped, fmt.Errorf("key %d (kid %q): %w", i, trimKid(j.Kid), err))
			continue
		}
		ks.keys = append(ks.keys, k)
	}
	if len(ks.keys) == 0 {
		return nil, fmt.Errorf("jwks: no usable key: %w", errors.Join(append(skipped, errors.New("empty set"))...))
	}
	return ks, nil
}

// keyOf maps one JWK; the algorithm a key declares must be the one its
// type verifies.
func keyOf(j *jwk, allowSecret bool) (*Key, error) {
	if j.Use != "" && j.Use != "sig" {
		return nil, errors.New("not a signing key")
	}
	k := &Key{ID: j.Kid}
	var err error
	switch {
	case j.Kty == "RSA":
		k.Alg = RS256
		k.Public, err = rsaKey(j)
	case j.Kty == "EC" && j.Crv == "P-256":
		k.Alg = ES256
		k.Public, err = ecKey(j)
	case j.Kty == "OKP" && j.Crv == "Ed25519":
		var x []byte
		x, err = b64(j.X, ed25519.PublicKeySize)
		k.Alg, k.Public = EdDSA, ed25519.PublicKey(x)
	case j.Kty == "oct" && allowSecret:
		k.Alg = HS256
		k.Secret, err = base64.RawURLEncoding.DecodeString(j.K)
		if err == nil && len(k.Secret) < 32 {
			// RFC 7518 §3.2: a key of at least the hash's size.
			err = errors.New("HS256 secret shorter than 32 bytes")
		}
	case j.Kty == "oct":
		return nil, errors.New("a shared secret is taken only from a local file")
	default:
		return nil, fmt.Errorf("key type %q curve %q not supported", j.Kty, j.Crv)
	}
	if err != nil {
		return nil, err
	}
	if j.Alg != "" && j.Alg != k.Alg {
		return nil, fmt.Errorf("alg %q does not go with key type %q", j.Alg, j.Kty)
	}
	return k, nil
}

func rsaKey(j *jwk) (crypto.PublicKey, error) {
	n, err := b64(j.N, 0)
	if err != nil {
		return nil, err
	}
	e, err := b64(j.E, 0)
	if err != nil || len(e) > 4 {
		return nil, errors.New("bad RSA exponent")
	}
	pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
	if pub.N.BitLen() < 2048 || pub.N.BitLen() > 8192 || pub.E < 3 || pub.E%2 == 0 {
		return nil, fmt.Errorf("RSA key of %d bits or exponent %d refused", pub.N.BitLen(), pub.E)
	}
	return pub, nil
}

func ecKey(j *jwk) (crypto.PublicKey, error) {
	x, err := coordinate(j.X)
	if err != nil {
		return nil, err
	}
	y, err := coordinate(j.Y)
	if err != nil {
		return nil, err
	}
	// The uncompressed point (SEC 1 §2.3.3), which ecdsa.ParseUncompressedPublicKey checks is on the curve.
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
	if err != nil {
		return nil, fmt.Errorf("EC point: %w", err)
	}
	return pub, nil
}

// coordinate decodes a P-256 coordinate. RFC 7518 §6.2.1.2 wants its full
// 32 bytes, but issuers that write the integer without its leading zero
// bytes are common (keycloak/keycloak#14933, PyJWT's to_jwk, certbot/josepy#109),
// so a shorter one is padded on the left: only the true point is on the curve,
// which ecdsa.ParseUncompressedPublicKey checks.
func coordinate(s string) ([]byte, error) {
	b, err := b64(s, 0)
	if err != nil || len(b) > 32 {
		return nil, errors.New("bad base64url member")
	}
	return append(make([]byte, 32-len(b), 32), b...), nil
}

// b64 decodes a base64url member; size, when not 0, is its exact length.
func b64(s string, size int) ([]byte, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) == 0 || size > 0 && len(b) != size {
		return nil, errors.New("bad base64url member")
	}
	return b, nil
}
