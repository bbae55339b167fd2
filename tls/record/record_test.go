package record

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"math"
	"testing"
)

var suites = []uint16{TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384, TLS_CHACHA20_POLY1305_SHA256}

// statePair returns a server State and the client's view of it, from
// random secrets.
func statePair(t testing.TB, suite uint16) (*State, *State) {
	t.Helper()
	hashLen, _, _ := suiteParams(suite)
	cs, ss := make([]byte, hashLen), make([]byte, hashLen)
	rand.Read(cs)
	rand.Read(ss)
	s, err := New(suite, cs, ss)
	if err != nil {
		t.Fatal(err)
	}
	return s, clientView(t, suite, cs, ss)
}

func alertOf(err error) int {
	var ae *AlertError
	if errors.As(err, &ae) {
		return int(ae.Alert)
	}
	return -1
}

// TestSuites: every suite of RFC 8446 §B.4 carries data both ways, across
// record boundaries and KeyUpdates in both directions; others are refused.
func TestSuites(t *testing.T) {
	for _, suite := range suites {
		s, cv := statePair(t, suite)
		for i, n := range []int{0, 1, 100, maxPlaintext, maxPlaintext + 1, 3*maxPlaintext + 7} {
			m := message(n, byte(i))
			plain, used, err := s.Open(cv.Seal(nil, m))
			if err != nil || !bytes.Equal(plain, m) {
				t.Fatalf("suite %#x, %d bytes from the client: %d bytes back, used %d, %v", suite, n, len(plain), used, err)
			}
			back := s.Seal(nil, m)
			if len(back) > n+s.Overhead(n) {
				t.Fatalf("suite %#x: Seal added %d bytes to %d, Overhead says at most %d", suite, len(back)-n, n, s.Overhead(n))
			}
			if plain, _, err = cv.Open(back); err != nil || !bytes.Equal(plain, m) {
				t.Fatalf("suite %#x, %d bytes from the server: %v", suite, n, err)
			}
			cv.pending.Store(false)
			if plain, _, err = s.Open(cv.sealKeyUpdate(nil, true)); err != nil || len(plain) != 0 || !s.Pending() {
				t.Fatalf("suite %#x: KeyUpdate: %v, pending %v", suite, err, s.Pending())
			}
		}
	}
	for _, bad := range []uint16{0x1304, 0x1305, 0xc02f, 0} {
		if _, err := New(bad, make([]byte, 32), make([]byte, 32)); !errors.Is(err, errSuite) {
			t.Errorf("New(%#x): %v, want the unsupported-suite error", bad, err)
		}
	}
	if _, err := New(TLS_AES_256_GCM_SHA384, make([]byte, 32), make([]byte, 32)); err == nil {
		t.Error("New accepted 32-byte secrets for a SHA-384 suite")
	}
}

// TestKeyUpdateFromClient: a client KeyUpdate(update_requested) switches
// the read key and makes one answer pending; Seal(nil) sends just the
// answer and switches the write key; data flows on under both new keys.
func TestKeyUpdateFromClient(t *testing.T) {
	s, cv := statePair(t, TLS_AES_128_GCM_SHA256)
	before := s.read.secret
	in := cv.Seal(nil, []byte("a"))
	in = cv.sealKeyUpdate(in, true)
	in = cv.Seal(in, []byte("b"))
	plain, used, err := s.Open(in)
	if err != nil || string(plain) != "ab" || used != len(in) {
		t.Fatalf("Open: %q %d %v", plain, used, err)
	}
	if s.read.secret == before || s.read.seq != 1 || !s.Pending() {
		t.Fatalf("after the KeyUpdate: key switched %v, read seq %d, pending %v", s.read.secret != before, s.read.seq, s.Pending())
	}
	answer := s.Seal(nil, nil)
	if len(answer) != keyUpdateRecord || s.Pending() || s.write.seq != 0 {
		t.Fatalf("Seal(nil): %d bytes, pending %v, write seq %d; want one KeyUpdate record of %d bytes", len(answer), s.Pending(), s.write.seq, keyUpdateRecord)
	}
	if len(s.Seal(nil, nil)) != 0 {
		t.Fatal("Seal(nil) without a pending answer sent something")
	}
	plain, _, err = cv.Open(append(answer, s.Seal(nil, []byte("c"))...))
	if err != nil || string(plain) != "c" || cv.Pending() {
		t.Fatalf("the client read %q, %v, pending %v: the answer must be update_not_requested", plain, err, cv.Pending())
	}
}

