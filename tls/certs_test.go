package tls_test

import (
	"context"
	"crypto/rsa"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgelb/edge/internal/testkit"
	edgetls "github.com/edgelb/edge/tls"
)

func leafName(cs tls.ConnectionState) string {
	if len(cs.PeerCertificates) == 0 {
		return ""
	}
	return cs.PeerCertificates[0].Subject.CommonName
}

func TestSNI(t *testing.T) {
	p := newPKI(t)
	def := p.leaf(t, leafOpts{names: []string{"a.example.com"}})
	wild := p.leaf(t, leafOpts{names: []string{"*.wild.example.com"}})
	b := p.leaf(t, leafOpts{names: []string{"b.example.com", "B2.example.com"}, rsa: true})
	e := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{def.files(), wild.files(), b.files()}, OCSP: edgetls.OCSPOptions{Disabled: true}})

	tests := []struct {
		name, sni, want string
	}{
		{"exact", "a.example.com", "a.example.com"},
		{"exact second SAN, any case", "b2.EXAMPLE.com", "b.example.com"},
		{"exact RSA", "b.example.com", "b.example.com"},
		{"wildcard", "x.wild.example.com", "*.wild.example.com"},
		{"wildcard covers one label only", "y.x.wild.example.com", "a.example.com"},
		{"wildcard does not cover its base", "wild.example.com", "a.example.com"},
		{"unknown name gets the default", "nobody.test", "a.example.com"},
		{"no SNI gets the default", "", "a.example.com"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &tls.Config{ServerName: tc.sni, InsecureSkipVerify: true}
			cs := mustDial(t, e.addr, cfg)
			if got := leafName(cs); got != tc.want {
				t.Errorf("certificate for SNI %q: got %q, want %q", tc.sni, got, tc.want)
			}
			if got, want := cs.NegotiatedProtocol, ""; got != want {
				t.Errorf("ALPN without client protocols: got %q, want %q", got, want)
			}
		})
	}

	// Verified by a real client with the name it asked for.
	cs := mustDial(t, e.addr, p.client("x.wild.example.com"))
	if got, want := leafName(cs), "*.wild.example.com"; got != want {
		t.Errorf("verified wildcard: got %q, want %q", got, want)
	}
	out := sClient(t, e.addr, "-servername", "x.wild.example.com", "-CAfile", p.caFile, "-verify_hostname", "x.wild.example.com", "-alpn", "http/1.1")
	for _, want := range []string{"CN = *.wild.example.com", "Verify return code: 0 (ok)", "ALPN protocol: http/1.1"} {
		if !strings.Contains(out, want) {
			t.Errorf("openssl s_client output lacks %q:\n%s", want, out)
		}
	}
}

func TestECDSAAndRSAForOneName(t *testing.T) {
	p := newPKI(t)
	// RSA listed first on purpose: the choice follows the client, then
	// prefers ECDSA.
	r := p.leaf(t, leafOpts{file: "rsa", names: []string{"dual.example.com"}, rsa: true})
	ec := p.leaf(t, leafOpts{file: "ec", names: []string{"dual.example.com"}})
	e := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{r.files(), ec.files()}, OCSP: edgetls.OCSPOptions{Disabled: true}})

	tests := []struct {
		name    string
		version uint16
		suites  []uint16
		wantRSA bool
	}{
		{"TLS 1.2 RSA suites only", tls.VersionTLS12, []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}, true},
		{"TLS 1.2 ECDSA suites only", tls.VersionTLS12, []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}, false},
		{"TLS 1.2 both", tls.VersionTLS12, nil, false},
		{"TLS 1.3", tls.VersionTLS13, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := p.client("dual.example.com")
			cfg.MinVersion, cfg.MaxVersion, cfg.CipherSuites = tc.version, tc.version, tc.suites
			cs := mustDial(t, e.addr, cfg)
			_, isRSA := cs.PeerCertificates[0].PublicKey.(*rsa.PublicKey)
			if isRSA != tc.wantRSA {
				t.Errorf("got RSA=%v, want RSA=%v", isRSA, tc.wantRSA)
			}
		})
	}

	openssl := []struct {
		name string
		args []string
		want string
	}{
		{"openssl TLS 1.2 RSA cipher", []string{"-tls1_2", "-cipher", "ECDHE-RSA-AES128-GCM-SHA256"}, "Server public key is 2048 bit"},
		{"openssl TLS 1.2 ECDSA cipher", []string{"-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256"}, "Server public key is 256 bit"},
		{"openssl TLS 1.3 RSA-PSS sigalgs only", []string{"-tls1_3", "-sigalgs", "rsa_pss_rsae_sha256"}, "Server public key is 2048 bit"},
		{"openssl TLS 1.3 default", []string{"-tls1_3"}, "Server public key is 256 bit"},
	}
	for _, tc := range openssl {
		t.Run(tc.name, func(t *testing.T) {
			out := sClient(t, e.addr, append([]string{"-servername", "dual.example.com"}, tc.args...)...)
			if !strings.Contains(out, tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, out)
			}
		})
	}
}

