package record

import (
	"bytes"
	"crypto/rand"
	"strings"
	"testing"
)

// handshakeRecords stands in for a handshake flight: a plaintext hello, the
// compatibility change_cipher_spec, and records under another key (the
// handshake keys), which do not authenticate under the application key.
func handshakeRecords(t *testing.T, suite uint16) []byte {
	hello := append([]byte{22, 3, 1, 0, 38, 1, 0, 0, 34, 3, 3}, make([]byte, 32)...)
	b := append(hello, 20, 3, 3, 0, 1, 1)
	other, _ := statePair(t, suite)
	b = other.write.seal(suite, b, typeHandshake, []byte("EncryptedExtensions, Certificate, CertificateVerify"))
	return other.write.seal(suite, b, typeHandshake, []byte("Finished"))
}

// TestResumeOwesAnswer: a KeyUpdate(update_requested) in the read log that
// the write log does not answer (crypto/tls had not processed it) leaves the
// answer pending; the write log's NewSessionTicket is followed.
func TestResumeOwesAnswer(t *testing.T) {
	for _, suite := range suites {
		s0, cv := statePair(t, suite)
		hashLen, _, _ := suiteParams(suite)
		cs, ss := bytes.Clone(cv.write.secret[:hashLen]), bytes.Clone(cv.read.secret[:hashLen])
		readLog := handshakeRecords(t, suite)
		readLog = cv.Seal(readLog, []byte("a"))
		readLog = cv.sealKeyUpdate(readLog, true)
		readLog = cv.Seal(readLog, []byte("b"))
		writeLog := handshakeRecords(t, suite)
		writeLog = s0.write.seal(suite, writeLog, typeHandshake, []byte{4, 0, 0, 3, 1, 2, 3}) // a NewSessionTicket
		writeLog = s0.Seal(writeLog, []byte("x"))
		s, tail, err := Resume(suite, cs, ss, readLog, writeLog)
		if err != nil {
			t.Fatal(err)
		}
		if len(tail) != 0 || !s.Pending() || s.write.seq != 2 || s.read.seq != 1 {
			t.Fatalf("suite %#x: tail %d, pending %v, write seq %d, read seq %d", suite, len(tail), s.Pending(), s.write.seq, s.read.seq)
		}
		cv.pending.Store(false)
		if _, _, err := cv.Open(writeLog[len(handshakeRecords(t, suite)):]); err != nil {
			t.Fatal(err)
		}
		plain, _, err := cv.Open(s.Seal(nil, []byte("y")))
		if err != nil || string(plain) != "y" || cv.read.seq != 1 {
			t.Fatalf("the client: %q, %v, read seq %d (want 1 after the answer)", plain, err, cv.read.seq)
		}
	}
}

// TestResumeRefuses: logs Resume must not take over.
func TestResumeRefuses(t *testing.T) {
	suite := TLS_AES_128_GCM_SHA256
	s0, cv := statePair(t, suite)
	cs, ss := bytes.Clone(cv.write.secret[:32]), bytes.Clone(cv.read.secret[:32])
	hs := handshakeRecords(t, suite)
	good := cv.Seal(bytes.Clone(hs), []byte("a"))
	written := s0.Seal(bytes.Clone(hs), []byte("x"))
	cases := []struct {
		name            string
		readLog, writeL []byte
		want            string
	}{
		{"write log ends inside a record", good, written[:len(written)-1], "inside a record"},
		{"plaintext alert in the handshake", append(bytes.Clone(hs), 21, 3, 3, 0, 2, 2, 40), written, "record type 21"},
		{"bad record after the first application record", append(bytes.Clone(good), written[len(hs):]...), written, "bad_record_mac"},
		{"client closed", cv.SealAlert(bytes.Clone(good), AlertCloseNotify), written, "EOF"},
		{"oversized handshake record", append(bytes.Clone(hs), 22, 3, 3, 0x41, 1), written, "handshake record"},
	}
	for _, tc := range cases {
		if _, _, err := Resume(suite, cs, ss, tc.readLog, tc.writeL); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	// Secrets of another handshake: every record of both logs looks like
	// a handshake record under them, and nothing would open at sequence 0.
	_, other := statePair(t, suite)
	ocs, oss := bytes.Clone(other.write.secret[:32]), bytes.Clone(other.read.secret[:32])
	if _, _, err := Resume(suite, ocs, oss, good, written); err == nil || !strings.Contains(err.Error(), "authenticates") {
		t.Errorf("another handshake's secrets: %v, want an error", err)
	}
	if _, _, err := Resume(suite, cs, ss, bytes.Clone(hs), written); err == nil || !strings.Contains(err.Error(), "authenticates") {
		t.Errorf("no application record in the read log: %v, want an error", err)
	}
	if _, _, err := Resume(0x1304, make([]byte, 32), make([]byte, 32), good, written); err == nil {
		t.Error("Resume took an unsupported suite")
	}
	before := bytes.Clone(good)
	if _, _, err := Resume(suite, cs, ss, good, written); err != nil || !bytes.Equal(before, good) {
		t.Fatalf("Resume: %v; log unchanged %v", err, bytes.Equal(before, good))
	}
}

// TestClientRandom: the random at bytes 11..43 of a ClientHello record,
// or gathered from its fragments; anything else is refused.
func TestClientRandom(t *testing.T) {
	rnd := make([]byte, 32)
	rand.Read(rnd)
	hello := append([]byte{22, 3, 1, 0, 200, 1, 0, 0, 196, 3, 3}, rnd...)
	if got, ok := ClientRandom(hello); !ok || !bytes.Equal(got, rnd) {
		t.Fatalf("ClientRandom: %x, %v", got, ok)
	}
	// The same ClientHello in fragments of one to 20 bytes (RFC 8446 §5.1).
	for _, k := range []int{1, 7, 20} {
		var frag []byte
		for body := hello[5:]; len(body) > 0; body = body[min(k, len(body)):] {
			frag = append(frag, 22, 3, 1, 0, byte(min(k, len(body))))
			frag = append(frag, body[:min(k, len(body))]...)
		}
		if got, ok := ClientRandom(frag); !ok || !bytes.Equal(got, rnd) {
			t.Errorf("fragments of %d: %x, %v", k, got, ok)
		}
	}
	for name, b := range map[string][]byte{
		"short":              hello[:42],
		"not handshake":      append([]byte{23}, hello[1:]...),
		"not hello":          append(append([]byte{}, hello[:5]...), append([]byte{2}, hello[6:]...)...),
		"record too short":   append(append([]byte{}, hello[:3]...), append([]byte{0, 37}, hello[5:42]...)...),
		"fragment then data": append(append(append([]byte{}, hello[:3]...), append([]byte{0, 20}, hello[5:25]...)...), 23, 3, 3, 0, 18),
		"empty":              nil,
	} {
		if _, ok := ClientRandom(b); ok {
			t.Errorf("%s: accepted", name)
		}
	}
}
