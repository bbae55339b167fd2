package record

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"crypto/sha512"
	"errors"
	"fmt"

	"golang.org/x/crypto/chacha20poly1305"
)

// The TLS 1.3 cipher suites of RFC 8446 §B.4 that this package protects
// records with. Their values are those of crypto/tls.
const (
	TLS_AES_128_GCM_SHA256       uint16 = 0x1301
	TLS_AES_256_GCM_SHA384       uint16 = 0x1302
	TLS_CHACHA20_POLY1305_SHA256 uint16 = 0x1303
)

const (
	ivLen     = 12 // RFC 8446 §5.3: iv_length is max(8, N_MIN) = 12 for all three AEADs
	tagLen    = 16 // every suite of §B.4 has a 16-byte tag
	maxSecret = sha512.Size384
	maxKey    = 32
)

var errSuite = errors.New("tls record: unsupported cipher suite")

// suiteParams returns the hash length and key length of a suite (RFC 8446
// §B.4), or ok false for a suite this package does not handle.
func suiteParams(suite uint16) (hashLen, keyLen int, ok bool) {
	switch suite {
	case TLS_AES_128_GCM_SHA256:
		return sha256.Size, 16, true
	case TLS_AES_256_GCM_SHA384:
		return sha512.Size384, 32, true
	case TLS_CHACHA20_POLY1305_SHA256:
		return sha256.Size, chacha20poly1305.KeySize, true
	}
	return 0, 0, false
}

// expandLabel is HKDF-Expand-Label of RFC 8446 §7.1 with an empty context,
// written into dst (the length):
//
//	struct { uint16 length; opaque label<7..255> = "tls13 " + Label; opaque context<0..255>; } HkdfLabel;
//
// Every label here (key, iv, traffic upd) asks for at most one hash
// length, for which HKDF-Expand (RFC 5869 §2.3) is the front of
// T(1) = HMAC-Hash(secret, HkdfLabel || 0x01), and a traffic secret is one
// hash length, never longer than the hash's block. So the HMAC (RFC 2104)
// is computed here on the stack: crypto/hkdf builds an HMAC with two
// hashes and their pads on the heap for every call, and a takeover derives
// four of these.
func expandLabel(suite uint16, dst, secret []byte, label string) {
	hashLen, _, _ := suiteParams(suite)
	block := sha256.BlockSize
	if suite == TLS_AES_256_GCM_SHA384 {
		block = sha512.BlockSize
	}
	if len(dst) > hashLen || len(secret) > block || len(label) > maxLabel {
		// Only this package calls it, with the fixed lengths of its suites.
		panic(fmt.Sprintf("tls record: HKDF-Expand-Label %q of %d bytes from a %d-byte secret", label, len(dst), len(secret)))
	}
	// (K XOR ipad) || HkdfLabel || 0x01, then (K XOR opad) || inner hash.
	var in, out [sha512.BlockSize + 2 + 1 + 6 + maxLabel + 1 + 1]byte
	for i := range block {
		k := byte(0)
		if i < len(secret) {
			k = secret[i]
		}
		in[i], out[i] = k^0x36, k^0x5c
	}
	msg := append(in[:block], byte(len(dst)>>8), byte(len(dst)), byte(6+len(label)))
	msg = append(msg, "tls13 "...)
	msg = append(msg, label...)
	msg = append(msg, 0, 1) // zero-length context, then T(1)'s counter
	if suite == TLS_AES_256_GCM_SHA384 {
		inner := sha512.Sum384(msg)
		outer := sha512.Sum384(append(out[:block], inner[:]...))
		copy(dst, outer[:])
		clear(inner[:])
		clear(outer[:])
	} else {
		inner := sha256.Sum256(msg)
		outer := sha256.Sum256(append(out[:block], inner[:]...))
		copy(dst, outer[:])
		clear(inner[:])
		clear(outer[:])
	}
	clear(in[:])
	clear(out[:])
}

// maxLabel is the longest label expandLabel is given ("traffic upd").
const maxLabel = len("traffic upd")

// dir is one direction of the record layer: the traffic secret of the
// current generation, the iv derived from it (RFC 8446 §7.3), the
// sequence number (§5.3) and, while the connection is active, the AEAD.
// The key is not kept: build derives it from the secret when it makes the
// AEAD, which an idle connection does not hold either. Without the key's
// 32 bytes a direction, the State of an idle connection is 208 bytes
// instead of 272 (the 288-byte size class).
type dir struct {
	aead   cipher.AEAD // nil while idle; rebuilt from the secret on first use
	seq    uint64
	secret [maxSecret]byte
	iv     [ivLen]byte // XORed with seq around each AEAD call: the nonce needs no storage of its own (see xorSeq)
}