func TestProtocolDefaults(t *testing.T) {
	p := newPKI(t)
	l := p.leaf(t, leafOpts{names: []string{"a.example.com"}})
	e12 := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{l.files()}})
	e13 := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{l.files()}, MinVersion: tls.VersionTLS13})

	cfg := e12.term.TLSConfig()
	if got, want := cfg.NextProtos, []string{"http/1.1"}; !slices.Equal(got, want) {
		t.Errorf("NextProtos: got %q, want %q", got, want)
	}
	if got, want := cfg.MinVersion, uint16(tls.VersionTLS12); got != want {
		t.Errorf("MinVersion: got %#x, want %#x", got, want)
	}
	for _, id := range cfg.CipherSuites {
		name := tls.CipherSuiteName(id)
		if !strings.HasPrefix(name, "TLS_ECDHE_") || !(strings.Contains(name, "GCM") || strings.Contains(name, "CHACHA20")) {
			t.Errorf("suite %s offered: want ECDHE with an AEAD only", name)
		}
	}

	tests := []struct {
		name     string
		addr     string
		min, max uint16
		suites   []uint16
		wantErr  bool
	}{
		{"1.2 server takes 1.2", e12.addr, tls.VersionTLS12, tls.VersionTLS12, nil, false},
		{"1.2 server prefers 1.3", e12.addr, 0, 0, nil, false},
		{"1.2 server refuses 1.1", e12.addr, tls.VersionTLS11, tls.VersionTLS11, nil, true},
		{"1.2 server refuses CBC", e12.addr, tls.VersionTLS12, tls.VersionTLS12, []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA}, true},
		{"1.3 server refuses 1.2", e13.addr, tls.VersionTLS12, tls.VersionTLS12, nil, true},
		{"1.3 server takes 1.3", e13.addr, 0, 0, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := p.client("a.example.com")
			c.MinVersion, c.MaxVersion, c.CipherSuites = tc.min, tc.max, tc.suites
			c.NextProtos = []string{"http/1.1"}
			cs, err := dial(tc.addr, c)
			if gotErr := err != nil; gotErr != tc.wantErr {
				t.Fatalf("handshake error: got %v, want error=%v", err, tc.wantErr)
			}
			if err == nil && cs.NegotiatedProtocol != "http/1.1" {
				t.Errorf("ALPN: got %q, want %q", cs.NegotiatedProtocol, "http/1.1")
			}
		})
	}
}

