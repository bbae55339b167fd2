package discovery

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
)

// A sealed KV entry.
//
// The fleet's ticket keys in Consul KV are what decrypts every TLS 1.2
// session (a TLS 1.2 ticket travels in the clear and carries the
// session's master secret, RFC 5077 §4) and what lets a server resume a
// TLS 1.3 one. Consul ACLs that let an edge read the entry often let other
// services, or an operator's token, read it too. So with a seal key, the
// value is
//
//	"edge-sealed-v1 " base64( nonce[12] | AES-256-GCM(seal key, nonce, keys, ad) ) "\n"
//
// with ad = "edge sealed entry\x00" + the entry's KV path, so a sealed
// value cannot be moved to another path. The seal key is a file on each
// host of the fleet (tls.session_tickets.consul_seal_key_file), never in
// Consul. A reader of the entry alone learns nothing of the keys; a
// writer without the seal key can only make the entry unusable (edges
// then keep the keys they have, and resumption across edges stops), not
// make an edge take keys of theirs.

const sealedPrefix = "edge-sealed-v1 "

// maxSealed bounds a sealed value: the entry's bound in base64, and the
// prefix and nonce.
const maxSealed = MaxTicketKeysBytes*4/3 + 64

func newSealer(key []byte) cipher.AEAD {
	b, err := aes.NewCipher(key)
	if err != nil {
		panic(fmt.Sprintf("discovery: seal key: %v", err)) // conf checks its length
	}
	g, err := cipher.NewGCM(b)
	if err != nil {
		panic(fmt.Sprintf("discovery: seal key: %v", err))
	}
	return g
}

func sealAD(path string) []byte { return append([]byte("edge sealed entry\x00"), path...) }

// sealEntry seals plain for the entry at path.
func sealEntry(a cipher.AEAD, path string, plain []byte) []byte {
	nonce := make([]byte, a.NonceSize(), a.NonceSize()+len(plain)+a.Overhead())
	_, _ = rand.Read(nonce)
	ct := a.Seal(nonce, nonce, plain, sealAD(path))
	out := make([]byte, 0, len(sealedPrefix)+base64.StdEncoding.EncodedLen(len(ct))+1)
	out = append(out, sealedPrefix...)
	out = base64.StdEncoding.AppendEncode(out, ct)
	return append(out, '\n')
}

// errUnsealed is an entry that is not sealed at all.
var errUnsealed = errors.New("not sealed: written in the clear, by an edge without consul_seal_key_file or by hand (delete it once every edge has the seal key; the first to find it missing writes it sealed)")

// openEntry opens the sealed value v of the entry at path.
func openEntry(a cipher.AEAD, path string, v []byte) ([]byte, error) {
	if len(v) > maxSealed {
		return nil, fmt.Errorf("sealed value of %d bytes, over %d", len(v), maxSealed)
	}
	b64, ok := bytes.CutPrefix(bytes.TrimSpace(v), []byte(sealedPrefix))
	if !ok {
		return nil, errUnsealed
	}
	ct, err := base64.StdEncoding.AppendDecode(nil, b64)
	if err != nil || len(ct) < a.NonceSize()+a.Overhead() {
		return nil, errors.New("sealed value is no base64 of a nonce and a sealed box")
	}
	plain, err := a.Open(nil, ct[:a.NonceSize()], ct[a.NonceSize():], sealAD(path))
	if err != nil {
		return nil, errors.New("does not open with consul_seal_key_file: sealed with another key, for another path, or changed")
	}
	return plain, nil
}
