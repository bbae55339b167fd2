package fleet

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/edgelb/edge/internal/consul"
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
//	ad = "edge-sealed-v1" 0x00 path 0x00 flags[8, big-endian]
//
// The version, the entry's KV path and its Flags (the time of the last
// rotation) are associated data: a sealed value cannot be moved to another
// path, relabelled as another version, or given another rotation time
// (which would make every edge rotate at once, or never). The nonce is
// random: a fleet writes one value per rotation, far from GCM's 2^32
// random-nonce bound (NIST SP 800-38D §8.3). The seal key is a file on
// each host of the fleet (tls.session_tickets.consul_seal_key_file),
// never in Consul. A reader of the entry alone learns nothing of the keys;
// a writer without the seal key can only make the entry unusable (edges
// then keep the keys they have, and resumption across edges stops), or
// put back a value the fleet sealed before, not make an edge take keys of
// theirs.

// sealVersion names the format; a value of another version is refused and
// never overwritten (an edge newer than this one wrote it).
const sealVersion = "edge-sealed-v1"

var (
	sealedPrefix = []byte(sealVersion + " ")
	// sealedFamily is what every version of a sealed value starts with.
	sealedFamily = []byte("edge-sealed-v")
)

func newSealer(key []byte) cipher.AEAD {
	b, err := aes.NewCipher(key)
	if err != nil {
		panic(fmt.Sprintf("fleet: seal key: %v", err)) // conf checks its length
	}
	g, err := cipher.NewGCM(b)
	if err != nil {
		panic(fmt.Sprintf("fleet: seal key: %v", err))
	}
	return g
}

// sealAD is the associated data of the entry at path with these Flags.
func sealAD(path string, flags uint64) []byte {
	ad := make([]byte, 0, len(sealVersion)+1+len(path)+1+8)
	ad = append(ad, sealVersion...)
	ad = append(ad, 0)
	ad = append(ad, path...)
	ad = append(ad, 0)
	return binary.BigEndian.AppendUint64(ad, flags)
}

// sealEntry seals plain for the entry at path written with flags.
func sealEntry(a cipher.AEAD, path string, flags uint64, plain []byte) []byte {
	nonce := make([]byte, a.NonceSize(), a.NonceSize()+len(plain)+a.Overhead())
	_, _ = rand.Read(nonce)
	ct := a.Seal(nonce, nonce, plain, sealAD(path, flags))
	out := make([]byte, 0, len(sealedPrefix)+base64.StdEncoding.EncodedLen(len(ct))+1)
	out = append(out, sealedPrefix...)
	out = base64.StdEncoding.AppendEncode(out, ct)
	return append(out, '\n')
}

// Why an entry is refused (RefusedEntryError.Why, and the why label of
// the metric that counts them).
const (
	// RefusedUnopened: sealed, but not with this edge's seal key, not for
	// this path or these Flags, or changed since.
	RefusedUnopened = "unopened"
	// RefusedUnsealed: written in the clear.
	RefusedUnsealed = "unsealed"
	// RefusedVersion: sealed in a version this edge does not know.
	RefusedVersion = "version"
	// RefusedOversized: over the entry's bound, refused unread.
	RefusedOversized = "oversized"
	// RefusedMalformed: opened, but not keys.
	RefusedMalformed = "malformed"
)

// RefusedEntryError is an entry that was read and refused: its keys are
// not used, and the keys in use stay. Consul being unreachable is not one.
type RefusedEntryError struct {
	Key string // the KV path
	Why string // RefusedUnopened, RefusedUnsealed, ...
	Err error
}

func (e *RefusedEntryError) Error() string {
	return fmt.Sprintf("ticket keys in consul kv %q: refused (%s): %v", e.Key, e.Why, e.Err)
}

// Unwrap returns the cause.
func (e *RefusedEntryError) Unwrap() error { return e.Err }

// RefusedWhy is Why: it lets a consumer (edgetls's status) tell a refused
// entry from an unreachable Consul without importing fleet.
func (e *RefusedEntryError) RefusedWhy() string { return e.Why }

// errUnsealed is an entry that is not sealed at all.
var errUnsealed = errors.New("not sealed: written in the clear, by an edge without consul_seal_key_file or by hand; its keys are not used, and the first edge to find it due rotates it into a sealed entry")

// openEntry opens the sealed value v of the entry at path, read with
// flags. A value over maxBytes (the bound its read was made with) is
// refused before it is decoded. Errors are *RefusedEntryError.
func openEntry(a cipher.AEAD, path string, flags uint64, v []byte, maxBytes int) ([]byte, error) {
	refuse := func(why string, err error) error { return &RefusedEntryError{Key: path, Why: why, Err: err} }
	if len(v) > maxBytes {
		return nil, refuse(RefusedOversized, fmt.Errorf("%d bytes, over %d: %w", len(v), maxBytes, consul.ErrResponseTooLarge))
	}
	v = bytes.TrimSpace(v)
	b64, ok := bytes.CutPrefix(v, sealedPrefix)
	switch {
	case !ok && bytes.HasPrefix(v, sealedFamily):
		return nil, refuse(RefusedVersion, fmt.Errorf("sealed in a version other than %s (an edge newer than this one wrote it); the entry stays as it is", sealVersion))
	case !ok:
		return nil, refuse(RefusedUnsealed, errUnsealed)
	}
	if base64.StdEncoding.DecodedLen(len(b64)) < a.NonceSize()+a.Overhead() {
		return nil, refuse(RefusedUnopened, errors.New("sealed value too short for a nonce and a sealed box; the entry stays as it is"))
	}
	ct, err := base64.StdEncoding.AppendDecode(nil, b64)
	if err != nil || len(ct) < a.NonceSize()+a.Overhead() {
		return nil, refuse(RefusedUnopened, errors.New("sealed value is no base64 of a nonce and a sealed box; the entry stays as it is"))
	}
	plain, err := a.Open(nil, ct[:a.NonceSize()], ct[a.NonceSize():], sealAD(path, flags))
	if err != nil {
		return nil, refuse(RefusedUnopened, errors.New("does not open with consul_seal_key_file: sealed with another key, for another path or rotation time, or changed; the entry stays as it is"))
	}
	return plain, nil
}
