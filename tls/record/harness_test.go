package record

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"
)

// testCertificate is a self-signed ECDSA certificate for edge.test.
func testCertificate(t testing.TB) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "edge.test"},
		DNSNames:     []string{"edge.test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// wire records every byte read from and written to a connection. While
// hold is set, writes are kept in held instead of being sent.
type wire struct {
	net.Conn
	mu     sync.Mutex
	rd, wr bytes.Buffer
	hold   bool
	held   bytes.Buffer
}

func (w *wire) Read(p []byte) (int, error) {
	n, err := w.Conn.Read(p)
	w.mu.Lock()
	w.rd.Write(p[:n])
	w.mu.Unlock()
	return n, err
}

func (w *wire) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.hold {
		w.held.Write(p)
		w.mu.Unlock()
		return len(p), nil
	}
	w.wr.Write(p)
	w.mu.Unlock()
	return w.Conn.Write(p)
}

func (w *wire) logs() (rd, wr []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return bytes.Clone(w.rd.Bytes()), bytes.Clone(w.wr.Bytes())
}

// pair is a crypto/tls client and server over loopback TCP after the
// handshake, with the server's application traffic secrets taken from its
// KeyLogWriter.
type pair struct {
	client, server *tls.Conn
	cw, sw         *wire
	suite          uint16
	cs, ss         []byte
}

// newSuitePair starts a pair: a handshake over loopback with the
// server's KeyLogWriter a KeyLog, the secrets taken by the ClientHello's
// random. crypto/tls offers only suite (0: its default list) during the
// handshake; tests using it must not be parallel.
func newSuitePair(t testing.TB, tickets bool, suite uint16) *pair {
	t.Helper()
	if suite != 0 {
		saved := tls13Suites
		tls13Suites = []uint16{suite}
		defer func() { tls13Suites = saved }()
	}
	cert, pool := testCertificate(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	keylog := NewKeyLog(time.Minute, 16, nil)
	scfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13,
		KeyLogWriter: keylog, SessionTicketsDisabled: !tickets}
	ccfg := &tls.Config{RootCAs: pool, ServerName: "edge.test", MinVersion: tls.VersionTLS13}
	type accepted struct {
		c   *tls.Conn
		w   *wire
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			ch <- accepted{err: err}
			return
		}
		w := &wire{Conn: c}
		sc := tls.Server(w, scfg)
		ch <- accepted{sc, w, sc.Handshake()}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cw := &wire{Conn: raw}
	client := tls.Client(cw, ccfg)
	if err := client.Handshake(); err != nil {
		t.Fatal(err)
	}
	a := <-ch
	if a.err != nil {
		t.Fatal(a.err)
	}
	p := &pair{client: client, server: a.c, cw: cw, sw: a.w, suite: a.c.ConnectionState().CipherSuite}
	if suite != 0 && p.suite != suite {
		t.Fatalf("crypto/tls negotiated %#04x, want %#04x", p.suite, suite)
	}
	t.Cleanup(func() { raw.Close(); a.w.Conn.Close() })
	rd, _ := a.w.logs()
	rnd, ok := ClientRandom(rd)
	if !ok {
		t.Fatal("ClientRandom: the server's read log does not start with a ClientHello")
	}
	var took bool
	if p.cs, p.ss, took = keylog.Take(rnd); !took {
		t.Fatal("KeyLog.Take: no secrets for the connection's client random")
	}
	return p
}

// serverState is this package's state for the server side of p.
func (p *pair) serverState(t testing.TB) *State {
	s, err := New(p.suite, p.cs, p.ss)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// clientView is the client's side of the record layer: it seals what a
// client sends and opens what a server sends (NewSessionTicket included).
// TLS 1.3 records are the same both ways, so the client's view is a State
// with the directions swapped.
func clientView(t testing.TB, suite uint16, cs, ss []byte) *State {
	t.Helper()
	v := &State{peerIsServer: true}
	if err := v.init(suite, ss, cs); err != nil {
		t.Fatal(err)
	}
	return v
}

// openAll opens everything st can read from r until want bytes of
// plaintext came, or r ends, or Open fails.
func openAll(st *State, r io.Reader, want int) ([]byte, error) {
	var out, pend []byte
	buf := make([]byte, 64<<10)
	for len(out) < want {
		n, rerr := r.Read(buf)
		pend = append(pend, buf[:n]...)
		plain, used, err := st.Open(pend)
		out = append(out, plain...)
		pend = append(pend[:0], pend[used:]...)
		if err != nil {
			return out, err
		}
		if rerr != nil {
			if len(pend) > 0 && errors.Is(rerr, io.EOF) {
				return out, io.ErrUnexpectedEOF
			}
			return out, rerr
		}
	}
	return out, nil
}

// sealInner protects inner as it is (content, type, padding: the caller
// builds the TLSInnerPlaintext) under st's write key, with outer type typ.
func sealInner(st *State, dst []byte, typ byte, inner []byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, headerLen)...)
	dst = append(dst, inner...)
	dst = append(dst, make([]byte, tagLen)...)[:len(dst)]
	return st.write.encrypt(st.suite, dst, start, typ)
}

func message(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}