// TestKeyUpdateSplitAcrossRecords: RFC 8446 §5.1 lets a handshake message
// span records; a KeyUpdate in four pieces is one KeyUpdate.
func TestKeyUpdateSplitAcrossRecords(t *testing.T) {
	s, cv := statePair(t, TLS_CHACHA20_POLY1305_SHA256)
	var in []byte
	for _, piece := range [][]byte{{24}, {0, 0}, {1}, {1}} {
		in = sealInner(cv, in, typeApplicationData, append(piece, typeHandshake))
	}
	cv.write.next(cv.suite)
	in = cv.Seal(in, []byte("after"))
	plain, _, err := s.Open(in)
	if err != nil || string(plain) != "after" || !s.Pending() {
		t.Fatalf("Open: %q, %v, pending %v", plain, err, s.Pending())
	}
}

// TestKeyUpdateFlood: 10,000 KeyUpdate(update_requested) records in one
// buffer leave exactly one answer pending and a state of the same size.
func TestKeyUpdateFlood(t *testing.T) {
	s, cv := statePair(t, TLS_AES_128_GCM_SHA256)
	var in []byte
	for i := 0; i < 10000; i++ {
		in = cv.sealKeyUpdate(in, true)
	}
	in = cv.Seal(in, []byte("still here"))
	size, _ := s.MarshalBinary()
	plain, used, err := s.Open(in)
	if err != nil || used != len(in) || string(plain) != "still here" {
		t.Fatalf("Open: %q, used %d of %d, %v", plain, used, len(in), err)
	}
	after, _ := s.MarshalBinary()
	if len(after) != len(size) {
		t.Fatalf("the state grew from %d to %d bytes", len(size), len(after))
	}
	out := s.Seal(nil, nil)
	if len(out) != keyUpdateRecord || s.Pending() {
		t.Fatalf("after the flood Seal(nil) wrote %d bytes (want one KeyUpdate, %d), pending %v", len(out), keyUpdateRecord, s.Pending())
	}
	cv.pending.Store(false)
	if plain, _, err := cv.Open(append(out, s.Seal(nil, []byte("ok"))...)); err != nil || string(plain) != "ok" {
		t.Fatalf("client: %q, %v", plain, err)
	}
}

// TestWriteRekeysBeforeLimit: with the write sequence number near the
// limit, Seal sends its own KeyUpdate (update_not_requested) and switches
// keys, so a write key never protects more than writeLimit records.
func TestWriteRekeysBeforeLimit(t *testing.T) {
	s, cv := statePair(t, TLS_AES_256_GCM_SHA384)
	s.write.seq, cv.read.seq = writeLimit-3, writeLimit-3
	gen0 := s.write.secret
	out := s.Seal(nil, []byte("a")) // seq limit-3
	out = s.Seal(out, []byte("b"))  // seq limit-2, the last data record under this key
	if s.write.secret != gen0 {
		t.Fatal("rekeyed too early")
	}
	out = s.Seal(out, []byte("c")) // KeyUpdate at limit-1, then "c" at 0 under the next key
	if s.write.secret == gen0 || s.write.seq != 1 {
		t.Fatalf("no rekey at the limit: write seq %d", s.write.seq)
	}
	plain, _, err := cv.Open(out)
	if err != nil || string(plain) != "abc" || cv.Pending() {
		t.Fatalf("client: %q, %v, pending %v", plain, err, cv.Pending())
	}
	if cv.read.secret != s.write.secret {
		t.Fatal("the client did not follow the KeyUpdate")
	}
}

// TestReadSequenceWrap: a record that would need read sequence number 2^64
// is refused with an alert (RFC 8446 §5.3), the one before it is read.
func TestReadSequenceWrap(t *testing.T) {
	s, cv := statePair(t, TLS_AES_128_GCM_SHA256)
	s.read.seq, cv.write.seq = math.MaxUint64-1, math.MaxUint64-1
	// sealInner, not Seal: Seal would update its key before the limit.
	in := sealInner(cv, nil, 23, []byte("last\x17"))
	in = sealInner(cv, in, 23, []byte("wrap\x17"))
	plain, used, err := s.Open(in)
	if string(plain) != "last" || alertOf(err) != int(AlertUnexpectedMessage) || used != len(in)/2 {
		t.Fatalf("Open: %q, used %d, %v", plain, used, err)
	}
}

