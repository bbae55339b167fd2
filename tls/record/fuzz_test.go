package record

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"testing"
	"time"

	"golang.org/x/crypto/hkdf"
)

// Fixed secrets for the fuzz targets, so that corpus entries stay valid
// records from one run to the next.
var (
	fuzzClientSecret = bytes.Repeat([]byte{0x11}, 32)
	fuzzServerSecret = bytes.Repeat([]byte{0x22}, 32)
)

func fuzzStates(t testing.TB) (*State, *State) {
	s, err := New(TLS_AES_128_GCM_SHA256, fuzzClientSecret, fuzzServerSecret)
	if err != nil {
		t.Fatal(err)
	}
	return s, clientView(t, TLS_AES_128_GCM_SHA256, fuzzClientSecret, fuzzServerSecret)
}

// referenceAEAD is an AES-128-GCM opener for the client's first
// generation, written from RFC 8446 §7.1 and §7.3 without this package's
// key schedule (x/crypto's HKDF, the label built here).
func referenceAEAD(t testing.TB, secret []byte) (cipher.AEAD, []byte) {
	label := func(l string, n int) []byte {
		info := []byte{byte(n >> 8), byte(n), byte(len("tls13 " + l))}
		info = append(append(info, "tls13 "+l...), 0)
		out := make([]byte, n)
		if _, err := io.ReadFull(hkdf.Expand(sha256.New, secret, info), out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	block, err := aes.NewCipher(label("key", 16))
	if err != nil {
		t.Fatal(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	return aead, label("iv", 12)
}

// FuzzOpen feeds arbitrary bytes to a fresh server State. Open must not
// panic, must consume only whole records, and every byte of plaintext it
// returns must come from records that authenticate under the client's
// key: a reference opener checks each consumed record until the first
// KeyUpdate (after which the key changes).
func FuzzOpen(f *testing.F) {
	_, cv := fuzzStates(f)
	f.Add(cv.Seal(nil, []byte("hello")))                                         // one valid record
	f.Add(append(cv.Seal(nil, []byte("a")), cv.Seal(nil, message(20000, 1))...)) // three records, one full
	f.Add(cv.sealKeyUpdate(nil, true))                                           // a KeyUpdate
	f.Add(sealInner(cv, nil, 23, []byte{24, 0, typeHandshake}))                  // half a KeyUpdate
	f.Add(sealInner(cv, nil, 23, make([]byte, 30)))                              // all-zero inner plaintext
	f.Add(cv.SealAlert(nil, AlertCloseNotify))                                   // close_notify
	f.Add([]byte{20, 3, 3, 0, 1, 1})                                             // change_cipher_spec
	f.Add([]byte{23, 3, 3, 0x41, 0x01})                                          // oversized header
	f.Add([]byte{23, 3, 3, 0, 17, 1, 2, 3})                                      // incomplete
	f.Add(sealInner(cv, nil, 23, []byte{4, 0, 0, 1, 0, typeHandshake}))          // NewSessionTicket from a client
	f.Fuzz(func(t *testing.T, in []byte) {
		s, _ := fuzzStates(t)
		pristine := bytes.Clone(in)
		plain, used, err := s.Open(in)
		if used < 0 || used > len(in) || len(plain) > used {
			t.Fatalf("used %d, plain %d, input %d", used, len(plain), len(in))
		}
		aead, iv := referenceAEAD(t, fuzzClientSecret)
		var want []byte
		for seq, off := uint64(0), 0; off < used; seq++ {
			n := headerLen + bodyLen(pristine[off:])
			rec := pristine[off : off+n]
			nonce := bytes.Clone(iv)
			for i := 0; i < 8; i++ {
				nonce[11-i] ^= byte(seq >> (8 * i))
			}
			inner, aerr := aead.Open(nil, nonce, rec[headerLen:], rec[:headerLen])
			if aerr != nil {
				t.Fatalf("record %d at %d was consumed but does not authenticate", seq, off)
			}
			inner = bytes.TrimRight(inner, "\x00")
			if inner[len(inner)-1] == typeHandshake {
				return // keys may change from here on
			}
			if inner[len(inner)-1] == typeApplicationData {
				want = append(want, inner[:len(inner)-1]...)
			}
			off += n
		}
		if !bytes.Equal(plain, want) {
			t.Fatalf("Open returned %d bytes, the authenticated records hold %d", len(plain), len(want))
		}
		if err == nil && used < len(in) && len(in)-used >= MaxRecord {
			t.Fatalf("%d bytes left unconsumed without an error: more than a record", len(in)-used)
		}
	})
}

// FuzzOpenSplit seals data into records of sizes chosen by the fuzzer
// (a size byte of 0xff puts a KeyUpdate there), then feeds the stream
// whole to one State and cut into pieces at points chosen by the fuzzer to
// another: both give back data exactly.
func FuzzOpenSplit(f *testing.F) {
	f.Add([]byte("hello, world"), []byte{3, 0, 7})                  // three records, one empty
	f.Add(message(40000, 2), []byte{0xff, 200, 0xff, 0xff, 1})      // KeyUpdates between records, the rest in full records
	f.Add([]byte{}, []byte{0xff})                                   // a KeyUpdate alone
	f.Add(message(300, 5), []byte{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}) // one-byte pieces
	f.Fuzz(func(t *testing.T, data, cuts []byte) {
		if len(cuts) > 64 {
			cuts = cuts[:64]
		}
		s1, cv := fuzzStates(t)
		s2, _ := fuzzStates(t)
		var stream []byte
		rest := data
		for _, c := range cuts {
			if c == 0xff {
				stream = cv.sealKeyUpdate(stream, true)
				continue
			}
			n := min(len(rest), int(c)*64)
			stream = cv.Seal(stream, rest[:n])
			if n == 0 {
				stream = sealInner(cv, stream, 23, []byte{typeApplicationData})
			}
			rest = rest[n:]
		}
		stream = cv.Seal(stream, rest)
		whole, used, err := s1.Open(bytes.Clone(stream))
		if err != nil || used != len(stream) || !bytes.Equal(whole, data) {
			t.Fatalf("whole: %d of %d bytes, used %d of %d, %v", len(whole), len(data), used, len(stream), err)
		}
		var got, pend []byte
		off := 0
		for i := 0; off < len(stream); i++ {
			n := len(stream) - off
			if len(cuts) > 0 {
				n = min(n, 1+int(cuts[i%len(cuts)])*int(cuts[(i+1)%len(cuts)]))
			}
			pend = append(pend, stream[off:off+n]...)
			off += n
			plain, used, err := s2.Open(pend)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, plain...)
			pend = append(pend[:0], pend[used:]...)
		}
		if len(pend) != 0 || !bytes.Equal(got, data) {
			t.Fatalf("in pieces: %d of %d bytes, %d left over", len(got), len(data), len(pend))
		}
	})
}

// FuzzUnmarshal: UnmarshalBinary never panics; what it accepts marshals
// back to the same bytes and can Open and Seal.
func FuzzUnmarshal(f *testing.F) {
	for _, suite := range suites {
		s, cv := statePair(f, suite)
		s.Open(sealInner(cv, cv.sealKeyUpdate(nil, true), 23, []byte{24, 0, 0, typeHandshake}))
		b, _ := s.MarshalBinary()
		f.Add(b)      // a state with a pending answer and three bytes of a KeyUpdate
		f.Add(b[:20]) // truncated
	}
	f.Add([]byte{})              // empty
	f.Add([]byte{2, 0x13, 0x01}) // an unknown version
	f.Fuzz(func(t *testing.T, b []byte) {
		var s State
		if err := s.UnmarshalBinary(b); err != nil {
			return
		}
		again, err := s.MarshalBinary()
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("accepted, but marshals back to other bytes: %v", err)
		}
		out := s.Seal(nil, []byte("x"))
		if len(out) == 0 {
			t.Fatal("Seal wrote nothing")
		}
		s.Open(append([]byte{23, 3, 3, 0, 17}, make([]byte, 17)...))
	})
}

// FuzzKeyLog: Write never fails or panics, takes every byte, and the log
// stays within its bound; a well-formed pair of lines written after the
// fuzzer's bytes can be taken.
func FuzzKeyLog(f *testing.F) {
	r := hex.EncodeToString(randomOf(7))
	sec := hex.EncodeToString(bytes.Repeat([]byte{1}, 32))
	f.Add([]byte("CLIENT_TRAFFIC_SECRET_0 " + r + " " + sec + "\nSERVER_TRAFFIC_SECRET_0 " + r + " " + sec + "\n")) // a full entry
	f.Add([]byte("CLIENT_RANDOM " + r + " " + sec + sec[:32] + "\n"))                                               // TLS 1.2, ignored
	f.Add([]byte("CLIENT_TRAFFIC_SECRET_0 " + r + "\n"))                                                            // no secret
	f.Add([]byte("SERVER_TRAFFIC_SECRET_0  " + r + " " + sec))                                                      // two spaces, no newline
	f.Add([]byte("\r\n\n\x00 \xff"))                                                                                // junk
	f.Fuzz(func(t *testing.T, lines []byte) {
		k := NewKeyLog(time.Minute, 4, nil)
		if n, err := k.Write(lines); n != len(lines) || err != nil {
			t.Fatalf("Write: %d of %d, %v", n, len(lines), err)
		}
		if k.Len() > 4 {
			t.Fatalf("%d entries, bound 4", k.Len())
		}
		if len(lines) >= 32 {
			k.Take(lines[:32])
			k.Forget(lines[len(lines)-32:])
		}
		rnd := randomOf(9)
		if bytes.Contains(bytes.ToLower(lines), []byte(hex.EncodeToString(rnd))) {
			return // the input may have made that random ambiguous
		}
		k.Write(keyLogLine("CLIENT_TRAFFIC_SECRET_0", rnd, bytes.Repeat([]byte{2}, 32)))
		k.Write(keyLogLine("SERVER_TRAFFIC_SECRET_0", rnd, bytes.Repeat([]byte{3}, 32)))
		c, s, ok := k.Take(rnd)
		if !ok || !bytes.Equal(c, bytes.Repeat([]byte{2}, 32)) || !bytes.Equal(s, bytes.Repeat([]byte{3}, 32)) {
			t.Fatalf("a well-formed entry after the fuzz input was not taken: %v", ok)
		}
	})
}

// FuzzClientRandom: ClientRandom must not panic on any read log, and
// what it returns must be bytes 6..38 of the handshake bytes of the
// leading handshake records, gathered here the simple way.
func FuzzClientRandom(f *testing.F) {
	rnd := bytes.Repeat([]byte{0xab}, 32)
	hello := append([]byte{22, 3, 1, 0, 40, 1, 0, 0, 36, 3, 3}, rnd...)
	f.Add(hello)                                                                               // one record
	f.Add(append([]byte{22, 3, 1, 0, 1, 1}, append([]byte{22, 3, 1, 0, 37}, hello[6:]...)...)) // the type alone first
	f.Add(append([]byte{22, 3, 1, 0, 0}, hello...))                                            // an empty fragment first
	f.Add([]byte{22, 3, 1, 0xff, 0xff, 1, 0, 0})                                               // a record longer than the log
	f.Fuzz(func(t *testing.T, log []byte) {
		got, ok := ClientRandom(log)
		var hs []byte
		for rest := log; len(rest) >= 5 && rest[0] == 22 && len(hs) < 38; {
			n := min(len(rest)-5, int(rest[3])<<8|int(rest[4]))
			hs = append(hs, rest[5:5+n]...)
			rest = rest[5+n:]
		}
		want := len(hs) >= 38 && hs[0] == 1
		if ok != want || ok && !bytes.Equal(got, hs[6:38]) {
			t.Fatalf("ClientRandom(%x) = %x, %v; want %v", log, got, ok, want)
		}
	})
}