// setSecret installs a traffic secret: the iv is derived (§7.3), the
// sequence number restarts at 0 and the AEAD is rebuilt on next use.
func (d *dir) setSecret(suite uint16, secret []byte) {
	hashLen, _, _ := suiteParams(suite)
	*d = dir{}
	copy(d.secret[:hashLen], secret)
	expandLabel(suite, d.iv[:], secret, "iv")
}

// deriveKey writes the traffic key of the current secret (RFC 8446 §7.3,
// HKDF-Expand-Label(secret, "key", "", key_length)) into key and returns
// it cut to the suite's length; the caller clears it after use.
func (d *dir) deriveKey(suite uint16, key *[maxKey]byte) []byte {
	hashLen, keyLen, _ := suiteParams(suite)
	expandLabel(suite, key[:keyLen], d.secret[:hashLen], "key")
	return key[:keyLen]
}

// next moves to the next generation of traffic secret (RFC 8446 §7.2):
// application_traffic_secret_N+1 = HKDF-Expand-Label(secret_N, "traffic upd", "", Hash.length).
func (d *dir) next(suite uint16) {
	hashLen, _, _ := suiteParams(suite)
	var next [maxSecret]byte
	expandLabel(suite, next[:hashLen], d.secret[:hashLen], "traffic upd")
	d.setSecret(suite, next[:hashLen])
	clear(next[:])
}

// build makes the AEAD from the key it derives from the secret. The key
// lengths are fixed by the suite, so the constructors cannot fail.
func (d *dir) build(suite uint16) {
	var buf [maxKey]byte
	key := d.deriveKey(suite, &buf)
	var err error
	if suite == TLS_CHACHA20_POLY1305_SHA256 {
		d.aead, err = chacha20poly1305.New(key)
	} else {
		var block cipher.Block
		if block, err = aes.NewCipher(key); err == nil {
			d.aead, err = cipher.NewGCM(block)
		}
	}
	clear(buf[:])
	if err != nil {
		panic(fmt.Sprintf("tls record: building the AEAD: %v", err))
	}
}

// xorSeq turns iv into the per-record nonce of RFC 8446 §5.3 (the 64-bit
// sequence number in network order, left-padded to iv_length, XORed with
// the iv) and, called again, back into the iv. Working in place keeps the
// nonce out of the heap without 12 more bytes per direction; one direction
// is used by one goroutine at a time.
func (d *dir) xorSeq() {
	for i := 0; i < 8; i++ {
		d.iv[ivLen-1-i] ^= byte(d.seq >> (8 * i))
	}
}

// open authenticates and decrypts one complete record in place and returns
// its TLSInnerPlaintext (content, type, padding), aliasing rec.
func (d *dir) open(suite uint16, rec []byte) ([]byte, bool) {
	if d.aead == nil {
		d.build(suite)
	}
	d.xorSeq()
	inner, err := d.aead.Open(rec[headerLen:headerLen], d.iv[:], rec[headerLen:], rec[:headerLen])
	d.xorSeq()
	if err != nil {
		return nil, false
	}
	d.seq++
	return inner, true
}

// encrypt protects the record that starts at dst[start:]: five header bytes
// (filled here, with outer type outer) then the TLSInnerPlaintext. dst has
// room for the tag.
func (d *dir) encrypt(suite uint16, dst []byte, start int, outer byte) []byte {
	if d.aead == nil {
		d.build(suite)
	}
	n := len(dst) - start - headerLen + tagLen
	hdr := dst[start : start+headerLen]
	hdr[0], hdr[1], hdr[2], hdr[3], hdr[4] = outer, 3, 3, byte(n>>8), byte(n)
	body := dst[start+headerLen:]
	d.xorSeq()
	d.aead.Seal(body[:0], d.iv[:], body, hdr)
	d.xorSeq()
	d.seq++
	return dst[:start+headerLen+n]
}

// seal appends one record: content p of inner content type typ, no padding.
func (d *dir) seal(suite uint16, dst []byte, typ byte, p []byte) []byte {
	dst = grow(dst, headerLen+len(p)+1+tagLen)
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0)
	dst = append(dst, p...)
	dst = append(dst, typ)
	return d.encrypt(suite, dst, start, typeApplicationData)
}

// grow makes room for n more bytes, allocating only when cap is short.
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	nb := make([]byte, len(b), len(b)+n+len(b)/4)
	copy(nb, b)
	return nb
}
