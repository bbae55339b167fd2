package record

import (
	"bytes"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"hash"
	"testing"
)

// TestExpandLabelMatchesHKDF: the stack HMAC of expandLabel gives what
// crypto/hkdf gives for the HkdfLabel of RFC 8446 §7.1, for every suite,
// label and length this package derives, and for random secrets.
func TestExpandLabelMatchesHKDF(t *testing.T) {
	for _, suite := range suites {
		hashLen, keyLen, _ := suiteParams(suite)
		h := func() hash.Hash { return sha256.New() }
		if suite == TLS_AES_256_GCM_SHA384 {
			h = func() hash.Hash { return sha512.New384() }
		}
		for range 50 {
			secret := make([]byte, hashLen)
			rand.Read(secret)
			for _, c := range []struct {
				label string
				n     int
			}{{"key", keyLen}, {"iv", ivLen}, {"traffic upd", hashLen}} {
				info := []byte{byte(c.n >> 8), byte(c.n), byte(6 + len(c.label))}
				info = append(append(append(info, "tls13 "...), c.label...), 0)
				want, err := hkdf.Expand(h, secret, string(info), c.n)
				if err != nil {
					t.Fatal(err)
				}
				got := make([]byte, c.n)
				expandLabel(suite, got, secret, c.label)
				if !bytes.Equal(got, want) {
					t.Fatalf("suite %#04x %q: %x, crypto/hkdf %x", suite, c.label, got, want)
				}
			}
		}
	}
}

// TestExpandLabelAllocatesNothing: the takeover derives keys and ivs of
// both directions for every connection. SHA-384's Sum384 allocates inside
// crypto/sha512, so only the suites hashed with SHA-256 (the default AES
// and ChaCha20 ones) are held to none.
func TestExpandLabelAllocatesNothing(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("allocation counts are not meaningful under -race or -cover")
	}
	for _, suite := range []uint16{TLS_AES_128_GCM_SHA256, TLS_CHACHA20_POLY1305_SHA256} {
		var d dir
		secret := make([]byte, maxSecret)
		hashLen, _, _ := suiteParams(suite)
		if n := testing.AllocsPerRun(100, func() { d.setSecret(suite, secret[:hashLen]); d.next(suite) }); n != 0 {
			t.Errorf("suite %#04x: %.1f allocations per setSecret and next", suite, n)
		}
	}
}