// TestOpenErrors: each violation gives its alert, leaves the state dead
// (the same error again), and hands back the data of the records before it.
func TestOpenErrors(t *testing.T) {
	hs := func(b ...byte) []byte { return append(b, typeHandshake) }
	cases := []struct {
		name  string
		in    func(cv *State) []byte
		alert uint8
	}{
		{"bad tag", func(cv *State) []byte { b := cv.Seal(nil, []byte("x")); b[len(b)-1] ^= 1; return b }, AlertBadRecordMAC},
		{"under the next key too early", func(cv *State) []byte { cv.write.next(cv.suite); return cv.Seal(nil, []byte("x")) }, AlertBadRecordMAC},
		{"replayed record", func(cv *State) []byte { b := cv.Seal(nil, []byte("x")); return append(b, b...) }, AlertBadRecordMAC},
		{"oversized header", func(*State) []byte { return []byte{23, 3, 3, 0x41, 0x01} }, AlertRecordOverflow},
		{"inner plaintext over 2^14+1", func(cv *State) []byte {
			return sealInner(cv, nil, 23, append(make([]byte, maxPlaintext+1), 23))
		}, AlertRecordOverflow},
		{"version 0x0304", func(cv *State) []byte { b := cv.Seal(nil, []byte("x")); b[2] = 4; return b }, AlertProtocolVersion},
		{"change_cipher_spec", func(*State) []byte { return []byte{20, 3, 3, 0, 1, 1} }, AlertUnexpectedMessage},
		{"all-zero inner plaintext", func(cv *State) []byte { return sealInner(cv, nil, 23, make([]byte, 40)) }, AlertUnexpectedMessage},
		{"inner content type 0x63", func(cv *State) []byte { return sealInner(cv, nil, 23, []byte{1, 0x63}) }, AlertUnexpectedMessage},
		{"NewSessionTicket from the client", func(cv *State) []byte { return sealInner(cv, nil, 23, hs(4, 0, 0, 1, 0)) }, AlertUnexpectedMessage},
		{"ClientHello after the handshake", func(cv *State) []byte { return sealInner(cv, nil, 23, hs(1, 0, 0, 2, 3, 3)) }, AlertUnexpectedMessage},
		{"Finished after the handshake", func(cv *State) []byte { return sealInner(cv, nil, 23, hs(20)) }, AlertUnexpectedMessage},
		{"KeyUpdate of 0 bytes", func(cv *State) []byte { return sealInner(cv, nil, 23, hs(24, 0, 0, 0)) }, AlertDecodeError},
		{"KeyUpdate of 2^24-1 bytes", func(cv *State) []byte { return sealInner(cv, nil, 23, hs(24, 255, 255, 255)) }, AlertDecodeError},
		{"KeyUpdate request_update 2", func(cv *State) []byte { return sealInner(cv, nil, 23, hs(24, 0, 0, 1, 2)) }, AlertIllegalParameter},
		{"KeyUpdate request_update 255", func(cv *State) []byte { return sealInner(cv, nil, 23, hs(24, 0, 0, 1, 255)) }, AlertIllegalParameter},
		{"two KeyUpdates in one record", func(cv *State) []byte { return sealInner(cv, nil, 23, hs(24, 0, 0, 1, 0, 24, 0, 0, 1, 0)) }, AlertUnexpectedMessage},
		{"handshake split, then application data", func(cv *State) []byte {
			b := sealInner(cv, nil, 23, hs(24, 0, 0))
			return cv.Seal(b, []byte("x"))
		}, AlertUnexpectedMessage},
		{"handshake split, then an alert", func(cv *State) []byte {
			b := sealInner(cv, nil, 23, hs(24))
			return sealInner(cv, b, 23, []byte{1, 0, typeAlert})
		}, AlertUnexpectedMessage},
		{"zero-length handshake record", func(cv *State) []byte { return sealInner(cv, nil, 23, hs()) }, AlertUnexpectedMessage},
		{"alert of 1 byte", func(cv *State) []byte { return sealInner(cv, nil, 23, []byte{0, typeAlert}) }, AlertUnexpectedMessage},
	}
	for _, tc := range cases {
		s, cv := statePair(t, TLS_AES_128_GCM_SHA256)
		in := cv.Seal(nil, []byte("before"))
		in = append(in, tc.in(cv)...)
		plain, _, err := s.Open(in)
		if alertOf(err) != int(tc.alert) {
			t.Errorf("%s: %v, want alert %d", tc.name, err, tc.alert)
			continue
		}
		if !bytes.HasPrefix(plain, []byte("before")) || len(plain) > len("beforex") {
			t.Errorf("%s: the data before the bad record came back as %q", tc.name, plain)
		}
		if _, _, again := s.Open(cv.Seal(nil, []byte("more"))); again != err {
			t.Errorf("%s: the state is not dead: next Open %v", tc.name, again)
		}
		if _, err := s.MarshalBinary(); err == nil {
			t.Errorf("%s: a dead state was marshalled", tc.name)
		}
	}
}