func TestNewRefusesBrokenFiles(t *testing.T) {
	p := newPKI(t)
	good := p.leaf(t, leafOpts{names: []string{"good.example.com"}})
	other := p.leaf(t, leafOpts{names: []string{"other.example.com"}})
	// Expired and not yet valid pairs are served around, not refused:
	// TestExpiredCertificateAmongOthers and TestNoUsableCertificate.
	must := p.leaf(t, leafOpts{names: []string{"must.example.com"}, mustStaple: true})
	badPEM := filepath.Join(p.dir, "bad.pem")
	testkit.WriteFile(t, badPEM, []byte("-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n"))
	badDER := filepath.Join(p.dir, "baddr.pem")
	writePEM(t, badDER, "CERTIFICATE", []byte("garbage"))
	reversed := filepath.Join(p.dir, "reversed.pem")
	testkit.WriteFile(t, reversed, append(pemOf(p.ca.Raw), pemOf(good.cert.Raw)...))
	mismatched := filepath.Join(p.dir, "mismatch.pem")
	testkit.WriteFile(t, mismatched, good.certPEM)

	tests := []struct {
		name  string
		files edgetls.CertFiles
		want  []string
	}{
		{"missing file", edgetls.CertFiles{CertFile: filepath.Join(p.dir, "nope.pem"), KeyFile: good.keyFile}, []string{"nope.pem", "no such file"}},
		{"no PEM", edgetls.CertFiles{CertFile: badPEM, KeyFile: good.keyFile}, []string{"bad.pem", "no CERTIFICATE PEM block"}},
		{"bad DER", edgetls.CertFiles{CertFile: badDER, KeyFile: good.keyFile}, []string{"baddr.pem", "PEM block 1"}},
		{"key does not match", edgetls.CertFiles{CertFile: mismatched, KeyFile: other.keyFile}, []string{other.keyFile, "mismatch.pem", "does not match"}},
		{"chain out of order", edgetls.CertFiles{CertFile: reversed, KeyFile: good.keyFile}, []string{"reversed.pem", "out of order"}},
		{"must-staple without responder", must.files(), []string{must.certFile, "must-staple", "no OCSP responder"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := edgetls.New(edgetls.Options{Certificates: []edgetls.CertFiles{good.files(), tc.files}})
			if err == nil {
				t.Fatal("New: got no error, want one")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}

	t.Run("bad options listed together", func(t *testing.T) {
		_, err := edgetls.New(edgetls.Options{MinVersion: tls.VersionTLS11, OCSP: edgetls.OCSPOptions{MustStaple: "maybe"}})
		for _, w := range []string{"no certificates", "MinVersion", "MustStaple"} {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("error %v does not mention %q", err, w)
			}
		}
	})
}

func pemOf(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestReload(t *testing.T) {
	p := newPKI(t)
	cur := p.leaf(t, leafOpts{file: "site", names: []string{"site.example.com"}})
	next := p.leaf(t, leafOpts{file: "next", names: []string{"site.example.com"}})
	e := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{cur.files()}, OCSP: edgetls.OCSPOptions{Disabled: true}})
	client := p.client("site.example.com")

	// A connection open across every reload below keeps working.
	old, err := tls.Dial("tcp", e.addr, client)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	old.SetDeadline(time.Now().Add(10 * time.Second))
	io.ReadFull(old, make([]byte, 3))

	serial := func() string { return mustDial(t, e.addr, client).PeerCertificates[0].SerialNumber.String() }
	if got, want := serial(), cur.cert.SerialNumber.String(); got != want {
		t.Fatalf("before reload: serial %s, want %s", got, want)
	}

	// Broken files: the key of another certificate.
	testkit.WriteFile(t, cur.certFile, next.certPEM)
	for range 2 {
		err := e.term.Reload()
		if err == nil || !strings.Contains(err.Error(), cur.keyFile) || !strings.Contains(err.Error(), "does not match") {
			t.Fatalf("Reload with mismatched key: got %v, want an error naming %s and the mismatch", err, cur.keyFile)
		}
	}
	if got, want := serial(), cur.cert.SerialNumber.String(); got != want {
		t.Errorf("after refused reload: serial %s, want the old %s", got, want)
	}
	st := e.term.Status().Certificates[0]
	if !strings.Contains(st.LastError, "does not match") || st.LastErrorAt.IsZero() {
		t.Errorf("Status after refused reload: last_error %q at %v, want the mismatch", st.LastError, st.LastErrorAt)
	}
	if got, want := st.Serial, cur.cert.SerialNumber.Text(16); got != want {
		t.Errorf("Status serial: got %s, want the served %s", got, want)
	}
	if got, want := e.logs.count("certificate reload refused"), 1; got != want {
		t.Errorf("refusal logged %d times, want %d", got, want)
	}

	// Expired replacement.
	exp := p.leaf(t, leafOpts{file: "exp", names: []string{"site.example.com"}, notBefore: time.Now().Add(-48 * time.Hour), notAfter: time.Now().Add(-time.Hour)})
	exp.installAt(t, cur)
	if err := e.term.Reload(); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("Reload with expired cert: got %v, want expired", err)
	}

	// Good files.
	next.installAt(t, cur)
	if err := e.term.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if got, want := serial(), next.cert.SerialNumber.String(); got != want {
		t.Errorf("after reload: serial %s, want new %s", got, want)
	}
	if st := e.term.Status().Certificates[0]; st.LastError != "" {
		t.Errorf("Status after good reload: last_error %q, want none", st.LastError)
	}
	want := []string{"reload site.pem err=true", "reload site.pem err=true", "reload site.pem err=false"}
	if got := e.obs.all(); !slices.Equal(got, want) {
		t.Errorf("events: got %q, want %q", got, want)
	}

	wantOldConnection(t, old, cur)
}

