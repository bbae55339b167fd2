package tls_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ocsp"

	edgetls "github.com/edgelb/edge/tls"
)

// ocspSetup is a PKI, a responder URL on a free loopback port, and a leaf
// whose AIA names it.
func ocspSetup(t *testing.T, o leafOpts) (*pki, int, *leaf) {
	t.Helper()
	needOpenSSL(t)
	p := newPKI(t)
	port := freePort(t)
	o.ocspURL = fmt.Sprintf("http://127.0.0.1:%d", port)
	if len(o.names) == 0 {
		o.names = []string{"a.example.com"}
	}
	return p, port, p.leaf(t, o)
}

func stapleStatus(t *testing.T, cs tls.ConnectionState, l *leaf, p *pki) string {
	t.Helper()
	if len(cs.OCSPResponse) == 0 {
		return "none"
	}
	r, err := ocsp.ParseResponseForCert(cs.OCSPResponse, l.cert, p.ca)
	if err != nil {
		t.Fatalf("stapled response: %v", err)
	}
	switch r.Status {
	case ocsp.Good:
		return "good"
	case ocsp.Revoked:
		return "revoked"
	}
	return "unknown"
}

func TestOCSPStapling(t *testing.T) {
	p, port, l := ocspSetup(t, leafOpts{})
	r := startResponder(t, p, port, indexLine(l.cert, time.Time{}), "", "")
	clk := newClock()
	stateDir := t.TempDir()
	e := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{l.files()}, StateDir: stateDir, Now: clk.Now})
	client := p.client("a.example.com")
	ctx := context.Background()

	// Stapled from the very first handshake, for Go and openssl clients.
	if got, want := stapleStatus(t, mustDial(t, e.addr, client), l, p), "good"; got != want {
		t.Fatalf("first handshake staple: got %s, want %s", got, want)
	}
	out := sClient(t, e.addr, "-servername", "a.example.com", "-status")
	for _, w := range []string{"OCSP Response Status: successful", "Cert Status: good"} {
		if !strings.Contains(out, w) {
			t.Errorf("openssl -status output lacks %q:\n%s", w, out)
		}
	}
	st := e.term.Status().Certificates[0].OCSP
	if st.State != "good" || !st.Stapled || st.NextUpdate.IsZero() || st.NextRefresh.IsZero() || st.LastError != "" {
		t.Errorf("status: got %+v, want a good staple", st)
	}
	if files, _ := filepath.Glob(filepath.Join(stateDir, "ocsp-*.der")); len(files) != 1 {
		t.Errorf("persisted staples: got %q, want one file", files)
	}

	// Responder down: the last good staple keeps being served.
	r.stop()
	e.term.RefreshOCSP(ctx)
	if got, want := stapleStatus(t, mustDial(t, e.addr, client), l, p), "good"; got != want {
		t.Errorf("responder down: staple %s, want %s", got, want)
	}
	st = e.term.Status().Certificates[0].OCSP
	if st.State != "good" || !st.Stapled || st.LastError == "" {
		t.Errorf("status with responder down: got %+v, want the good staple and the error", st)
	}

	// Past NextUpdate (openssl -nmin 1) the staple is dropped.
	clk.Advance(2 * time.Minute)
	e.term.CheckOCSP(ctx)
	if got, want := stapleStatus(t, mustDial(t, e.addr, client), l, p), "none"; got != want {
		t.Errorf("expired: staple %s, want %s", got, want)
	}
	st = e.term.Status().Certificates[0].OCSP
	if st.State != "expired" || st.Stapled || !strings.Contains(st.LastError, "expired") {
		t.Errorf("status after expiry: got %+v, want expired", st)
	}
	if out := sClient(t, e.addr, "-servername", "a.example.com", "-status"); !strings.Contains(out, "OCSP response: no response sent") {
		t.Errorf("openssl -status after expiry: want no response:\n%s", out)
	}
	wantEventsGoodErrorExpired(t, e.obs.all())
}

// wantEventsGoodErrorExpired checks the events of TestOCSPStapling: good,
// error, any retries, expired.
func wantEventsGoodErrorExpired(t *testing.T, got []string) {
	t.Helper()
	want := []string{"ocsp a.example.com.pem good", "ocsp a.example.com.pem error", "ocsp a.example.com.pem expired"}
	if len(got) < len(want) || got[0] != want[0] || got[1] != want[1] || got[len(got)-1] != want[2] {
		t.Errorf("events: got %q, want %q (with retries before the last)", got, want)
	}
}

func TestOCSPPersistedStapleAfterRestart(t *testing.T) {
	p, port, l := ocspSetup(t, leafOpts{mustStaple: true})
	r := startResponder(t, p, port, indexLine(l.cert, time.Time{}), "", "")
	stateDir := t.TempDir()
	opts := edgetls.Options{Certificates: []edgetls.CertFiles{l.files()}, StateDir: stateDir}
	start(t, opts)
	r.stop()

	// A restart while the responder is down staples from the first
	// handshake, so even a must-staple certificate is served at once.
	e := start(t, opts)
	if got, want := stapleStatus(t, mustDial(t, e.addr, p.client("a.example.com")), l, p), "good"; got != want {
		t.Errorf("after restart: staple %s, want %s", got, want)
	}
	if st := e.term.Status().Certificates[0]; !st.Served || st.OCSP.State != "good" {
		t.Errorf("status: got %+v", st)
	}
}

