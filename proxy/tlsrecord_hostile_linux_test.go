package proxy

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/edgelb/edge/proxy/internal/ready"
)

// fixedRandom is a tls.Config.Rand whose first 32 bytes, the ClientHello
// random (RFC 8446 §4.1.2), are chosen; the rest is crypto/rand.
type fixedRandom struct {
	random []byte
}

func (f *fixedRandom) Read(p []byte) (int, error) {
	if len(f.random) > 0 {
		n := copy(p, f.random)
		f.random = f.random[n:]
		return n, nil
	}
	return rand.Read(p)
}

// tls13WithRandom completes a TLS 1.3 handshake with edge whose
// ClientHello carries random.
func tls13WithRandom(t *testing.T, e *edge, random []byte) *tls.Conn {
	t.Helper()
	cfg := testkit.ClientTLS(e.certs, "edge.test")
	cfg.MinVersion = tls.VersionTLS13
	cfg.Rand = &fixedRandom{random: append([]byte(nil), random...)}
	c, err := tls.Dial("tcp", e.addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// askRaw sends one masked text frame on c and returns the payload of the
// frame that comes back.
func askRaw(t *testing.T, c net.Conn, br *bufio.Reader, msg string) string {
	t.Helper()
	if _, err := c.Write(testkit.MaskedFrame(0x1, []byte(msg))); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, p := testkit.ReadFrame(t, br)
	return string(p)
}

// TestRecordLayerSecretsOfAnotherHandshake: the client chooses its
// random, and the ClientHello carrying it crosses the network in the
// clear. A second client that reuses a victim's random, closes (its
// handshake log's end forgets the secrets logged under that random, the
// victim's among them) and then completes a handshake of its own leaves
// its secrets where the victim's connection looks for its own. The
// victim's takeover must not run on them: the attacker knows them, and
// every record edge sealed for the victim would be readable by it, and
// records it injects would reach the backend as the victim's. The
// connection must stay with crypto/tls and work.
func TestRecordLayerSecretsOfAnotherHandshake(t *testing.T) {
	e := recordEdge(t)
	random := make([]byte, 32)
	rand.Read(random)

	victim := tls13WithRandom(t, e, random)
	testkit.WaitFor(t, "the victim's secrets in the key log", func() bool { return e.rl.keys.Len() == 1 })

	first := tls13WithRandom(t, e, random)
	first.Close()
	testkit.WaitFor(t, "the key log to forget the random", func() bool { return e.rl.keys.Len() == 0 })
	tls13WithRandom(t, e, random) // kept open: its secrets stay in the log
	testkit.WaitFor(t, "the attacker's secrets in the key log", func() bool { return e.rl.keys.Len() == 1 })

	if _, err := io.WriteString(victim, testkit.RawUpgrade("/", "edge.test")); err != nil {
		t.Fatal(err)
	}
	victim.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := testkit.Read101(t, victim)
	if got := askRaw(t, victim, br, "mine"); got != "mine" {
		t.Fatalf("echo %q", got)
	}
	if owned, kept := e.srv.RecordLayerTakeovers(); owned != 0 || kept != 1 {
		t.Fatalf("takeovers: owned %d, kept %d; want 0, 1", owned, kept)
	}
}

// fragmentHello is a client conn whose first write, the ClientHello
// record, goes out as handshake records of at most frag body bytes each
// (RFC 8446 §5.1: a handshake message may span records).
type fragmentHello struct {
	net.Conn
	frag int
	done bool
}

func (f *fragmentHello) Write(p []byte) (int, error) {
	if f.done || len(p) < 5 || p[0] != 22 {
		return f.Conn.Write(p)
	}
	f.done = true
	end := 5 + (int(p[3])<<8 | int(p[4]))
	body := p[5:end]
	var out []byte
	for len(body) > 0 {
		k := min(len(body), f.frag)
		out = append(out, 22, p[1], p[2], byte(k>>8), byte(k))
		out = append(out, body[:k]...)
		body = body[k:]
	}
	out = append(out, p[end:]...)
	if _, err := f.Conn.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// TestRecordLayerFragmentedClientHello: a ClientHello split over several
// handshake records (legal, and accepted by crypto/tls) carries its random
// past the first record. The takeover must still find it, and the
// handshake's secrets must not stay behind in the key log once the
// connection is gone.
func TestRecordLayerFragmentedClientHello(t *testing.T) {
	e := recordEdge(t)
	for _, frag := range []int{10, 40} {
		tc, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		cfg := testkit.ClientTLS(e.certs, "edge.test")
		cfg.MinVersion = tls.VersionTLS13
		c := tls.Client(&fragmentHello{Conn: tc, frag: frag}, cfg)
		if _, err := io.WriteString(c, testkit.RawUpgrade("/", "edge.test")); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		br := testkit.Read101(t, c)
		if got := askRaw(t, c, br, "fragmented"); got != "fragmented" {
			t.Fatalf("echo %q", got)
		}
		c.Close()
		testkit.WaitFor(t, "the key log to be empty", func() bool { return e.rl.keys.Len() == 0 })
	}
	if owned, kept := e.srv.RecordLayerTakeovers(); owned != 2 || kept != 0 {
		t.Fatalf("takeovers: owned %d, kept %d; want 2, 0", owned, kept)
	}
}

// TestRecordLayerLargeClientHelloForgets: a ClientHello past the read
// log's bound (12 KiB of ALPN list, sent in records of one byte each: 6
// bytes of log a byte) stops the log before crypto/tls logs the
// handshake's secrets. The connection stays with crypto/tls, and once it
// is gone its secrets must be gone from the key log too, not left there
// until they age out.
func TestRecordLayerLargeClientHelloForgets(t *testing.T) {
	e := recordEdge(t)
	cfg := testkit.ClientTLS(e.certs, "edge.test")
	cfg.MinVersion = tls.VersionTLS13
	cfg.NextProtos = []string{"http/1.1"}
	for i := 0; len(cfg.NextProtos) < 48; i++ {
		cfg.NextProtos = append(cfg.NextProtos, strings.Repeat(string(rune('a'+i%26)), 250))
	}
	tc, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	c := tls.Client(&fragmentHello{Conn: tc, frag: 1}, cfg)
	defer c.Close()
	if _, err := io.WriteString(c, testkit.RawUpgrade("/", "edge.test")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := testkit.Read101(t, c)
	if got := askRaw(t, c, br, "large hello"); got != "large hello" {
		t.Fatalf("echo %q", got)
	}
	if owned, kept := e.srv.RecordLayerTakeovers(); owned != 0 || kept != 1 {
		t.Fatalf("takeovers: owned %d, kept %d; want 0, 1", owned, kept)
	}
	c.Close()
	testkit.WaitFor(t, "the key log to be empty", func() bool { return e.rl.keys.Len() == 0 })
}

// TestRecordLayerRefusedUpgradeDropsLog: an upgrade edge refuses (426
// for a version it does not speak, RFC 6455 §4.2.2) leaves the
// connection open for more requests; like a plain request it never
// leads to a takeover of this handshake's log, so its secrets must go
// at once, not when the keep-alive connection closes. A second upgrade
// on it still works, on crypto/tls.
func TestRecordLayerRefusedUpgradeDropsLog(t *testing.T) {
	e := recordEdge(t)
	cfg := testkit.ClientTLS(e.certs, "edge.test")
	cfg.MinVersion = tls.VersionTLS13
	c, err := tls.Dial("tcp", e.addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	bad := strings.Replace(testkit.RawUpgrade("/", "edge.test"), "Version: 13", "Version: 8", 1)
	if _, err := io.WriteString(c, bad); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired || resp.Close {
		t.Fatalf("status %d, close %v; want 426 on a kept-alive connection", resp.StatusCode, resp.Close)
	}
	testkit.WaitFor(t, "the refused upgrade's secrets to be dropped", func() bool { return e.rl.keys.Len() == 0 })
	if _, err := io.WriteString(c, testkit.RawUpgrade("/", "edge.test")); err != nil {
		t.Fatal(err)
	}
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("second upgrade: %v, %v", resp, err)
	}
	if got := askRaw(t, c, br, "again"); got != "again" {
		t.Fatalf("echo %q", got)
	}
}

// TestRecordLayerKeyLogEmpties: whatever a TLS connection did, once it
// is closed the key log holds nothing of it.
func TestRecordLayerKeyLogEmpties(t *testing.T) {
	e := recordEdge(t)
	tls13 := testkit.ClientTLS(e.certs, "edge.test")
	tls13.MinVersion = tls.VersionTLS13
	dial := func(cfg *tls.Config) *tls.Conn {
		c, err := tls.Dial("tcp", e.addr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	kinds := map[string]func(){
		"upgraded": func() {
			c := dial(tls13)
			io.WriteString(c, testkit.RawUpgrade("/", "edge.test"))
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			br := testkit.Read101(t, c)
			if got := askRaw(t, c, br, "x"); got != "x" {
				t.Fatalf("echo %q", got)
			}
			c.Close()
		},
		"plain request": func() {
			c := dial(tls13)
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: edge.test\r\n\r\n")
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
				t.Fatal(err)
			} else {
				resp.Body.Close()
			}
			c.Close()
		},
		"handshake only": func() { dial(tls13).Close() },
		"certificate refused by the client": func() {
			cfg := tls13.Clone()
			cfg.ServerName = "other.test"
			if c, err := tls.Dial("tcp", e.addr, cfg); err == nil {
				c.Close()
				t.Fatal("handshake with a wrong name succeeded")
			}
		},
		"TLS 1.2": func() {
			cfg := tls13.Clone()
			cfg.MinVersion, cfg.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
			c := dial(cfg)
			io.WriteString(c, testkit.RawUpgrade("/", "edge.test"))
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			testkit.Read101(t, c)
			c.Close()
		},
	}
	for name, run := range kinds {
		run()
		testkit.WaitFor(t, "an empty key log after: "+name, func() bool { return e.rl.keys.Len() == 0 })
	}
}

// heldConn holds what is written while hold is set, and sends it in one
// write at flush: a client whose Finished, request and frames leave in
// one flight.
type heldConn struct {
	net.Conn
	hold bool
	pass int // writes that go out before holding starts
	buf  []byte
}

func (h *heldConn) Write(p []byte) (int, error) {
	if h.hold && h.pass > 0 {
		h.pass--
		return h.Conn.Write(p)
	}
	if h.hold {
		h.buf = append(h.buf, p...)
		return len(p), nil
	}
	return h.Conn.Write(p)
}

func (h *heldConn) flush(t *testing.T) {
	t.Helper()
	h.hold = false
	if _, err := h.Conn.Write(h.buf); err != nil {
		t.Fatal(err)
	}
	h.buf = nil
}

// heldClient is a TLS 1.3 client over a heldConn, with its key log.
func heldClient(t *testing.T, e *edge) (*tls.Conn, *heldConn, *bytes.Buffer) {
	t.Helper()
	tc, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	h := &heldConn{Conn: tc}
	var keyLog bytes.Buffer
	cfg := testkit.ClientTLS(e.certs, "edge.test")
	cfg.MinVersion = tls.VersionTLS13
	cfg.CipherSuites = nil
	cfg.KeyLogWriter = &keyLog
	c := tls.Client(h, cfg)
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return c, h, &keyLog
}

// readEchoes reads n text frames from br and checks they are msgs.
func readEchoes(t *testing.T, br *bufio.Reader, msgs []string) {
	t.Helper()
	for _, m := range msgs {
		if _, p := testkit.ReadFrame(t, br); string(p) != m {
			t.Fatalf("echo %q, want %q", p, m)
		}
	}
}

// TestRecordLayerPipelined: the client's Finished, the upgrade request
// and frames in many small records leave in one write; edge takes the
// records over wherever crypto/tls stopped in them and every frame comes
// back.
func TestRecordLayerPipelined(t *testing.T) {
	e := recordEdge(t)
	c, h, _ := heldClient(t, e)
	// The ClientHello goes out, the Finished is held.
	h.hold, h.pass = true, 1
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	if len(h.buf) == 0 {
		t.Fatal("the Finished was not held")
	}
	io.WriteString(c, testkit.RawUpgrade("/", "edge.test"))
	var msgs []string
	for i := range 200 {
		m := "m" + strconv.Itoa(i)
		msgs = append(msgs, m)
		c.Write(testkit.MaskedFrame(0x1, []byte(m)))
	}
	h.flush(t)
	br := testkit.Read101(t, c)
	readEchoes(t, br, msgs)
	if got := askRaw(t, c, br, "after"); got != "after" {
		t.Fatalf("echo %q", got)
	}
	if owned, kept := e.srv.RecordLayerTakeovers(); owned != 1 || kept != 0 {
		t.Fatalf("takeovers: owned %d, kept %d; want 1, 0", owned, kept)
	}
}

// TestRecordLayerKeyUpdateAroundRequest: a KeyUpdate (RFC 8446 §4.6.3)
// before the upgrade request or right behind it, with and without
// update_requested, in the same flight as the Finished and the frames:
// crypto/tls reads and answers some of it before the takeover, edge the
// rest, and both directions go on under the right keys.
func TestRecordLayerKeyUpdateAroundRequest(t *testing.T) {
	update := func(req byte) []byte { return []byte{24, 0, 0, 1, req} }
	cases := map[string]struct{ before, behind [][]byte }{
		"before, requested":        {before: [][]byte{update(1)}},
		"before, not requested":    {before: [][]byte{update(0)}},
		"behind, requested":        {behind: [][]byte{update(1)}},
		"behind, not requested":    {behind: [][]byte{update(0)}},
		"behind, requested twice":  {behind: [][]byte{update(1), update(1)}},
		"around, requested both":   {before: [][]byte{update(1)}, behind: [][]byte{update(1)}},
		"behind, then not, then 1": {behind: [][]byte{update(0), update(1)}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := recordEdge(t)
			c, h, keyLog := heldClient(t, e)
			h.hold, h.pass = true, 1
			if err := c.Handshake(); err != nil {
				t.Fatal(err)
			}
			w, err := newRecordWriter(c.ConnectionState().CipherSuite, clientSecret(t, keyLog.String()), 0)
			if err != nil {
				t.Skip(err)
			}
			keyUpdates := func(msgs [][]byte) {
				for _, m := range msgs {
					h.buf = w.seal(h.buf, 22, m)
					w.update()
				}
			}
			keyUpdates(tc.before)
			h.buf = w.seal(h.buf, 23, []byte(testkit.RawUpgrade("/", "edge.test")))
			keyUpdates(tc.behind)
			msgs := []string{"one", "two", "three"}
			for _, m := range msgs {
				h.buf = w.seal(h.buf, 23, testkit.MaskedFrame(0x1, []byte(m)))
			}
			h.flush(t)
			br := testkit.Read101(t, c)
			readEchoes(t, br, msgs)
			// Later, on edge's record layer: more frames, and one more
			// update each way.
			testkit.WaitFor(t, "the record layer to take the connection", func() bool { return e.srv.recordConns() == 1 })
			var out []byte
			out = w.seal(out, 23, testkit.MaskedFrame(0x1, []byte("later")))
			out = w.seal(out, 22, update(1))
			w.update()
			out = w.seal(out, 23, testkit.MaskedFrame(0x1, []byte("last")))
			if _, err := h.Conn.Write(out); err != nil {
				t.Fatal(err)
			}
			readEchoes(t, br, []string{"later", "last"})
			if owned, kept := e.srv.RecordLayerTakeovers(); owned != 1 || kept != 0 {
				t.Fatalf("takeovers: owned %d, kept %d; want 1, 0", owned, kept)
			}
		})
	}
}

// rawRecordClient is a TLS 1.3 client whose records after the handshake
// are written by the test (recordWriter), its reads done by crypto/tls.
func rawRecordClient(t *testing.T, e *edge) (*tls.Conn, *heldConn, *recordWriter) {
	t.Helper()
	c, h, keyLog := heldClient(t, e)
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	w, err := newRecordWriter(c.ConnectionState().CipherSuite, clientSecret(t, keyLog.String()), 0)
	if err != nil {
		t.Skip(err)
	}
	return c, h, w
}

// TestRecordLayerRecordAcrossTakeover: the record behind the upgrade
// request is cut at the takeover (in its header, at its end, in its
// body): crypto/tls read the start, edge the rest, and the frame in it
// comes back.
func TestRecordLayerRecordAcrossTakeover(t *testing.T) {
	for _, cut := range []int{1, 3, 5, 9, 20} {
		t.Run(strconv.Itoa(cut), func(t *testing.T) {
			e := recordEdge(t)
			c, h, w := rawRecordClient(t, e)
			first := w.seal(nil, 23, []byte(testkit.RawUpgrade("/", "edge.test")))
			rec := w.seal(nil, 23, testkit.MaskedFrame(0x1, []byte("across the takeover")))
			if _, err := h.Conn.Write(append(first, rec[:cut]...)); err != nil {
				t.Fatal(err)
			}
			br := testkit.Read101(t, c)
			testkit.WaitFor(t, "the record layer to take the connection", func() bool { return e.srv.recordConns() == 1 })
			if _, err := h.Conn.Write(rec[cut:]); err != nil {
				t.Fatal(err)
			}
			readEchoes(t, br, []string{"across the takeover"})
		})
	}
}

// TestRecordLayerEndsBehindRequest: what may follow the upgrade request
// in the same flight: a close_notify (RFC 8446 §6.1), a fatal alert
// (§6.2), a TCP FIN without close_notify, the FIN in the middle of a
// record. The frame before it is forwarded where the end allows it, and
// the connection ends, with a reason, instead of hanging.
func TestRecordLayerEndsBehindRequest(t *testing.T) {
	frame := testkit.MaskedFrame(0x1, []byte("before the end"))
	cases := []struct {
		name string
		tail func(w *recordWriter) []byte
		fin  bool
		echo bool
	}{
		{"close_notify", func(w *recordWriter) []byte { return w.seal(nil, 21, []byte{1, 0}) }, false, true},
		{"fatal alert", func(w *recordWriter) []byte { return w.seal(nil, 21, []byte{2, 40}) }, false, false},
		{"FIN", func(w *recordWriter) []byte { return nil }, true, true},
		{"FIN inside a record", func(w *recordWriter) []byte { return w.seal(nil, 23, frame)[:9] }, true, false},
	}
	for _, tc := range cases {
		for _, late := range []bool{false, true} {
			name := tc.name
			if late {
				// The same once edge's record layer reads the client.
				name += ", later"
			}
			t.Run(name, func(t *testing.T) {
				e := recordEdge(t)
				c, h, w := rawRecordClient(t, e)
				out := w.seal(nil, 23, []byte(testkit.RawUpgrade("/", "edge.test")))
				out = w.seal(out, 23, frame)
				var br *bufio.Reader
				if late {
					if _, err := h.Conn.Write(out); err != nil {
						t.Fatal(err)
					}
					br = testkit.Read101(t, c)
					readEchoes(t, br, []string{"before the end"})
					testkit.WaitFor(t, "the record layer to take the connection", func() bool { return e.srv.recordConns() == 1 })
					out = w.seal(nil, 23, frame)
				}
				out = append(out, tc.tail(w)...)
				if _, err := h.Conn.Write(out); err != nil {
					t.Fatal(err)
				}
				if tc.fin {
					h.Conn.(*net.TCPConn).CloseWrite()
				}
				if br == nil {
					br = testkit.Read101(t, c)
				}
				if tc.echo {
					readEchoes(t, br, []string{"before the end"})
				}
				io.Copy(io.Discard, br) // ends: the deadline of heldClient would fail it
				if got := e.obs.waitClosed(t); got == "" {
					t.Fatal("no close reason")
				}
			})
		}
	}
}

// TestRecordLayerRecordSizes: on edge's record layer a record of the
// largest plaintext (2^14 bytes, RFC 8446 §5.1) carries its frame; a
// record longer than 2^14+256 on the wire (§5.2), or whose inner
// plaintext is longer than 2^14+1 (padding, §5.4), is answered with
// record_overflow and the connection ends.
func TestRecordLayerRecordSizes(t *testing.T) {
	big := bytes.Repeat([]byte{'z'}, 1<<14-8) // a frame of 2^14 bytes with its 8-byte header
	if n := len(testkit.MaskedFrame(0x2, big)); n != 1<<14 {
		t.Fatalf("frame of %d bytes", n)
	}
	cases := []struct {
		name  string
		rec   func(w *recordWriter) []byte
		alert string
	}{
		{"2^14 bytes", func(w *recordWriter) []byte { return w.seal(nil, 23, testkit.MaskedFrame(0x2, big)) }, ""},
		{"2^14+1 bytes", func(w *recordWriter) []byte {
			return w.seal(nil, 23, append(testkit.MaskedFrame(0x2, big), 0))
		}, "record overflow"},
		{"over the wire limit", func(w *recordWriter) []byte {
			const n = 1<<14 + 257
			return append([]byte{23, 3, 3, n >> 8, n & 0xff}, make([]byte, n)...)
		}, "record overflow"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := recordEdge(t)
			c, h, w := rawRecordClient(t, e)
			if _, err := h.Conn.Write(w.seal(nil, 23, []byte(testkit.RawUpgrade("/", "edge.test")))); err != nil {
				t.Fatal(err)
			}
			br := testkit.Read101(t, c)
			testkit.WaitFor(t, "the record layer to take the connection", func() bool { return e.srv.recordConns() == 1 })
			if _, err := h.Conn.Write(tc.rec(w)); err != nil {
				t.Fatal(err)
			}
			if tc.alert == "" {
				if op, p := testkit.ReadFrame(t, br); op != 0x2 || !bytes.Equal(p, big) {
					t.Fatalf("echo: opcode %d, %d bytes", op, len(p))
				}
				return
			}
			_, err := io.ReadAll(br)
			if err == nil || !strings.Contains(err.Error(), tc.alert) {
				t.Fatalf("client read %v, want the alert %s", err, tc.alert)
			}
		})
	}
}

// TestRecordLayerClientCertificatesAndResumption: with client
// certificates required (RFC 8446 §4.4.2: the client's Certificate and
// CertificateVerify in its flight) and on a resumed session (§2.2, PSK),
// edge still takes the records over, and the key log empties.
func TestRecordLayerClientCertificatesAndResumption(t *testing.T) {
	ca := testkit.NewCA(t, "clients")
	leaf := ca.Issue(t, testkit.CertOptions{CN: "alice", ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	e, _ := oneBackendEdge(t, spliceReadiness, true, func(_ *Pool, cfg *edgeConfig) {
		cfg.tlsMod = func(c *tls.Config) {
			c.ClientAuth = tls.RequireAndVerifyClientCert
			c.ClientCAs = ca.Pool()
		}
	})
	d := e.dialer()
	d.TLSClientConfig.MinVersion = tls.VersionTLS13
	d.TLSClientConfig.Certificates = []tls.Certificate{leaf.TLS()}
	d.TLSClientConfig.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	var resumed []bool
	for i := range 3 {
		c, _, err := d.Dial(e.url("/"), nil)
		if err != nil {
			t.Fatal(err)
		}
		msg := "hello " + strconv.Itoa(i)
		if got := testkit.Ask(t, c, msg); got != msg {
			t.Fatalf("echo %q", got)
		}
		resumed = append(resumed, c.UnderlyingConn().(*tls.Conn).ConnectionState().DidResume)
		c.Close()
	}
	if !resumed[1] || !resumed[2] || resumed[0] {
		t.Fatalf("resumed %v, want a full handshake then resumed ones", resumed)
	}
	if owned, kept := e.srv.RecordLayerTakeovers(); owned != 3 || kept != 0 {
		t.Fatalf("takeovers: owned %d, kept %d; want 3, 0", owned, kept)
	}
	testkit.WaitFor(t, "an empty key log", func() bool { return e.rl.keys.Len() == 0 })
}

// TestRecordLayerNoDataRecordsSpendBudget: records without application
// data (KeyUpdates without update_requested, RFC 8446 §4.6.3, each a key
// derivation; empty application-data records, §5.1; crypto/tls closes
// the connection after 16 in a row of either) make a read of edge's
// record layer return no data. Such reads must spend the run's budget
// (pumpBudget) like data does; counted as nothing, a client sending only
// those holds its poller goroutine, and every connection on it, for as
// long as its socket has more. The test holds the runner state itself,
// lets megabytes of such records pile up in edge's socket, runs the pump
// once and checks that it gave the poller back with records left.
func TestRecordLayerNoDataRecordsSpendBudget(t *testing.T) {
	for _, keyUpdates := range []bool{true, false} {
		t.Run("key-updates="+strconv.FormatBool(keyUpdates), func(t *testing.T) {
			noDataRun(t, keyUpdates)
		})
	}
}

func noDataRun(t *testing.T, keyUpdates bool) {
	e, _ := oneBackendEdge(t, spliceReadiness, true, func(_ *Pool, cfg *edgeConfig) { cfg.wrap = fixedRcvBuffers })
	c, h, w := rawRecordClient(t, e)
	if _, err := h.Conn.Write(w.seal(nil, 23, []byte(testkit.RawUpgrade("/", "edge.test")))); err != nil {
		t.Fatal(err)
	}
	br := testkit.Read101(t, c)
	testkit.WaitFor(t, "the record layer to take the connection", func() bool { return e.srv.recordConns() == 1 })
	wc := e.srv.oneConn()
	r := readyOf(wc)
	testkit.WaitFor(t, "the runner state", func() bool { return r.rc.Hold() })

	var flood []byte
	for len(flood) < 1<<20 {
		if keyUpdates {
			flood = w.seal(flood, 22, []byte{24, 0, 0, 1, 0})
			w.update()
		} else {
			flood = w.seal(flood, 23, nil)
		}
	}
	if _, err := h.Conn.Write(flood); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the records in edge's socket", func() bool { return r.cs.Unread() == len(flood) })
	r.pumpClientToBackend()
	left, yielded := r.cs.Unread(), r.rc.Yielding()
	// Give the connection back to the poller, and check it still works.
	r.rc.MarkReadable(ready.Client)
	r.rc.Run()
	if left == 0 || !yielded {
		t.Fatalf("one run read all %d bytes of records without data (left %d, yielded %v)", len(flood), left, yielded)
	}
	if _, err := h.Conn.Write(w.seal(nil, 23, testkit.MaskedFrame(0x1, []byte("after")))); err != nil {
		t.Fatal(err)
	}
	readEchoes(t, br, []string{"after"})
}

// fixedRcvBuffers gives accepted sockets a fixed receive buffer of 4 MiB
// (the kernel doubles what is asked), if net.core.rmem_max allows.
func fixedRcvBuffers(ln net.Listener) net.Listener {
	return tunedListener{ln, func(tc *net.TCPConn) { tc.SetReadBuffer(2 << 20) }}
}

// tunedListener sets socket options on every connection it accepts.
type tunedListener struct {
	net.Listener
	tune func(*net.TCPConn)
}

func (l tunedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		l.tune(tc)
	}
	return c, err
}

// hrrEdge is an edge whose listener only takes P-384 key shares, so a
// client that sends a P-256 one gets a HelloRetryRequest (RFC 8446
// §4.1.4) and sends a second ClientHello.
func hrrEdge(t *testing.T) *edge {
	t.Helper()
	e, _ := oneBackendEdge(t, spliceReadiness, true, func(_ *Pool, cfg *edgeConfig) {
		cfg.tlsMod = func(c *tls.Config) { c.CurvePreferences = []tls.CurveID{tls.CurveP384} }
	})
	return e
}

func hrrClientConfig(e *edge) *tls.Config {
	cfg := testkit.ClientTLS(e.certs, "edge.test")
	cfg.MinVersion = tls.VersionTLS13
	cfg.CurvePreferences = []tls.CurveID{tls.CurveP256, tls.CurveP384}
	return cfg
}

// secondHello rewrites the random of the second ClientHello a client
// sends (after a HelloRetryRequest), which RFC 8446 §4.1.2 forbids: the
// read log's random is the first ClientHello's, the secrets would be
// logged under the second's.
type secondHello struct {
	net.Conn
	hellos int
}

func (s *secondHello) Write(p []byte) (int, error) {
	for off := 0; off+5 <= len(p); {
		n := int(p[off+3])<<8 | int(p[off+4])
		if p[off] == 22 && off+5+38 <= len(p) && p[off+5] == 1 {
			if s.hellos++; s.hellos == 2 {
				b := append([]byte(nil), p...)
				b[off+5+6] ^= 0xff
				if _, err := s.Conn.Write(b); err != nil {
					return 0, err
				}
				return len(p), nil
			}
		}
		off += 5 + n
	}
	return s.Conn.Write(p)
}

// TestRecordLayerHelloRetry: after a HelloRetryRequest the takeover still
// works (both ClientHellos in the read log, the same random); a second
// ClientHello with another random than the first must leave nothing in
// the key log (crypto/tls refuses it before it logs a secret).
func TestRecordLayerHelloRetry(t *testing.T) {
	e := hrrEdge(t)
	tc, err := tls.Dial("tcp", e.addr, hrrClientConfig(e))
	if err != nil {
		t.Fatal(err)
	}
	if cs := tc.ConnectionState(); cs.CurveID != tls.CurveP384 {
		t.Fatalf("curve %v, want P-384 after a retry", cs.CurveID)
	}
	io.WriteString(tc, testkit.RawUpgrade("/", "edge.test"))
	tc.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := testkit.Read101(t, tc)
	if got := askRaw(t, tc, br, "retried"); got != "retried" {
		t.Fatalf("echo %q", got)
	}
	tc.Close()
	testkit.WaitFor(t, "an empty key log", func() bool { return e.rl.keys.Len() == 0 })
	if owned, kept := e.srv.RecordLayerTakeovers(); owned != 1 || kept != 0 {
		t.Fatalf("takeovers: owned %d, kept %d; want 1, 0", owned, kept)
	}

	raw, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	sh := &secondHello{Conn: raw}
	c := tls.Client(sh, hrrClientConfig(e))
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := c.Handshake(); sh.hellos != 2 {
		t.Fatalf("%d ClientHellos sent, want 2 (%v)", sh.hellos, err)
	}
	c.Close()
	testkit.WaitFor(t, "an empty key log", func() bool { return e.rl.keys.Len() == 0 })
}

// TestRecordLayerTakeoverReadsOnlyBuffered: a client sends megabytes of
// frames right behind its upgrade request, all in edge's socket before
// the takeover. The takeover must take from crypto/tls only what it
// already read (the records behind the request in its buffer), not read
// the socket dry through it: that drain goes through the handshake log,
// which overflows, and the connection is lost to crypto/tls; the bytes
// it reads are held in one buffer and written to the backend whatever
// the backend takes, and for a client that keeps sending it ends only
// when the client pauses. Every frame must come back, on edge's record
// layer.
func TestRecordLayerTakeoverReadsOnlyBuffered(t *testing.T) {
	answer := make(chan struct{})
	b := startBackend(t, "b1")
	// A proxy in front of the echo backend that holds the 101 until the
	// client's flood is in edge's socket.
	addr := testkit.RawBackend(t, func(c net.Conn) {
		bc, err := net.Dial("tcp", b.Addr())
		if err != nil {
			return
		}
		go func() { io.Copy(bc, c); bc.Close() }()
		<-answer
		io.Copy(c, bc)
	})
	p := newPool(t, "held", balance.LeastConn, map[string]string{"held": addr})
	e := startEdge(t, edgeConfig{tls: true, opts: Options{Routes: []Route{{Default: true, Pool: p}}}, wrap: fixedRcvBuffers})
	c, h, w := rawRecordClient(t, e)
	out := w.seal(nil, 23, []byte(testkit.RawUpgrade("/", "edge.test")))
	msg := bytes.Repeat([]byte{'f'}, 16<<10-8)
	frame := testkit.MaskedFrame(0x2, msg)
	n := 0
	for ; len(out) < 1<<20; n++ {
		out = w.seal(out, 23, frame)
	}
	h.Conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := h.Conn.Write(out); err != nil {
		t.Fatal(err)
	}
	close(answer)
	br := testkit.Read101(t, c)
	for i := range n {
		if op, got := testkit.ReadFrame(t, br); op != 0x2 || !bytes.Equal(got, msg) {
			t.Fatalf("frame %d: opcode %d, %d bytes", i, op, len(got))
		}
	}
	if owned, kept := e.srv.RecordLayerTakeovers(); owned != 1 || kept != 0 {
		t.Fatalf("takeovers: owned %d, kept %d; want 1, 0", owned, kept)
	}
}
