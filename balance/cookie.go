package balance

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
)

// cookieMACLen is how much of the HMAC-SHA256 a cookie carries: 128 bits is
// far beyond guessing range and keeps the value short (22 characters).
const cookieMACLen = 16

// cookieLen is the length of every valid cookie value; Pick rejects other
// lengths before hashing the string for the map lookup.
var cookieLen = base64.RawURLEncoding.EncodedLen(cookieMACLen)

// cookieValue computes the sticky-cookie value of backend id in pool under
// key. The value is a MAC, not an encoding of the ID or address: it cannot be
// forged without the key and names no address (unlike cookies that carry a
// backend address in clear). The domain prefix and length-prefixed fields
// keep values of one pool from being valid in another.
func cookieValue(key []byte, pool, id string) string {
	m := hmac.New(sha256.New, key)
	var n [8]byte
	m.Write([]byte("edge sticky v1\x00"))
	binary.BigEndian.PutUint64(n[:], uint64(len(pool)))
	m.Write(n[:])
	m.Write([]byte(pool))
	m.Write([]byte(id))
	sum := m.Sum(nil)
	return base64.RawURLEncoding.EncodeToString(sum[:cookieMACLen])
}

// randomKey returns a fresh 32-byte key for pools configured without one.
func randomKey() []byte {
	k := make([]byte, 32)
	rand.Read(k) // never fails (crypto/rand, Go 1.24+)
	return k
}