func TestOCSPRevoked(t *testing.T) {
	p, port, l := ocspSetup(t, leafOpts{})
	startResponder(t, p, port, indexLine(l.cert, time.Now().Add(-time.Hour)), "", "")
	stateDir := t.TempDir()
	e := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{l.files()}, StateDir: stateDir})

	if got, want := stapleStatus(t, mustDial(t, e.addr, p.client("a.example.com")), l, p), "none"; got != want {
		t.Errorf("revoked: staple %s, want %s", got, want)
	}
	st := e.term.Status().Certificates[0].OCSP
	if st.State != "revoked" || st.Stapled || st.RevokedAt.IsZero() || !strings.Contains(st.LastError, "REVOKED") {
		t.Errorf("status: got %+v, want revoked", st)
	}
	if got := e.logs.count("level=ERROR msg=\"certificate is revoked"); got != 1 {
		t.Errorf("revocation error logs: got %d, want 1:\n%s", got, e.logs.String())
	}
	if got, want := e.obs.all(), "ocsp a.example.com.pem revoked"; len(got) != 1 || got[0] != want {
		t.Errorf("events: got %q, want [%q]", got, want)
	}
	if files, _ := filepath.Glob(filepath.Join(stateDir, "*")); len(files) != 0 {
		t.Errorf("state dir: got %q, want nothing persisted", files)
	}
}

func TestOCSPNoResponderIsQuiet(t *testing.T) {
	p := newPKI(t)
	l := p.leaf(t, leafOpts{names: []string{"a.example.com"}})
	e := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{l.files()}, StateDir: t.TempDir()})
	e.term.RefreshOCSP(context.Background())
	if got := mustDial(t, e.addr, p.client("a.example.com")); len(got.OCSPResponse) != 0 {
		t.Error("staple without a responder")
	}
	if st := e.term.Status().Certificates[0].OCSP; st.State != "none" || st.LastError != "" {
		t.Errorf("status: got %+v, want state none and no error", st)
	}
	logs := e.logs.String()
	if strings.Contains(logs, "level=WARN") || strings.Contains(logs, "level=ERROR") {
		t.Errorf("warnings or errors logged:\n%s", logs)
	}
	if got := e.obs.all(); len(got) != 0 {
		t.Errorf("events: got %q, want none", got)
	}
}

func TestMustStaple(t *testing.T) {
	tests := []struct {
		name        string
		policy      string
		responderUp bool
		rsaSibling  bool // a plain RSA certificate for the same name
		wantErr     bool
		wantStaple  string
		wantRSA     bool
		wantServed  bool
	}{
		{"refuse, staple available", edgetls.MustStapleRefuse, true, false, false, "good", false, true},
		{"refuse, no staple, no other certificate", edgetls.MustStapleRefuse, false, false, true, "", false, false},
		{"refuse, no staple, falls back to the sibling", edgetls.MustStapleRefuse, false, true, false, "none", true, false},
		{"serve, no staple", edgetls.MustStapleServe, false, false, false, "none", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, port, must := ocspSetup(t, leafOpts{file: "must", names: []string{"must.example.com"}, mustStaple: true})
			if tc.responderUp {
				startResponder(t, p, port, indexLine(must.cert, time.Time{}), "", "")
			}
			other := p.leaf(t, leafOpts{file: "default", names: []string{"a.example.com"}})
			certs := []edgetls.CertFiles{other.files(), must.files()}
			if tc.rsaSibling {
				certs = append(certs, p.leaf(t, leafOpts{file: "sibling", names: []string{"must.example.com"}, rsa: true}).files())
			}
			e := start(t, edgetls.Options{Certificates: certs, OCSP: edgetls.OCSPOptions{MustStaple: tc.policy}})
			cs, err := dial(e.addr, p.client("must.example.com"))
			if gotErr := err != nil; gotErr != tc.wantErr {
				t.Fatalf("handshake: got %v, want error=%v", err, tc.wantErr)
			}
			if err == nil {
				if got := stapleStatus(t, cs, must, p); got != tc.wantStaple && !(tc.wantRSA && len(cs.OCSPResponse) == 0) {
					t.Errorf("staple: got %s, want %s", got, tc.wantStaple)
				}
				if _, isEC := cs.PeerCertificates[0].PublicKey.(*ecdsa.PublicKey); isEC == tc.wantRSA {
					t.Errorf("certificate key: got ECDSA=%v, want RSA=%v", isEC, tc.wantRSA)
				}
			}
			st := e.term.Status().Certificates[1]
			if st.Served != tc.wantServed || !st.OCSP.MustStaple {
				t.Errorf("status: got served=%v must_staple=%v, want served=%v must_staple=true", st.Served, st.OCSP.MustStaple, tc.wantServed)
			}
		})
	}

	t.Run("refused certificate comes back with its responder", func(t *testing.T) {
		p, port, must := ocspSetup(t, leafOpts{file: "must", names: []string{"must.example.com"}, mustStaple: true})
		e := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{must.files()}})
		if _, err := dial(e.addr, p.client("must.example.com")); err == nil {
			t.Fatal("handshake without staple: got success, want failure")
		}
		startResponder(t, p, port, indexLine(must.cert, time.Time{}), "", "")
		e.term.RefreshOCSP(context.Background())
		cs, err := dial(e.addr, p.client("must.example.com"))
		if err != nil {
			t.Fatalf("handshake after the responder came back: %v", err)
		}
		if got, want := stapleStatus(t, cs, must, p), "good"; got != want {
			t.Errorf("staple: got %s, want %s", got, want)
		}
	})
}