// TestOpenIncomplete: an incomplete record is not an error; used stops
// before it, and the rest completes it.
func TestOpenIncomplete(t *testing.T) {
	s, cv := statePair(t, TLS_AES_128_GCM_SHA256)
	a := cv.Seal(nil, []byte("first"))
	b := cv.Seal(nil, []byte("second"))
	for cut := 0; cut < len(b); cut++ {
		s2, _ := statePair(t, TLS_AES_128_GCM_SHA256)
		*s2 = State{read: s.read, write: s.write, suite: s.suite}
		in := append(bytes.Clone(a), b[:cut]...)
		plain, used, err := s2.Open(in)
		if err != nil || used != len(a) || string(plain) != "first" {
			t.Fatalf("cut %d: %q, used %d, %v", cut, plain, used, err)
		}
		plain, used, err = s2.Open(append(in[used:], b[cut:]...))
		if err != nil || used != len(b) || string(plain) != "second" {
			t.Fatalf("cut %d, completed: %q, used %d, %v", cut, plain, used, err)
		}
	}
}

// TestCloseNotifyAndPeerAlerts: close_notify gives the data before it and
// io.EOF for ever; user_canceled is dropped (as crypto/tls does); any other
// alert from the client is a *PeerAlertError naming it.
func TestCloseNotifyAndPeerAlerts(t *testing.T) {
	s, cv := statePair(t, TLS_AES_128_GCM_SHA256)
	in := cv.Seal(nil, []byte("bye"))
	in = cv.SealAlert(in, AlertUserCanceled)
	in = cv.SealAlert(in, AlertCloseNotify)
	tail := cv.Seal(nil, []byte("ignored"))
	plain, used, err := s.Open(append(bytes.Clone(in), tail...))
	if err != io.EOF || string(plain) != "bye" || used != len(in) {
		t.Fatalf("Open: %q, used %d, %v", plain, used, err)
	}
	if _, _, err := s.Open(tail); err != io.EOF {
		t.Fatalf("after close_notify: %v", err)
	}
	if b, err := s.MarshalBinary(); err != nil || b[3]&flagClosed == 0 {
		t.Fatalf("a closed state marshals with the closed flag: %v", err)
	}
	s, cv = statePair(t, TLS_AES_128_GCM_SHA256)
	_, _, err = s.Open(cv.SealAlert(nil, 42))
	var pa *PeerAlertError
	if !errors.As(err, &pa) || pa.Alert != 42 {
		t.Fatalf("fatal alert: %v", err)
	}
}

// TestSealAlertLevels: close_notify is sent at warning level, others fatal.
func TestSealAlertLevels(t *testing.T) {
	for _, tc := range []struct{ alert, level uint8 }{{AlertCloseNotify, 1}, {AlertBadRecordMAC, 2}, {AlertUnexpectedMessage, 2}} {
		s, cv := statePair(t, TLS_AES_128_GCM_SHA256)
		rec := s.SealAlert(nil, tc.alert)
		inner, ok := cv.read.open(cv.suite, rec)
		if !ok || !bytes.Equal(inner, []byte{tc.level, tc.alert, typeAlert}) {
			t.Errorf("alert %d: inner %v", tc.alert, inner)
		}
	}
}

