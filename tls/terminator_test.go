package tls_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/testkit"
	edgetls "github.com/edgelb/edge/tls"
)

// ---- test PKI ----

type pki struct {
	dir     string
	ca      *x509.Certificate
	caKey   crypto.Signer
	caFile  string
	keyFile string
}

func newPKI(t testing.TB) *pki {
	t.Helper()
	dir := t.TempDir()
	ca := testkit.NewCA(t, "edge test CA")
	p := &pki{dir: dir, ca: ca.Cert, caKey: ca.Key}
	p.caFile, p.keyFile = ca.Write(t, dir, "ca")
	return p
}

func (p *pki) pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.ca)
	return pool
}

type leafOpts struct {
	file       string // base name in the PKI dir
	names      []string
	cn         string
	rsa        bool
	notBefore  time.Time
	notAfter   time.Time
	ocspURL    string
	mustStaple bool
	client     bool
	ekuOCSP    bool   // delegated OCSP responder
	noChain    bool   // leave the CA out of the certificate file
	aiaURL     string // caIssuers URL (Authority Information Access)
}

type leaf struct {
	cert     *x509.Certificate
	key      crypto.Signer
	certFile string
	keyFile  string
	certPEM  []byte
	keyPEM   []byte
}

func (l *leaf) files() edgetls.CertFiles {
	return edgetls.CertFiles{CertFile: l.certFile, KeyFile: l.keyFile}
}

// leaf issues a leaf of the PKI's CA as o describes and writes it (with
// the CA unless o.noChain) and its key into the PKI dir.
func (p *pki) leaf(t testing.TB, o leafOpts) *leaf {
	t.Helper()
	co := testkit.CertOptions{
		Hosts: o.names, CN: o.cn, RSA: o.rsa, NotBefore: o.notBefore, NotAfter: o.notAfter,
		OCSPServer: o.ocspURL, IssuerURL: o.aiaURL, MustStaple: o.mustStaple,
	}
	if co.NotAfter.IsZero() {
		co.NotAfter = time.Now().Add(90 * 24 * time.Hour)
	}
	if o.client {
		co.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	if o.ekuOCSP {
		co.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageOCSPSigning}
	}
	c := (&testkit.CA{Cert: p.ca, Key: p.caKey}).Issue(t, co)
	if o.noChain {
		c.Chain = nil
	}
	l := &leaf{cert: c.Cert, key: c.Key, certPEM: c.CertPEM(), keyPEM: c.KeyPEM(t)}
	name := o.file
	if name == "" {
		name = strings.ReplaceAll(c.Cert.Subject.CommonName, "*", "star")
		if name == "" {
			name = c.Cert.SerialNumber.String()
		}
	}
	l.certFile, l.keyFile = c.Write(t, p.dir, name)
	return l
}

// install writes l's contents into the files of dst (a hot swap).
func (l *leaf) installAt(t testing.TB, dst *leaf) {
	t.Helper()
	testkit.WriteFile(t, dst.certFile, l.certPEM)
	testkit.WriteFile(t, dst.keyFile, l.keyPEM)
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	testkit.WriteFile(t, path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
}

// ---- clock, logs, observer ----

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Now()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// logBuf collects log output and copies it to the test log.
type logBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
	t   testing.TB
}

func (b *logBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.t.Logf("%s", bytes.TrimRight(p, "\n"))
	return b.buf.Write(p)
}

func (b *logBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuf) count(s string) int { return strings.Count(b.String(), s) }

func newLogger(t testing.TB) (*slog.Logger, *logBuf) {
	b := &logBuf{t: t}
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

// recorder is an Observer that records events as strings.
type recorder struct {
	mu     sync.Mutex
	events []string
	ch     chan string
}

func newRecorder() *recorder { return &recorder{ch: make(chan string, 1000)} }

func (r *recorder) add(s string) {
	r.mu.Lock()
	r.events = append(r.events, s)
	r.mu.Unlock()
	select {
	case r.ch <- s:
	default:
	}
}

func (r *recorder) CertReloaded(name string, err error) {
	r.add(fmt.Sprintf("reload %s err=%v", filepath.Base(name), err != nil))
}

func (r *recorder) OCSPRefreshed(name, status string, err error) {
	r.add(fmt.Sprintf("ocsp %s %s", filepath.Base(name), status))
}

func (r *recorder) TicketKeysRotated() { r.add("tickets") }

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

// wait blocks until an event equal to want arrives.
func (r *recorder) wait(t testing.TB, want string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case got := <-r.ch:
			if got == want {
				return
			}
		case <-deadline:
			t.Fatalf("event %q never came; got %q", want, r.all())
		}
	}
}

// ---- terminator and server ----

type env struct {
	term *edgetls.Terminator
	addr string
	logs *logBuf
	obs  *recorder
	// states receives the server side of every handshake.
	states chan tls.ConnectionState
}

// start builds a Terminator from o (logger and observer filled in) and
// serves it on loopback. Each connection gets "ok\n" after the handshake,
// then an echo.
func start(t testing.TB, o edgetls.Options) *env {
	t.Helper()
	e := &env{obs: newRecorder(), states: make(chan tls.ConnectionState, 100)}
	o.Logger, e.logs = newLogger(t)
	o.Observer = e.obs
	term, err := edgetls.New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.term = term
	e.addr = serve(t, term.TLSConfig(), e.states)
	return e
}