func TestOCSPResponderSignatures(t *testing.T) {
	tests := []struct {
		name       string
		delegate   bool
		ekuOCSP    bool
		wantState  string
		wantErrSub string
	}{
		{"signed by the issuer", false, false, "good", ""},
		{"delegated responder with OCSPSigning", true, true, "good", ""},
		{"delegated responder without OCSPSigning", true, false, "error", "OCSPSigning"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, port, l := ocspSetup(t, leafOpts{})
			var signer, signerKey string
			if tc.delegate {
				d := p.leaf(t, leafOpts{file: "responder", cn: "edge test OCSP responder", ekuOCSP: tc.ekuOCSP})
				signer, signerKey = d.certFile, d.keyFile
			}
			startResponder(t, p, port, indexLine(l.cert, time.Time{}), signer, signerKey)
			e := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{l.files()}})
			st := e.term.Status().Certificates[0].OCSP
			if st.State != tc.wantState || !strings.Contains(st.LastError, tc.wantErrSub) {
				t.Errorf("status: got state %q error %q, want %q containing %q", st.State, st.LastError, tc.wantState, tc.wantErrSub)
			}
			want := "none"
			if tc.wantState == "good" {
				want = "good"
			}
			if got := stapleStatus(t, mustDial(t, e.addr, p.client("a.example.com")), l, p); got != want {
				t.Errorf("staple: got %s, want %s", got, want)
			}
		})
	}
}

// TestReloadStaplesBeforeServing: a reloaded certificate carries its staple
// from its first handshake, and a must-staple replacement that cannot be
// stapled is refused while the previous certificate keeps serving.
func TestReloadStaplesBeforeServing(t *testing.T) {
	p, port, cur := ocspSetup(t, leafOpts{file: "site", names: []string{"site.example.com"}})
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	next := p.leaf(t, leafOpts{file: "next", names: []string{"site.example.com"}, ocspURL: url})
	must := p.leaf(t, leafOpts{file: "must", names: []string{"site.example.com"}, ocspURL: url, mustStaple: true})
	index := indexLine(cur.cert, time.Time{}) + indexLine(next.cert, time.Time{}) + indexLine(must.cert, time.Time{})
	r := startResponder(t, p, port, index, "", "")
	e := start(t, edgetls.Options{Certificates: []edgetls.CertFiles{cur.files()}})
	client := p.client("site.example.com")

	next.installAt(t, cur)
	if err := e.term.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	cs := mustDial(t, e.addr, client)
	if got, want := cs.PeerCertificates[0].SerialNumber, next.cert.SerialNumber; got.Cmp(want) != 0 {
		t.Fatalf("after reload: serial %s, want %s", got, want)
	}
	if got, want := stapleStatus(t, cs, next, p), "good"; got != want {
		t.Errorf("first handshake after reload: staple %s, want %s", got, want)
	}

	r.stop()
	must.installAt(t, cur)
	if err := e.term.Reload(); err == nil || !strings.Contains(err.Error(), "must-staple") {
		t.Errorf("Reload to an unstapled must-staple certificate: got %v, want a refusal", err)
	}
	cs = mustDial(t, e.addr, client)
	if got, want := cs.PeerCertificates[0].SerialNumber, next.cert.SerialNumber; got.Cmp(want) != 0 {
		t.Errorf("after refused reload: serial %s, want the previous %s", got, want)
	}
	if got, want := stapleStatus(t, cs, next, p), "good"; got != want {
		t.Errorf("after refused reload: staple %s, want %s", got, want)
	}

	startResponder(t, p, port, index, "", "")
	if err := e.term.Reload(); err != nil {
		t.Fatalf("Reload with the responder back: %v", err)
	}
	cs = mustDial(t, e.addr, client)
	if got, want := cs.PeerCertificates[0].SerialNumber, must.cert.SerialNumber; got.Cmp(want) != 0 {
		t.Errorf("serial %s, want the must-staple %s", got, want)
	}
	if got, want := stapleStatus(t, cs, must, p), "good"; got != want {
		t.Errorf("must-staple staple %s, want %s", got, want)
	}
}
