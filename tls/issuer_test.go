package tls_test

import (
	"bytes"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	edgetls "github.com/edgelb/edge/tls"
)

// issuerServer serves body as the caIssuers document on loopback and counts
// the requests.
type issuerServer struct {
	url  string
	hits atomic.Int32
}

func startIssuerServer(t *testing.T, body []byte) *issuerServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &issuerServer{url: "http://" + ln.Addr().String() + "/ca.der"}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.hits.Add(1)
		w.Header().Set("Content-Type", "application/pkix-cert")
		w.Write(body)
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return s
}

func wantStapled(t *testing.T, e *env, name string) {
	t.Helper()
	out := sClient(t, e.addr, "-servername", name, "-status")
	for _, w := range []string{"OCSP Response Status: successful", "Cert Status: good"} {
		if !strings.Contains(out, w) {
			t.Errorf("openssl s_client -status lacks %q:\n%s", w, out)
		}
	}
	if st := e.term.Status().Certificates[0].OCSP; st.State != "good" || !st.Stapled {
		t.Errorf("status: got %+v, want a good staple", st)
	}
}

// A private CA signs the leaf directly and the certificate file holds only
// the leaf: the issuer comes from issuer_file (HAProxy's .issuer, nginx's
// ssl_trusted_certificate) and the real openssl responder's answer is
// stapled.
func TestOCSPStapleLeafOnlyWithIssuerFile(t *testing.T) {
	p, port, l := ocspSetup(t, leafOpts{noChain: true})
	startResponder(t, p, port, indexLine(l.cert, time.Time{}), "", "")
	f := l.files()
	f.IssuerFile = p.caFile
	e := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{f}})
	wantStapled(t, e, "a.example.com")
	if n := e.logs.count("lacks the issuer"); n != 0 {
		t.Errorf("logged %d times that the issuer is missing", n)
	}
}

// The same leaf-only file without issuer_file: the issuer is fetched from
// the leaf's AIA caIssuers URL (RFC 5280 section 4.2.2.1), checked to have
// signed the leaf, and the staple follows.
func TestOCSPStapleLeafOnlyWithAIAIssuer(t *testing.T) {
	needOpenSSL(t)
	p := newPKI(t)
	srv := startIssuerServer(t, p.ca.Raw)
	port := freePort(t)
	l := p.leaf(t, leafOpts{names: []string{"a.example.com"}, noChain: true, aiaURL: srv.url,
		ocspURL: "http://127.0.0.1:" + strconv.Itoa(port)})
	startResponder(t, p, port, indexLine(l.cert, time.Time{}), "", "")
	e := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{l.files()}, StateDir: t.TempDir()})
	wantStapled(t, e, "a.example.com")
	if srv.hits.Load() != 1 {
		t.Errorf("issuer fetched %d times, want 1", srv.hits.Load())
	}
}

// What the caIssuers URL serves is not trusted: a certificate that did not
// sign the leaf, or a document over the size bound, is refused, and a URL
// that is not http(s) is never fetched.
func TestAIAIssuerRefused(t *testing.T) {
	p := newPKI(t)
	other := newPKI(t)
	big := bytes.Repeat([]byte{0x30}, 1<<20)
	for _, tc := range []struct {
		name, want string
		body       []byte
	}{
		{"other CA", "did not sign", other.ca.Raw},
		{"too large", "larger than", big},
		{"not a certificate", "no certificate", []byte("hello")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startIssuerServer(t, tc.body)
			l := p.leaf(t, leafOpts{names: []string{"a.example.com"}, noChain: true, aiaURL: srv.url,
				ocspURL: "http://127.0.0.1:1/"})
			e := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{l.files()}})
			st := e.term.Status().Certificates[0].OCSP
			if st.Stapled || st.State != "error" || !strings.Contains(st.LastError, tc.want) || !strings.Contains(st.LastError, srv.url) {
				t.Errorf("status: got %+v, want error naming %s and %q", st, srv.url, tc.want)
			}
		})
	}
	t.Run("ldap URL", func(t *testing.T) {
		l := p.leaf(t, leafOpts{names: []string{"a.example.com"}, noChain: true, aiaURL: "ldap://127.0.0.1/cn=ca",
			ocspURL: "http://127.0.0.1:1/"})
		e := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{l.files()}})
		if st := e.term.Status().Certificates[0].OCSP; st.State != "no-issuer" {
			t.Errorf("status: got %+v, want no-issuer", st)
		}
	})
	t.Run("issuer file of another CA", func(t *testing.T) {
		l := p.leaf(t, leafOpts{names: []string{"a.example.com"}, noChain: true, ocspURL: "http://127.0.0.1:1/"})
		f := l.files()
		f.IssuerFile = other.caFile
		_, err := edgetls.New(edgetls.Options{Certificates: []edgetls.CertFiles{f}, Logger: discardLogger()})
		if err == nil || !strings.Contains(err.Error(), other.caFile) || !strings.Contains(err.Error(), "did not sign") {
			t.Errorf("New: got %v, want an error naming %s", err, other.caFile)
		}
	})
}