func serve(t testing.TB, cfg *tls.Config, states chan tls.ConnectionState) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Go(func() {
				defer func() {
					c.Close()
					mu.Lock()
					delete(conns, c)
					mu.Unlock()
				}()
				tc := tls.Server(c, cfg)
				tc.SetDeadline(time.Now().Add(20 * time.Second))
				if err := tc.Handshake(); err != nil {
					t.Logf("server handshake: %v", err)
					return
				}
				select {
				case states <- tc.ConnectionState():
				default:
				}
				if _, err := tc.Write([]byte("ok\n")); err != nil {
					return
				}
				io.Copy(tc, tc)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// runBackground runs term.Run until the test ends.
func runBackground(t testing.TB, term *edgetls.Terminator) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- term.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// client returns a Go client config trusting p for serverName.
func (p *pki) client(serverName string) *tls.Config {
	return &tls.Config{RootCAs: p.pool(), ServerName: serverName}
}

// dial does one handshake, reads the server's "ok" (which also delivers
// TLS 1.3 tickets to the session cache), and returns the client's state.
func dial(addr string, cfg *tls.Config) (tls.ConnectionState, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 3)
	if _, err := io.ReadFull(c, buf); err != nil {
		return tls.ConnectionState{}, fmt.Errorf("read: %w", err)
	}
	return c.ConnectionState(), nil
}

func mustDial(t testing.TB, addr string, cfg *tls.Config) tls.ConnectionState {
	t.Helper()
	cs, err := dial(addr, cfg)
	if err != nil {
		t.Fatalf("dial %s (%s): %v", addr, cfg.ServerName, err)
	}
	return cs
}

// ---- openssl ----

func needOpenSSL(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl not on PATH: skipping the test against the real openssl client/responder")
	}
	return path
}

// sClient runs `openssl s_client` with args against addr, stdin closed at
// once, and returns its combined output.
func sClient(t testing.TB, addr string, args ...string) string {
	t.Helper()
	bin := needOpenSSL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"s_client", "-connect", addr}, args...)...)
	cmd.Stdin = strings.NewReader("")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("openssl s_client %v timed out: %s", args, out)
	}
	_ = err // s_client exits 1 on handshake failures; callers judge the output
	return string(out)
}

// sClientSessOut runs s_client writing the session to sessFile and keeps
// the connection open until the ticket has been written: TLS 1.3 tickets
// arrive after the handshake.
func sClientSessOut(t testing.TB, addr, sessFile string, args ...string) string {
	t.Helper()
	bin := needOpenSSL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"s_client", "-connect", addr, "-sess_out", sessFile}, args...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out testkit.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Await the event (the session file) rather than sleeping blindly.
	for ctx.Err() == nil {
		if fi, err := os.Stat(sessFile); err == nil && fi.Size() > 0 && strings.Contains(out.String(), "Verify return code") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stdin.Close()
	cmd.Wait()
	if ctx.Err() != nil {
		t.Fatalf("openssl s_client -sess_out timed out: %s", out.String())
	}
	return out.String()
}

// freePort returns a loopback port free right now (for an AIA URL that must
// be known before the responder starts).
func freePort(t testing.TB) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(testkit.ClosedPort(t))
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// indexLine is one line of an openssl CA index file.
func indexLine(c *x509.Certificate, revokedAt time.Time) string {
	serial := fmt.Sprintf("%X", c.SerialNumber)
	if len(serial)%2 == 1 {
		serial = "0" + serial
	}
	exp := c.NotAfter.UTC().Format("060102150405Z")
	if revokedAt.IsZero() {
		return fmt.Sprintf("V\t%s\t\t%s\tunknown\t/CN=%s\n", exp, serial, c.Subject.CommonName)
	}
	return fmt.Sprintf("R\t%s\t%s\t%s\tunknown\t/CN=%s\n", exp, revokedAt.UTC().Format("060102150405Z"), serial, c.Subject.CommonName)
}

type responder struct {
	cmd  *exec.Cmd
	done chan struct{}
	out  *testkit.Buffer
}

// startResponder runs `openssl ocsp` as a responder on port, answering from
// index (file contents), signed by signerCert/signerKey (the CA when empty).
func startResponder(t testing.TB, p *pki, port int, index string, signerCert, signerKey string) *responder {
	t.Helper()
	bin := needOpenSSL(t)
	dir := t.TempDir()
	idx := filepath.Join(dir, "index.txt")
	testkit.WriteFile(t, idx, []byte(index))
	testkit.WriteFile(t, idx+".attr", []byte("unique_subject = no\n"))
	if signerCert == "" {
		signerCert, signerKey = p.caFile, p.keyFile
	}
	cmd := exec.Command(bin, "ocsp", "-index", idx, "-CA", p.caFile, "-rsigner", signerCert, "-rkey", signerKey,
		"-port", strconv.Itoa(port), "-nmin", "1", "-ignore_err")
	r := &responder{cmd: cmd, done: make(chan struct{}), out: &testkit.Buffer{}}
	cmd.Stdout, cmd.Stderr = r.out, r.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(r.done) }()
	t.Cleanup(r.stop)
	// Ready when listening; a probe connection could wedge openssl 3.0's
	// single-threaded responder, so ask the kernel instead.
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := exec.Command("ss", "-ltnH").Output()
		if listening(string(out), port) {
			return r
		}
		select {
		case <-r.done:
			t.Fatalf("openssl ocsp exited: %s", r.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("openssl ocsp not listening on %d: %s", port, r.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func listening(ss string, port int) bool {
	sc := bufio.NewScanner(strings.NewReader(ss))
	suffix := ":" + strconv.Itoa(port)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 4 && strings.HasSuffix(f[3], suffix) {
			return true
		}
	}
	return false
}

func (r *responder) stop() {
	select {
	case <-r.done:
		return
	default:
	}
	r.cmd.Process.Kill()
	<-r.done
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
