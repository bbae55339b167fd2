package record

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"testing"
)

// Sizes that cross the record boundaries: crypto/tls splits at 2^14 and,
// early in a connection, at smaller sizes (dynamic record sizing).
var diffSizes = []int{1, 100, 1369, 16383, 16384, 16385, 40000, 100}

// TestDifferentialClientRecords (a): the records a crypto/tls client writes
// give, through Open, the plaintext the crypto/tls server reads, whole and
// fed in random pieces.
func TestDifferentialClientRecords(t *testing.T) { forSuites(t, testDifferentialClientRecords) }

func testDifferentialClientRecords(t *testing.T, suite uint16) {
	p := newSuitePair(t, false, suite)
	_, mark := p.cw.logs()
	var sent []byte
	go func() {
		for i, n := range diffSizes {
			m := message(n, byte(i))
			if _, err := p.client.Write(m); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i, n := range diffSizes {
		sent = append(sent, message(n, byte(i))...)
	}
	got := make([]byte, len(sent))
	if _, err := io.ReadFull(p.server, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, sent) {
		t.Fatal("crypto/tls server read other bytes than were written")
	}
	_, wr := p.cw.logs()
	records := wr[len(mark):]

	whole := append([]byte(nil), records...)
	plain, used, err := p.serverState(t).Open(whole)
	if err != nil || used != len(records) {
		t.Fatalf("Open: used %d of %d, %v", used, len(records), err)
	}
	if !bytes.Equal(plain, got) {
		t.Fatalf("Open gave %d bytes, the crypto/tls server %d, and they differ", len(plain), len(got))
	}

	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 20; round++ {
		s := p.serverState(t)
		var out, pend []byte
		for off := 0; off < len(records); {
			n := min(len(records)-off, 1+rng.IntN(3000))
			pend = append(pend, records[off:off+n]...)
			off += n
			plain, used, err := s.Open(pend)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, plain...)
			pend = append(pend[:0], pend[used:]...)
		}
		if len(pend) != 0 || !bytes.Equal(out, got) {
			t.Fatalf("round %d: fed in pieces, Open gave %d bytes with %d left, want %d", round, len(out), len(pend), len(got))
		}
	}
}

// TestDifferentialServerRecords (b): what Seal writes, a crypto/tls client
// reads exactly: small, full and multi-record writes, an empty Seal, a
// KeyUpdate answer in front of data, and close_notify as EOF.
func TestDifferentialServerRecords(t *testing.T) { forSuites(t, testDifferentialServerRecords) }

func testDifferentialServerRecords(t *testing.T, suite uint16) {
	p := newSuitePair(t, false, suite)
	s := p.serverState(t)
	var want, wire []byte
	for i, n := range diffSizes {
		m := message(n, byte(i))
		want = append(want, m...)
		wire = s.Seal(wire, m)
	}
	wire = s.Seal(wire, nil)
	s.pending.Store(true) // as if the client had sent update_requested
	wire = s.Seal(wire, []byte("after our KeyUpdate"))
	want = append(want, "after our KeyUpdate"...)
	wire = s.SealAlert(wire, AlertCloseNotify)
	go func() {
		if _, err := p.sw.Conn.Write(wire); err != nil {
			t.Error(err)
		}
	}()
	got, err := io.ReadAll(p.client)
	if err != nil {
		t.Fatalf("crypto/tls client: %v after %d bytes", err, len(got))
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("crypto/tls client read %d bytes, want %d, or they differ", len(got), len(want))
	}
}

// TestCryptoTLSClientAnswersKeyUpdate: Go's client answers a server's
// KeyUpdate(update_requested) with its own KeyUpdate; Open follows it and
// reads the client's data under the next key, and the client reads ours
// under our next key.
func TestCryptoTLSClientAnswersKeyUpdate(t *testing.T) {
	forSuites(t, testCryptoTLSClientAnswersKeyUpdate)
}

func testCryptoTLSClientAnswersKeyUpdate(t *testing.T, suite uint16) {
	p := newSuitePair(t, false, suite)
	s := p.serverState(t)
	wire := s.sealKeyUpdate(nil, true)
	wire = s.Seal(wire, []byte("ping"))
	if _, err := p.sw.Conn.Write(wire); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(p.client, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("client read %q, %v", buf, err)
	}
	if _, err := p.client.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	got, err := openAll(s, p.sw.Conn, 4)
	if err != nil || string(got) != "pong" {
		t.Fatalf("Open: %q, %v", got, err)
	}
	first := clientView(t, p.suite, p.cs, p.ss)
	if s.read.secret == first.write.secret {
		t.Fatal("the read key did not move on with the client's KeyUpdate answer")
	}
}

// TestResumeAfterCryptoTLS (c): crypto/tls does the handshake, sends its
// session tickets and data both ways; Resume on the server's socket logs
// continues exactly where it stopped, with part of the next client record
// already read into the log.
func TestResumeAfterCryptoTLS(t *testing.T) { forSuites(t, testResumeAfterCryptoTLS) }

func testResumeAfterCryptoTLS(t *testing.T, suite uint16) {
	p := newSuitePair(t, true, suite)
	exchange(t, p, "hello from the client", "hello from the server")
	exchange(t, p, "second", "second answer, longer than the first")
	if _, err := p.client.Write([]byte("after the takeover")); err != nil {
		t.Fatal(err)
	}
	next := make([]byte, headerLen+len("after the takeover")+1+tagLen)
	if _, err := io.ReadFull(p.sw.Conn, next); err != nil {
		t.Fatal(err)
	}
	rd, wr := p.sw.logs()
	s, tail, err := Resume(p.suite, p.cs, p.ss, append(rd, next[:10]...), wr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(tail, next[:10]) {
		t.Fatalf("readTail %x, want %x", tail, next[:10])
	}
	if s.Pending() {
		t.Fatal("an answer is pending though the client requested none")
	}
	plain, used, err := s.Open(append(tail, next[10:]...))
	if err != nil || used != len(next) || string(plain) != "after the takeover" {
		t.Fatalf("Open after Resume: %q, %d, %v", plain, used, err)
	}
	out := s.Seal(nil, []byte("sealed after the takeover"))
	if _, err := p.sw.Conn.Write(out); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len("sealed after the takeover"))
	if _, err := io.ReadFull(p.client, got); err != nil || string(got) != "sealed after the takeover" {
		t.Fatalf("crypto/tls client read %q, %v", got, err)
	}
}

func exchange(t *testing.T, p *pair, c2s, s2c string) { exchangeTB(t, p, c2s, s2c) }

// exchangeTB sends c2s from the client and s2c back through crypto/tls.
func exchangeTB(t testing.TB, p *pair, c2s, s2c string) {
	t.Helper()
	if _, err := p.client.Write([]byte(c2s)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(c2s))
	if _, err := io.ReadFull(p.server, buf); err != nil || string(buf) != c2s {
		t.Fatalf("server read %q, %v", buf, err)
	}
	if _, err := p.server.Write([]byte(s2c)); err != nil {
		t.Fatal(err)
	}
	buf = make([]byte, len(s2c))
	if _, err := io.ReadFull(p.client, buf); err != nil || string(buf) != s2c {
		t.Fatalf("client read %q, %v", buf, err)
	}
}

// TestResumeFollowsKeyUpdates (c): after the handshake the client side is
// this package's client view; it sends a KeyUpdate(update_requested) that
// the crypto/tls server reads and answers. Resume on the server's logs
// follows both generations and continues: the next client record opens,
// the next sealed record is read by the client.
func TestResumeFollowsKeyUpdates(t *testing.T) { forSuites(t, testResumeFollowsKeyUpdates) }

func testResumeFollowsKeyUpdates(t *testing.T, suite uint16) {
	p := newSuitePair(t, true, suite)
	cv := clientView(t, p.suite, p.cs, p.ss)
	out := cv.Seal(nil, []byte("c1"))
	out = cv.sealKeyUpdate(out, true)
	out = cv.Seal(out, []byte("c1b"))
	if _, err := p.cw.Conn.Write(out); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(p.server, buf); err != nil || string(buf) != "c1c1b" {
		t.Fatalf("server read %q, %v", buf, err)
	}
	if _, err := p.server.Write([]byte("s1")); err != nil {
		t.Fatal(err)
	}
	got, err := openAll(cv, p.cw.Conn, 2)
	if err != nil || string(got) != "s1" {
		t.Fatalf("client view read %q, %v", got, err)
	}
	cv.pending.Store(false) // the server's answer asked for nothing
	rd, wr := p.sw.logs()
	s, tail, err := Resume(p.suite, p.cs, p.ss, rd, wr)
	if err != nil {
		t.Fatal(err)
	}
	if len(tail) != 0 || s.Pending() {
		t.Fatalf("tail %d bytes, pending %v: want none", len(tail), s.Pending())
	}
	if s.read.secret != cv.write.secret || s.read.seq != cv.write.seq || s.write.secret != cv.read.secret || s.write.seq != cv.read.seq {
		t.Fatalf("Resume reached read seq %d, write seq %d; the client is at %d, %d (or the keys differ)",
			s.read.seq, s.write.seq, cv.write.seq, cv.read.seq)
	}
	plain, _, err := s.Open(cv.Seal(nil, []byte("c2")))
	if err != nil || string(plain) != "c2" {
		t.Fatalf("Open after Resume: %q, %v", plain, err)
	}
	plain, _, err = cv.Open(s.Seal(nil, []byte("s2")))
	if err != nil || string(plain) != "s2" {
		t.Fatalf("client view after Resume: %q, %v", plain, err)
	}
}

// tamperCase is a record sent to both a crypto/tls server and Open.
type tamperCase struct {
	name string
	make func(rec []byte, cv *State) []byte
	// When crypto/tls and RFC 8446 disagree, Open follows the RFC: tlsAlert
	// is what crypto/tls does (-1: no alert), ours the alert Open reports.
	deviates      bool
	tlsAlert, our int
}

func tamperCases() []tamperCase {
	flip := func(i int) func([]byte, *State) []byte {
		return func(rec []byte, _ *State) []byte { rec[i/8] ^= 1 << (i % 8); return rec }
	}
	setLen := func(rec []byte, n int) []byte { rec[3], rec[4] = byte(n>>8), byte(n); return rec }
	inner := func(b ...byte) func([]byte, *State) []byte {
		return func(_ []byte, cv *State) []byte { return sealInner(cv, nil, typeApplicationData, b) }
	}
	var cs []tamperCase
	for i := 0; i < headerLen*8; i++ {
		cs = append(cs, tamperCase{name: "flip header bit", make: flip(i)})
	}
	for i := headerLen * 8; i < 27*8; i++ {
		cs = append(cs, tamperCase{name: "flip body bit", make: flip(i)})
	}
	cs = append(cs,
		tamperCase{name: "truncated, incomplete", make: func(rec []byte, _ *State) []byte { return rec[:len(rec)-1] }},
		tamperCase{name: "truncated, length fixed", make: func(rec []byte, _ *State) []byte { return setLen(rec[:len(rec)-1], len(rec)-headerLen-1) }},
		tamperCase{name: "shorter than a tag", make: func(rec []byte, _ *State) []byte { return setLen(rec[:headerLen+3], 3) }},
		tamperCase{name: "empty record", make: func(rec []byte, _ *State) []byte { return setLen(rec[:headerLen], 0) }},
		tamperCase{name: "oversized", make: func(rec []byte, _ *State) []byte {
			b := setLen(make([]byte, MaxRecord+1), maxCiphertext+1)
			b[0], b[1], b[2] = typeApplicationData, 3, 3
			return b
		}},
		tamperCase{name: "largest length, garbage", make: func(rec []byte, _ *State) []byte {
			b := setLen(make([]byte, MaxRecord), maxCiphertext)
			b[0], b[1], b[2] = typeApplicationData, 3, 3
			return b
		}},
		tamperCase{name: "outer type handshake", make: func(rec []byte, _ *State) []byte { rec[0] = typeHandshake; return rec }},
		tamperCase{name: "outer type alert", make: func(rec []byte, _ *State) []byte { rec[0] = typeAlert; return rec }},
		tamperCase{name: "protected outer type handshake", make: func(_ []byte, cv *State) []byte {
			return sealInner(cv, nil, typeHandshake, []byte("x\x17"))
		}},
		tamperCase{name: "version 0x0301", make: func(rec []byte, _ *State) []byte { rec[2] = 1; return rec }},
		tamperCase{name: "inner plaintext all zero", make: inner(0, 0, 0, 0)},
		tamperCase{name: "inner plaintext 2^14+2", make: inner(append(make([]byte, maxPlaintext+1), typeApplicationData)...)},
		tamperCase{name: "inner plaintext 2^14 content + padding", make: inner(append(append(make([]byte, maxPlaintext), typeApplicationData), 0)...)},
		tamperCase{name: "inner plaintext 2^14 content", make: inner(append(make([]byte, maxPlaintext), typeApplicationData)...)},
		tamperCase{name: "inner content type 24", make: inner('x', 24)},
		tamperCase{name: "zero-length application data", make: inner(typeApplicationData)},
		tamperCase{name: "padded application data", make: inner('o', 'k', typeApplicationData, 0, 0, 0)},
		tamperCase{name: "alert of 3 bytes", make: inner(2, 40, 0, typeAlert)},
		tamperCase{name: "fatal alert from the client", make: inner(2, 40, typeAlert)},
		tamperCase{name: "close_notify", make: inner(1, 0, typeAlert)},
		tamperCase{name: "zero-length handshake record", make: inner(typeHandshake)},
		tamperCase{name: "NewSessionTicket from the client", make: inner(4, 0, 0, 14, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0xaa, 0, 0, typeHandshake)},
		tamperCase{name: "KeyUpdate of 2 bytes", make: inner(24, 0, 0, 2, 0, 0, typeHandshake)},
		tamperCase{name: "KeyUpdate with data after it in its record", make: inner(24, 0, 0, 1, 0, 24, 0, 0, 1, 0, typeHandshake)},
		tamperCase{name: "KeyUpdate split, then application data", make: func(_ []byte, cv *State) []byte {
			b := sealInner(cv, nil, typeApplicationData, []byte{24, 0, typeHandshake})
			return sealInner(cv, b, typeApplicationData, []byte{'x', typeApplicationData})
		}},
		// RFC 8446 §4.6.3: illegal_parameter; crypto/tls fails to parse it: decode_error.
		tamperCase{name: "KeyUpdate request_update 2", make: inner(24, 0, 0, 1, 2, typeHandshake),
			deviates: true, tlsAlert: int(AlertDecodeError), our: int(AlertIllegalParameter)},
		// RFC 8446 §5: unexpected_message; crypto/tls drops a change_cipher_spec at any time in TLS 1.3.
		tamperCase{name: "plaintext change_cipher_spec", make: func([]byte, *State) []byte { return []byte{20, 3, 3, 0, 1, 1} },
			deviates: true, tlsAlert: -1, our: int(AlertUnexpectedMessage)},
		// RFC 8446 §5: a protected change_cipher_spec is unexpected_message; crypto/tls drops it.
		tamperCase{name: "protected change_cipher_spec", make: inner(1, typeChangeCipherSpec),
			deviates: true, tlsAlert: -1, our: int(AlertUnexpectedMessage)},
		// RFC 8446 §5.4: no non-zero octet -> unexpected_message; crypto/tls's
		// padding scan does not run on an empty inner plaintext and takes it as
		// empty application data.
		tamperCase{name: "empty inner plaintext", make: inner(),
			deviates: true, tlsAlert: -1, our: int(AlertUnexpectedMessage)},
	)
	return cs
}

// TestDifferentialTampered (d): mutated and crafted client records go to a
// crypto/tls server and to Open. Both reject the same ones with the same
// alert (read off the wire for crypto/tls), read the same data from the
// ones they accept, and where they differ, the table says why (RFC 8446).
func TestDifferentialTampered(t *testing.T) { forSuites(t, testDifferentialTampered) }

func testDifferentialTampered(t *testing.T, suite uint16) {
	for i, tc := range tamperCases() {
		p := newSuitePair(t, false, suite)
		p.cw.mu.Lock()
		p.cw.hold = true
		p.cw.mu.Unlock()
		if _, err := p.client.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		rec := bytes.Clone(p.cw.held.Bytes())
		bad := tc.make(rec, clientView(t, p.suite, p.cs, p.ss))

		tlsData, tlsAlert := crypoTLSVerdict(t, p, bad)
		ourData, ourAlert := openVerdict(p.serverState(t), bad)
		name := tc.name
		if tc.deviates {
			if tlsAlert != tc.tlsAlert || ourAlert != tc.our {
				t.Errorf("case %d %s: crypto/tls alert %d, Open %d; the table says %d and %d", i, name, tlsAlert, ourAlert, tc.tlsAlert, tc.our)
			}
			continue
		}
		if tlsAlert != ourAlert || !bytes.Equal(tlsData, ourData) {
			t.Errorf("case %d %s: crypto/tls alert %d data %q; Open alert %d data %q", i, name, tlsAlert, tlsData, ourAlert, ourData)
		}
		if name == "flip header bit" || name == "flip body bit" {
			// A longer length leaves an incomplete record (no verdict yet);
			// anything else must fail.
			if len(ourData) != 0 {
				t.Errorf("case %d %s: a flipped bit was accepted", i, name)
			}
		}
	}
}

// crypoTLSVerdict sends b to the crypto/tls server, then ends the client's
// writing, and returns what the server read and the alert it sent (-1 none).
func crypoTLSVerdict(t *testing.T, p *pair, b []byte) ([]byte, int) {
	t.Helper()
	if _, err := p.cw.Conn.Write(b); err != nil {
		t.Fatal(err)
	}
	p.cw.Conn.(*net.TCPConn).CloseWrite()
	data, _ := io.ReadAll(p.server)
	p.sw.Conn.Close()
	got, err := openAll(clientView(t, p.suite, p.cs, p.ss), p.cw.Conn, 1)
	if len(got) != 0 {
		t.Fatalf("the server sent data %q", got)
	}
	var pa *PeerAlertError
	if errors.As(err, &pa) {
		return data, int(pa.Alert)
	}
	return data, -1
}

// openVerdict is the same for Open: the data and the alert it reports, -1
// for none (io.EOF after close_notify, or an incomplete record). A fatal
// alert from the client sends nothing back, as in crypto/tls.
func openVerdict(s *State, b []byte) ([]byte, int) {
	plain, _, err := s.Open(b)
	var ae *AlertError
	if errors.As(err, &ae) {
		return plain, int(ae.Alert)
	}
	return plain, -1
}

// TestResumeKeepingUndelivered: crypto/tls read a record of which the
// application took only a part (a client's request often comes with its
// Finished); ResumeKeeping hands back exactly what was not delivered.
func TestResumeKeepingUndelivered(t *testing.T) { forSuites(t, testResumeKeepingUndelivered) }

func testResumeKeepingUndelivered(t *testing.T, suite uint16) {
	p := newSuitePair(t, true, suite)
	const first, second = "GET / HTTP/1.1\r\n", "Host: edge.test\r\n\r\n"
	if _, err := p.client.Write([]byte(first)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.client.Write([]byte(second)); err != nil {
		t.Fatal(err)
	}
	// 20 bytes: crypto/tls must read the second record whole to deliver them.
	buf := make([]byte, 20)
	if _, err := io.ReadFull(p.server, buf); err != nil || string(buf) != (first + second)[:20] {
		t.Fatalf("server read %q, %v", buf, err)
	}
	rd, wr := p.sw.logs()
	s, undelivered, tail, err := ResumeKeeping(p.suite, p.cs, p.ss, rd, wr, 20)
	if err != nil || len(tail) != 0 || string(undelivered) != (first + second)[20:] {
		t.Fatalf("ResumeKeeping: undelivered %q, tail %d, %v", undelivered, len(tail), err)
	}
	if _, _, _, err := ResumeKeeping(p.suite, p.cs, p.ss, rd, wr, len(first+second)+1); err == nil {
		t.Fatal("more delivered than read was accepted")
	}
	const answer = "HTTP/1.1 101 Switching Protocols\r\n\r\n"
	if _, err := p.sw.Conn.Write(s.Seal(nil, []byte(answer))); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(answer))
	if _, err := io.ReadFull(p.client, got); err != nil || string(got) != answer {
		t.Fatalf("client read %q, %v", got, err)
	}
}

// forSuites runs a differential test once per suite of RFC 8446 §B.4,
// with crypto/tls negotiating that suite.
func forSuites(t *testing.T, f func(*testing.T, uint16)) {
	for _, suite := range suites {
		t.Run(fmt.Sprintf("%#04x", suite), func(t *testing.T) { f(t, suite) })
	}
}