// wantOldConnection checks that a connection opened before reloads still
// echoes and still has the certificate of cur.
func wantOldConnection(t *testing.T, old *tls.Conn, cur *leaf) {
	t.Helper()
	if _, err := old.Write([]byte("ping")); err != nil {
		t.Fatalf("old connection write: %v", err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(old, buf); err != nil || string(buf) != "ping" {
		t.Errorf("old connection echo: got %q, %v; want ping", buf, err)
	}
	if got, want := old.ConnectionState().PeerCertificates[0].SerialNumber, cur.cert.SerialNumber; got.Cmp(want) != 0 {
		t.Errorf("old connection certificate: got %s, want %s", got, want)
	}
}

func TestReloadOnFileChange(t *testing.T) {
	p := newPKI(t)
	cur := p.leaf(t, leafOpts{file: "site", names: []string{"site.example.com"}})
	next := p.leaf(t, leafOpts{file: "next", names: []string{"site.example.com"}})
	e := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{cur.files()}, ReloadInterval: 10 * time.Millisecond, OCSP: edgetls.OCSPOptions{Disabled: true}})
	runBackground(t, e.term)

	testkit.WriteFile(t, cur.keyFile, []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"))
	e.obs.wait(t, "reload site.pem err=true")
	if got, want := mustDial(t, e.addr, p.client("site.example.com")).PeerCertificates[0].SerialNumber, cur.cert.SerialNumber; got.Cmp(want) != 0 {
		t.Errorf("after broken key: serial %s, want old %s", got, want)
	}

	next.installAt(t, cur)
	e.obs.wait(t, "reload site.pem err=false")
	if got, want := mustDial(t, e.addr, p.client("site.example.com")).PeerCertificates[0].SerialNumber, next.cert.SerialNumber; got.Cmp(want) != 0 {
		t.Errorf("after change on disk: serial %s, want new %s", got, want)
	}

	// A touch without a change reloads nothing. (Between the two writes
	// of installAt a poll may have seen the new certificate with the old
	// key and refused it: count from here.)
	before := len(e.obs.all())
	later := time.Now().Add(time.Minute)
	os.Chtimes(cur.certFile, later, later)
	e.term.PollFiles(context.Background())
	e.term.PollFiles(context.Background())
	if got := e.obs.all(); len(got) != before {
		t.Errorf("events after touch: got %q, want no new one after the first %d", got, before)
	}
}

func TestStatusJSON(t *testing.T) {
	p := newPKI(t)
	l := p.leaf(t, leafOpts{names: []string{"a.example.com", "*.a.example.com"}})
	e := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{l.files()}})
	s := e.term.Status()
	if len(s.Certificates) != 1 {
		t.Fatalf("certificates: got %d, want 1", len(s.Certificates))
	}
	c := s.Certificates[0]
	if got, want := c.Names, []string{"a.example.com", "*.a.example.com"}; !slices.Equal(got, want) {
		t.Errorf("names: got %q, want %q", got, want)
	}
	if !c.Default || !c.Served || c.KeyType != "ECDSA" || !c.NotAfter.Equal(l.cert.NotAfter) {
		t.Errorf("status: got %+v", c)
	}
	if got, want := c.OCSP.State, "none"; got != want {
		t.Errorf("OCSP state: got %q, want %q", got, want)
	}
	if !s.Tickets.Enabled || s.Tickets.Keys != 1 || s.Tickets.Source != "memory" || s.Tickets.MaxAge != "3h0m0s" {
		t.Errorf("tickets: got %+v", s.Tickets)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`"cert_file"`, `"not_after"`, `"tickets"`, `"generation"`} {
		if !strings.Contains(string(b), w) {
			t.Errorf("JSON lacks %s: %s", w, b)
		}
	}
}

func TestMutualTLS(t *testing.T) {
	p := newPKI(t)
	l := p.leaf(t, leafOpts{names: []string{"a.example.com"}})
	cl := p.leaf(t, leafOpts{file: "client", cn: "client-1", client: true})
	e := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{l.files()}, ClientCAFile: p.caFile})

	pair, err := tls.LoadX509KeyPair(cl.certFile, cl.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	c := p.client("a.example.com")
	c.Certificates = []tls.Certificate{pair}
	mustDial(t, e.addr, c)
	cs := <-e.states
	// The verified certificate reaches the handler; proxy names it for the
	// backend (proxy.TestClientIdentity).
	if len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 || cs.PeerCertificates[0].Subject.CommonName != "client-1" {
		t.Errorf("client certificate: got %d verified chains, peer %v, want client-1 verified", len(cs.VerifiedChains), cs.PeerCertificates)
	}
	if _, err := dial(e.addr, p.client("a.example.com")); err == nil {
		t.Error("handshake without a client certificate: got success, want failure")
	}
}