// TestMarshalRoundTrip: a state with traffic, a generation change, a
// pending answer and half a handshake message goes through
// MarshalBinary/UnmarshalBinary and carries on; any corrupted byte or
// length is refused.
func TestMarshalRoundTrip(t *testing.T) {
	for _, suite := range suites {
		s, cv := statePair(t, suite)
		in := cv.Seal(nil, []byte("x"))
		in = cv.sealKeyUpdate(in, true)
		in = sealInner(cv, in, 23, []byte{24, 0, typeHandshake}) // half a KeyUpdate
		if _, _, err := s.Open(in); err != nil {
			t.Fatal(err)
		}
		if plain, _, err := cv.Open(s.Seal(nil, []byte("y"))); err != nil || string(plain) != "y" {
			t.Fatalf("client: %q, %v", plain, err)
		}
		b, err := s.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var u State
		if err := u.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		if again, _ := u.MarshalBinary(); !bytes.Equal(again, b) {
			t.Fatal("marshal, unmarshal, marshal changed the bytes")
		}
		cv.pending.Store(false)
		rest := sealInner(cv, nil, 23, []byte{0, 1, 1, typeHandshake}) // the rest, update_requested
		cv.write.next(cv.suite)
		rest = cv.Seal(rest, []byte("z"))
		plain, _, err := u.Open(rest)
		if err != nil || string(plain) != "z" || !u.Pending() {
			t.Fatalf("suite %#x after unmarshal: %q, %v, pending %v", suite, plain, err, u.Pending())
		}
		var w State
		if pb, err := u.MarshalBinary(); err != nil || w.UnmarshalBinary(pb) != nil || !w.Pending() {
			t.Fatalf("suite %#x: the pending answer did not survive marshalling", suite)
		}
		plain, _, err = cv.Open(u.Seal(nil, []byte("w")))
		if err != nil || string(plain) != "w" {
			t.Fatalf("suite %#x: the unmarshalled writer: %q, %v", suite, plain, err)
		}
		// Flipping the top bit of a byte is refused everywhere except in
		// the read sequence number and the low three bytes of the write
		// sequence number (still below the write limit).
		hashLen, keyLen, _ := suiteParams(suite)
		dirLen := hashLen + keyLen + ivLen + 8
		readSeq, writeSeq := 13+dirLen-8, 13+2*dirLen-8
		for i := range b {
			c := bytes.Clone(b)
			c[i] ^= 0x80
			var v State
			err := v.UnmarshalBinary(c)
			want := i >= readSeq && i < readSeq+8 || i >= writeSeq+5
			if (err == nil) != want {
				t.Errorf("suite %#x: byte %d flipped: %v", suite, i, err)
			}
		}
		for _, n := range []int{0, 1, len(b) - 1, len(b) + 1} {
			c := append(bytes.Clone(b), 0)[:n]
			var v State
			if v.UnmarshalBinary(c) == nil {
				t.Errorf("suite %#x: %d of %d bytes accepted", suite, n, len(b))
			}
		}
	}
}

// TestOpenSealConcurrent: one goroutine opens (KeyUpdate requests among
// the records) while another seals; they share only the pending flag
// (run with -race). The client reads everything sealed.
func TestOpenSealConcurrent(t *testing.T) {
	s, cv := statePair(t, TLS_AES_128_GCM_SHA256)
	var in []byte
	for i := 0; i < 200; i++ {
		in = cv.Seal(in, []byte("c"))
		if i%10 == 0 {
			in = cv.sealKeyUpdate(in, true)
		}
	}
	done := make(chan []byte)
	go func() {
		plain, _, err := s.Open(in)
		if err != nil {
			t.Error(err)
		}
		done <- plain
	}()
	var out []byte
	for i := 0; i < 200; i++ {
		out = s.Seal(out, []byte("s"))
	}
	if plain := <-done; len(plain) != 200 {
		t.Fatalf("Open gave %d bytes, want 200", len(plain))
	}
	out = s.Seal(out, nil)
	plain, _, err := cv.Open(out)
	if err != nil || len(plain) != 200 {
		t.Fatalf("client: %d bytes, %v", len(plain), err)
	}
}

// TestSealAlertAtLimit: an alert at the write limit goes under the next key.
func TestSealAlertAtLimit(t *testing.T) {
	s, cv := statePair(t, TLS_AES_128_GCM_SHA256)
	s.write.seq, cv.read.seq = writeLimit-1, writeLimit-1
	_, _, err := cv.Open(s.SealAlert(nil, AlertCloseNotify))
	if err != io.EOF || s.write.seq != 1 {
		t.Fatalf("client: %v, write seq %d", err, s.write.seq)
	}
}
